"""A time-out says both numbers: the limit the trial ran under and when it was killed (limit + kill grace)."""

from __future__ import annotations

from infrarsi.execute.classify import classify
from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus


def test_the_timeout_reason_names_the_limit_and_the_grace(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    ex = LocalExecutor(LocalExecutor.Config(kill_grace_s=1.5))
    out = wait(ex, ex.submit(LaunchSpec(argv=["python", "-c", code], time_limit_s=1.0), tmp_path, token="tok-grace"))
    v = classify(out, None)
    assert v.status is TrialStatus.TIMEOUT
    assert out.wall_s >= 2.5  # the limit, then the grace it ignored
    assert v.reason.startswith("past its time limit of 1 s: killed after ") and "(up to 1.5 s)" in v.reason, v.reason
