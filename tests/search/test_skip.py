"""Out of memory before launching (search/skip.py): a setting whose fake-step estimate is above capacity by more than
the estimate's stated error is not launched; inside the band, or without a stated error, it runs."""

from __future__ import annotations

import math

from infrarsi.estimate.run import FAKE_STEP_RESIDUAL_SD
from infrarsi.search.skip import SKIP_Z, over_capacity
from infrarsi.trial.memory_estimate import MemoryEstimate

GiB = 2**30


def _estimate(peaks: dict[int, float], basis: str = "fake step", sd: float | None = FAKE_STEP_RESIDUAL_SD):
    return MemoryEstimate(peak=lambda setting: peaks[setting["mbs"]], basis=lambda setting: basis, residual_sd=sd)


def test_a_setting_above_capacity_beyond_the_stated_error_is_skipped_with_the_arithmetic():
    band = math.exp(SKIP_Z * FAKE_STEP_RESIDUAL_SD)  # 1.105 at sd 0.05
    est = _estimate({1: 8 * GiB, 2: 10.5 * GiB, 4: 12 * GiB})
    assert over_capacity(est, {"mbs": 1}, 10 * GiB) is None  # fits
    assert over_capacity(est, {"mbs": 2}, 10 * GiB) is None  # 5% over: inside the estimate's error, it runs
    why = over_capacity(est, {"mbs": 4}, 10 * GiB)
    assert why == (f"estimated peak 12.000 GiB per rank > capacity 10.000 GiB x exp(2 x the estimate's stated error "
                   f"0.05) = {10 * band:.3f} GiB (+20% over capacity): not launched")


def test_no_skip_without_a_figure_the_fake_step_made_or_an_error_it_states():
    assert over_capacity(_estimate({4: 20 * GiB}, basis="analytical (estimate failed)"), {"mbs": 4}, 10 * GiB) is None
    assert over_capacity(_estimate({4: 20 * GiB}, sd=None), {"mbs": 4}, 10 * GiB) is None  # the analytical model
    assert over_capacity(None, {"mbs": 4}, 10 * GiB) is None
    assert over_capacity(_estimate({4: 20 * GiB}), {"mbs": 4}, None) is None


def test_a_plain_function_states_nothing_about_itself_so_nothing_is_skipped_on_it():
    # A MemoryEstimate's optional statements are declared with defaults (no probing): a plain setting -> bytes
    # function, as the Tuner takes it, has the basis "offset" and no stated error, so it skips nothing.
    from infrarsi.search import Tuner
    from infrarsi.knobs import Knob, KnobSpace

    space = KnobSpace(knobs=[Knob(name="mbs", kind="int", domain=[1, 2, 4])])
    tuner = Tuner(space, memory_capacity_bytes=10 * GiB, memory_estimate=lambda s: 20 * GiB)
    est = tuner.memory_estimate
    assert isinstance(est, MemoryEstimate) and est.residual_sd is None and est.interaction_sd is None
    assert est.basis({"mbs": 4}) == "offset" and est({"mbs": 4}) == 20 * GiB
    assert over_capacity(est, {"mbs": 4}, 10 * GiB) is None
    assert MemoryEstimate.of(est) is est and MemoryEstimate.of(None) is None
