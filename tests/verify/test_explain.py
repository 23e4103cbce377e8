"""A candidate that does not reproduce is explained in words: its search and A/B figures side by side, and the
conditions of each."""

from infrarsi.execute.end_to_end import pair_times
from infrarsi.trial import Metrics, Trial, TrialStatus
from infrarsi.trial.record import Cost
from infrarsi.knobs import Setting
from infrarsi.verify.reverify import explain

CAND = {"intra_op_threads": 2}


def _t(i, role, step, load, setting=None):
    return Trial(id=i, setting=setting or {"intra_op_threads": 1}, status=TrialStatus.OK, role=role,
                 metrics=Metrics(step_time_s=step), conditions={"load_start": load, "load_end": load})


def test_the_search_figures_and_the_pairs_side_by_side_with_the_load_of_each():
    trials = [_t(1, "doctor", 2.1, 1.2), _t(2, "doctor", 2.2, 1.2), _t(3, "search", 0.805, 1.2, CAND)]
    pairs = [(_t(10, "verify", 2.3, 6.0), _t(11, "verify", 6.3, 6.0, CAND)),
             (_t(12, "verify", 2.9, 6.0), _t(13, "verify", 8.1, 6.0, CAND))]
    times = [pair_times(a, b, startup=0.0) for a, b in pairs]  # not clocked: the lines' figures
    words = explain(Setting(CAND), trials, pairs, times, None, promoted=False)
    assert words == ("it did not reproduce: in the search it ran at 0.805 s/step against the baseline's 2.1-2.2 s at "
                     "load average 1.2 (2.67x); in the A/B pairs it ran at 6.3-8.1 s/step against the baseline's "
                     "2.3-2.9 s at load average 6.0 (0.36x); the machine changed: load average rose from 1.2 during "
                     "the search to 6.0 during verification")
    assert explain(Setting(CAND), trials, pairs, times, None, promoted=True) == ""


def _clocked(i, step, wall, setting=None):
    """A verify trial the harness clocked: 4 steps of ``step`` s by its lines, ``wall`` s from launch to exit."""
    return Trial(id=i, setting=setting or {"intra_op_threads": 1}, status=TrialStatus.OK, role="verify",
                 metrics=Metrics(step_time_s=step, steps_run=4), cost=Cost(wall_s=wall),
                 conditions={"load_start": 1.2, "load_end": 1.2})


def test_the_words_use_the_pair_times_the_decision_used_for_a_candidate_held_to_its_end_to_end_time():
    """A candidate whose lines say 1.5 s against the baseline's 2.0 s, but whose process ran 60 s for its 4 steps
    against the baseline's 18 s (54 s outside its steps against 10 s): with no startup_allowance_s its pairs are
    scored by the end-to-end bound, (60 - 10) s / 4 = 12.5 s, and the words say so, as the decision saw them; with
    startup_allowance_s = 50 its 44 s of extra start-up are allowed and the words give its lines' 1.5 s."""
    trials = [_t(1, "doctor", 2.0, 1.2), _t(2, "search", 1.5, 1.2, CAND)]
    pairs = [(_clocked(10, 2.0, 18.0), _clocked(11, 1.5, 60.0, CAND)),
             (_clocked(12, 2.0, 18.0), _clocked(13, 1.5, 60.0, CAND))]
    times = [pair_times(a, b, startup=0.0) for a, b in pairs]
    assert [round(x[1], 6) for x in times] == [12.5, 12.5]
    assert "(60.000 - 10.000) s / 4 = 12500.0 ms" in times[0][2], times[0][2]
    words = explain(Setting(CAND), trials, pairs, times, None, promoted=False)
    assert words.startswith("it did not reproduce"), words
    assert "in the A/B pairs it ran at 12.5 s/step against the baseline's 2 s" in words, words
    assert "(0.16x), 2 of its 2 pairs scored by their end-to-end bound" in words, words
    allowed = [pair_times(a, b, startup=50.0) for a, b in pairs]
    assert [x[1:] for x in allowed] == [(1.5, ""), (1.5, "")]
    words = explain(Setting(CAND), trials, pairs, allowed, None, promoted=False)
    assert "in the A/B pairs it ran at 1.5 s/step" in words and "(1.33x)" in words and "bound" not in words, words
    # beyond the allowance and the slack (max(1 s, half of 10 s)): the contract's 30 s count as free, (60 - 10 - 30) / 4
    (_, tb, note), _ = [pair_times(a, b, startup=30.0) for a, b in pairs]
    assert tb == 5.0 and "(60.000 - 10.000 - 30) s / 4" in note and "startup_allowance_s 30 s" in note, note
