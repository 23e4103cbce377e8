"""LaunchEnd + parse -> status, with evidence; loss-trace checks."""

from __future__ import annotations

import math

from infrarsi.adapters.base import ParsedRun
from infrarsi.execute.classify import apply_loss_check, classify, loss_drift
from infrarsi.execute.executor import LaunchEnd
from infrarsi.trial import Metrics, TrialStatus

OK = ParsedRun(status=TrialStatus.OK, metrics=Metrics(step_time_s=0.5, losses=[5.0, 4.0, 3.0]))


def test_precedence_cancel_timeout_oom_then_parse():
    assert classify(LaunchEnd(state="killed", signal=15, cancelled=True), OK).status is TrialStatus.CANCELLED
    v = classify(LaunchEnd(state="killed", signal=15, timed_out=True, wall_s=9, evidence=["killed after 9 s"]), OK)
    assert v.status is TrialStatus.TIMEOUT and v.signal == 15 and v.metrics.step_time_s is None
    assert v.evidence[0] == "killed after 9 s"
    v = classify(LaunchEnd(state="OUT_OF_MEMORY", oom=True, evidence=["JobState=OUT_OF_MEMORY"]), OK)
    assert v.status is TrialStatus.OOM and v.metrics.step_time_s is None and v.metrics.losses == [5.0, 4.0, 3.0]
    v = classify(LaunchEnd(state="exited", returncode=0), OK)
    assert v.status is TrialStatus.OK and v.exit_code == 0 and v.metrics.step_time_s == 0.5


def test_ok_log_from_a_failed_process_is_a_crash():
    v = classify(LaunchEnd(state="exited", returncode=None, signal=11), OK, stderr="Segmentation fault\n")
    assert v.status is TrialStatus.CRASH and v.signal == 11 and "SIGSEGV" in v.reason
    v = classify(LaunchEnd(state="exited", returncode=2), OK)
    assert v.status is TrialStatus.CRASH and "exit status 2" in v.reason


def test_parser_failure_keeps_the_output_as_evidence():
    v = classify(LaunchEnd(state="exited", returncode=0), None, stdout="\ufffd\ufffd garbage line\n",
                 parse_error="ValueError: could not convert")
    assert v.status is TrialStatus.CRASH
    assert any("parser failed: ValueError" in e for e in v.evidence)
    assert any("garbage line" in e for e in v.evidence)


def test_adapter_failure_without_evidence_gets_the_log_tail():
    parsed = ParsedRun(status=TrialStatus.CRASH)
    v = classify(LaunchEnd(state="exited", returncode=1), parsed, stderr="Traceback\nRuntimeError: boom\n")
    assert v.status is TrialStatus.CRASH and "RuntimeError: boom" in v.evidence and "exit status 1" in v.reason


def test_loss_drift():
    worst, bad = loss_drift([5.0, 4.04, 3.3], [5.0, 4.0, 3.0], compare_steps=3, rtol=0.02)
    assert math.isclose(worst, 0.1) and len(bad) == 1 and "step 3" in bad[0]
    assert loss_drift([5.0], [5.0, 4.0], compare_steps=2, rtol=0.02)[1]  # too short: the check cannot be made
    assert loss_drift([float("nan"), 4.0], [5.0, 4.0], compare_steps=2, rtol=0.5)[1][0].startswith("step 1")
    v = classify(LaunchEnd(state="exited", returncode=0), OK)
    assert apply_loss_check(v, [5.0, 4.0, 3.0], compare_steps=3, rtol=0.02).status is TrialStatus.OK
    d = apply_loss_check(v, [5.0, 4.0, 2.0], compare_steps=3, rtol=0.02)
    assert d.status is TrialStatus.NUMERICS_DRIFT and d.metrics.step_time_s == 0.5 and "rtol" in d.reason
