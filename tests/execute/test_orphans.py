"""Trial processes die with their runner (kill -9 included), and a resumed run ends whatever of a running trial
escaped its process group before it launches the trial again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from infrarsi.execute.local import processes_with_token

# A runner that starts one trial whose leader starts a worker, prints both pids, then waits to be killed.
RUNNER = r"""
import sys, time
from pathlib import Path
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.spec import LaunchSpec
code = sys.argv[2]
h = LocalExecutor().submit(LaunchSpec(argv=["python", "-c", code], time_limit_s=600), Path(sys.argv[1]), token=sys.argv[3])
print(h.job_id, flush=True)
time.sleep(600)
"""
WORKER = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          "print(c.pid, flush=True); time.sleep(600)")
# The worker leaves the trial's process group (setsid): only its token finds it.
ESCAPER = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
           "start_new_session=True); print(c.pid, flush=True); time.sleep(600)")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start_and_kill(tmp_path: Path, code: str, token: str) -> tuple[int, int]:
    """Start RUNNER with the trial ``code``; once the worker runs, kill -9 the runner. (leader, worker) pids."""
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), code, token], stdout=subprocess.PIPE, text=True)
    leader = int(runner.stdout.readline())
    deadline = time.monotonic() + 30
    while not (tmp_path / "stdout").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int((tmp_path / "stdout").read_text().split()[0])
    assert _alive(leader) and _alive(worker)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    return leader, worker


def _gone_within(pids, seconds):
    deadline = time.monotonic() + seconds
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def test_kill_9_of_the_runner_ends_the_trial_and_its_workers(tmp_path):
    token = f"tok-pdeath-{uuid.uuid4().hex[:8]}"
    leader, worker = _start_and_kill(tmp_path, WORKER, token)
    assert _gone_within([leader, worker], 10), "the trial outlived its runner"
    assert _gone_within(processes_with_token(token), 5), processes_with_token(token)


def test_resume_ends_a_process_that_left_the_trial_group_before_relaunching(tmp_path):
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.executor import Handle

    token = f"tok-escaped-{uuid.uuid4().hex[:8]}"
    leader, escaped = _start_and_kill(tmp_path, ESCAPER, token)
    assert _gone_within([leader], 10)
    deadline = time.monotonic() + 10  # the group's watchdog ends with the group
    while processes_with_token(token) != [escaped] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive(escaped) and processes_with_token(token) == [escaped], processes_with_token(token)  # out of reach
    handle = Handle(kind="local", trial_dir=str(tmp_path), token=token, job_id=str(leader),
                    submitted_at=time.time(), time_limit_s=600)
    assert LocalExecutor().adopt(handle) is None  # what Runner.resume does for a local trial before relaunching it
    assert _gone_within([escaped], 5)  # SIGKILL sent; on a loaded machine it can take a moment to land
