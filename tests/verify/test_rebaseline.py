"""The baseline measured close in time: search trials are told on the doctor's scale through the latest baseline run
before them; the baseline runs again every k search trials and when the load shifts."""

from infrarsi.trial import Metrics, Trial, TrialStatus
from infrarsi.verify import rebaseline


def _t(i, role, step=None, load=None, status=TrialStatus.OK):
    cond = {} if load is None else {"load_start": load, "load_end": load}
    return Trial(id=i, setting={}, status=status, role=role, conditions=cond,
                 metrics=Metrics(step_time_s=step) if status is TrialStatus.OK else Metrics())


def test_a_search_trial_is_scaled_by_the_latest_baseline_before_it():
    trials = [_t(1, "doctor", 1.0), _t(2, "doctor", 1.0), _t(3, "search", 0.8), _t(4, "rebaseline", 2.0),
              _t(5, "search", 1.6), _t(6, "rebaseline", 1.0, status=TrialStatus.CRASH), _t(7, "search", 1.0)]
    told = {t.id: rebaseline.rescaled(t, trials, 1.0).metrics.step_time_s for t in trials if t.role == "search"}
    # trial 3 runs beside the doctor's baseline; 5 and 7 beside the rebaseline at 2.0 s (the crashed one is not a
    # measure): a machine twice as slow makes 1.6 s the doctor's 0.8 s, and 1.0 s the doctor's 0.5 s
    assert told == {3: 0.8, 5: 0.8, 7: 0.5}


def test_the_baseline_runs_again_every_k_search_trials_and_when_the_load_shifts(monkeypatch):
    monkeypatch.setattr(rebaseline, "load", lambda: 1.0)
    trials = [_t(1, "doctor", 1.0, load=1.0), _t(2, "search", 0.8, load=1.0)]
    assert rebaseline.due(trials, 3) is None
    assert rebaseline.due(trials + [_t(3, "search", 0.8), _t(4, "search", 0.8)], 3) == \
        "3 search trials since the baseline last ran"
    assert rebaseline.due(trials + [_t(3, "search", 0.8), _t(4, "search", 0.8)], 0) is None  # off
    monkeypatch.setattr(rebaseline, "load", lambda: 6.0)
    assert rebaseline.due(trials, 3) is None  # one search trial since: a swinging load does not rerun it every time
    two = trials + [_t(3, "search", 0.8, load=1.0)]
    assert rebaseline.due(two, 3) == "the load average moved from 1.0 to 6.0"
    assert rebaseline.due(two + [_t(4, "rebaseline", 2.0, load=6.0), _t(5, "search", 1.6), _t(6, "search", 1.6)],
                          3) is None  # measured at the new load
