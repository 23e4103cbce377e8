"""A candidate that does not reproduce is explained in words: its search and A/B figures side by side, and the
conditions of each."""

from infrarsi.trial import Metrics, Trial, TrialStatus
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
    words = explain(Setting(CAND), trials, pairs, None, promoted=False)
    assert words == ("it did not reproduce: in the search it ran at 0.805 s/step against the baseline's 2.1-2.2 s at "
                     "load average 1.2 (2.67x); in the A/B pairs it ran at 6.3-8.1 s/step against the baseline's "
                     "2.3-2.9 s at load average 6.0 (0.36x); the machine changed: load average rose from 1.2 during "
                     "the search to 6.0 during verification")
    assert explain(Setting(CAND), trials, pairs, None, promoted=True) == ""
