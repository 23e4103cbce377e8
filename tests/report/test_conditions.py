"""The report names the drift between the run's phases, and flags the knob effects verification did not bear out."""

from infrarsi.trial import Metrics, Trial, TrialStatus
from infrarsi.report.conditions import drift_lines, unreproduced_effects
from infrarsi.rundir import EffectRecord
from infrarsi.trial.verified import VerifiedCandidate


def _t(i, role, load):
    return Trial(id=i, setting={}, status=TrialStatus.OK, role=role, metrics=Metrics(step_time_s=1.0),
                 conditions={"load_start": load, "load_end": load})


def test_the_load_rising_between_search_and_verification_is_named():
    trials = [_t(1, "doctor", 1.1), _t(2, "search", 1.2), _t(3, "search", 1.2), _t(4, "verify", 6.0),
              _t(5, "verify", 6.0)]
    assert drift_lines(trials) == ["Load average rose from 1.2 during the search to 6.0 during verification."]
    assert drift_lines(trials[:3]) == []  # 1.1 -> 1.2: no shift


def test_effects_of_a_candidate_that_did_not_reproduce_are_flagged():
    effects = [EffectRecord(feature=f, mean=0.1, lo=0.0, hi=0.2)
               for f in ("intra_op_threads=2", "bf16=True", "intra_op_threads=2*micro_batch_size=4")]
    why = "it did not reproduce: in the search it ran at 0.805 s/step ..."
    c = VerifiedCandidate(setting={"intra_op_threads": 2, "bf16": False}, promoted=False, reason="-", explanation=why)
    ok = VerifiedCandidate(setting={"bf16": True}, promoted=True, reason="-")
    flagged = unreproduced_effects(effects, [c, ok], {"intra_op_threads": 1, "bf16": False})
    assert flagged == {"intra_op_threads=2": why, "intra_op_threads=2*micro_batch_size=4": why}
