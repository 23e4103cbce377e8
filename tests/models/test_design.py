"""Design: main columns are KnobSpace.encode (or its step coding for ordered knobs); interactions follow
the knobs present; priors map to columns by feature name."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.models import Design
from infrarsi.testing.synthetic import ten_knob_space
from infrarsi.trial.prior import Prior


def test_main_columns_are_the_space_encoding_and_interactions_follow_knobs():
    space = ten_knob_space()
    d = Design(space, target="time", ordinal=False)
    cands = space.sample(0, 300)
    x = d.matrix(cands)
    np.testing.assert_array_equal(x[:, : len(space.feature_names)], space.encode(cands))
    assert "log2(micro_batch_size)*recompute_granularity=full" in d.names
    assert "log2(tensor_parallel)*sequence_parallel=True" in d.names
    assert "log2(pipeline_parallel)*log2(virtual_pipeline)*log2(micro_batch_size)" in d.names
    j = d.names.index("log2(micro_batch_size)*recompute_granularity=full")
    row = d.matrix([{"micro_batch_size": 8, "recompute_granularity": "full"}])[0]
    assert row[j] == 3.0  # log2(8 / 1) * 1


def test_interactions_only_for_present_knobs(space):
    d = Design(space, target="memory")
    assert d.interactions == (("micro_batch_size", "recompute_granularity"),)
    with pytest.raises(ValueError, match="unknown knob"):
        Design(space, target="time", interactions=[("micro_batch_size", "sequence_parallel")])
    assert Design(space, target="time", interactions=[]).p == len(space.feature_names)


def test_priors_map_to_columns(space):
    pr = Prior(knob="recompute_granularity", value="full", time_mean=0.3, time_sd=0.1, mem_mean=-0.6, mem_sd=0.2, source="llm")
    d = Design(space, target="memory", priors=[pr])
    j = d.names.index("recompute_granularity=full")
    assert (d.prior_mean[j], d.prior_sd[j], d.prior_source[j]) == (-0.6, 0.2, "llm")
    assert d.prior_sd[0] == 1.0 and d.prior_source[0] == "uninformative"
    with pytest.raises(ValueError, match="two priors for recompute_granularity=full"):
        Design(space, target="time", priors=[pr, pr])
    with pytest.raises(ValueError, match=r"settings\[1\] has tensor_parallel=3"):
        d.matrix([{}, {"tensor_parallel": 3}])


def test_ordered_knobs_are_coded_by_steps_and_map_back_to_value_effects():
    from infrarsi.knobs import Knob, KnobSpace

    space = KnobSpace([Knob(name="tp", kind="int", domain=[1, 2, 4, 8], default=2),
                       Knob(name="rc", kind="categorical", domain=["none", "full"])])
    priors = [Prior(knob="tp", value=1, time_mean=0.1, time_sd=0.1, mem_mean=0.0, mem_sd=0.1, source="llm"),
              Prior(knob="tp", value=4, time_mean=0.1, time_sd=0.1, mem_mean=0.0, mem_sd=0.1, source="llm"),
              Prior(knob="tp", value=8, time_mean=0.4, time_sd=0.2, mem_mean=0.0, mem_sd=0.1, source="llm")]
    d = Design(space, target="time", priors=priors)
    cols = [d.names.index(f"tp={v}") for v in (1, 4, 8)]
    x = d.matrix([{"tp": v} for v in (1, 2, 4, 8)])[:, cols]
    # default 2: value 1 is one step down; 4 one step up; 8 two steps up (through 4)
    np.testing.assert_array_equal(x, [[1, 0, 0], [0, 0, 0], [0, 1, 0], [0, 1, 1]])
    # step 4 -> 8: mean 0.4 - 0.1, variance 0.2^2 - 0.1^2; value effects add the steps back up
    assert d.prior_mean[cols[2]] == pytest.approx(0.3)
    assert d.prior_sd[cols[2]] == pytest.approx((0.04 - 0.01) ** 0.5)
    np.testing.assert_allclose(d.to_levels @ d.prior_mean, d.level_prior_mean)
    assert d.level_prior_mean[cols[2]] == 0.4
    # a step's variance is at least a quarter of its value's (equal sds would leave it none)
    flat = Design(space, target="time")
    assert flat.prior_sd[cols[2]] == pytest.approx(0.5)
    # a categorical knob keeps its one-hot column
    assert d.matrix([{"rc": "full"}])[0, d.names.index("rc=full")] == 1.0
