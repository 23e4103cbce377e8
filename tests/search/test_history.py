"""History: the told trials as (setting, outcome) pairs, and the views the models fit on."""

import pytest

from infrarsi.knobs import Setting
from infrarsi.search import History, Outcome


def _s(i: int) -> Setting:
    return Setting({"a": i})


def test_a_history_is_the_told_trials_in_order():
    h = History()
    h.add(_s(1), Outcome("ok", step_time_s=2.0, peak_memory_bytes=5e9))
    h.add(_s(2), Outcome("oom"))
    h.add(_s(3), Outcome("ok", step_time_s=1.0))  # ran, no peak reported
    h.add(_s(4), Outcome("numerics_drift", peak_memory_bytes=6e9))
    h.add(_s(5), Outcome("crash"))
    assert len(h) == h.version == 5 and h[1] == (_s(2), Outcome("oom"))
    assert [s for s, _ in h[1:3]] == [_s(2), _s(3)] and h.settings == [_s(i) for i in range(1, 6)]
    assert _s(2) in h and _s(9) not in h  # ``in`` asks whether a setting was told
    assert [s["a"] for s, _ in h.ok()] == [1, 3]
    assert [s["a"] for s, _ in h.ran()] == [1, 3, 4]
    # memory: OOMs and every trial that ran (without a peak: "peak <= capacity"); a crash says nothing
    assert [s["a"] for s, _ in h.memory_rows()] == [1, 2, 3, 4]
    assert [s["a"] for s, _ in h.memory_rows(from_runs_without_peak=False)] == [1, 2, 4]


def test_best_and_fastest_take_the_earlier_trial_on_a_tie():
    h = History()
    for i, t in enumerate([3.0, 1.0, 2.0, 1.0]):
        h.add(_s(i), Outcome("ok", step_time_s=t))
    h.add(_s(9), Outcome("oom"))
    assert h.best()[0] == _s(1)
    assert h.fastest(3) == [_s(1), _s(3), _s(2)]
    assert History().best() is None and History().fastest(2) == []


def test_only_outcomes_are_told():
    with pytest.raises(TypeError, match="needs an Outcome"):
        History().add(_s(1), {"status": "ok"})
