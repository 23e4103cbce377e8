"""Trial processes die with their runner (SIGTERM and kill -9 included) and with their time-out, the ones that left
the trial's process group too (torchrun's ranks), and a resumed run ends whatever of a running trial is left before
it launches the trial again."""

from __future__ import annotations

import os
import re
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
from infrarsi.trial import LaunchSpec
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


def test_kill_9_of_the_runner_ends_a_process_that_left_the_trial_group(tmp_path):
    """The watchdog finds what left the group (setsid, as torchrun's ranks do) by the trial's token."""
    token = f"tok-escaped-{uuid.uuid4().hex[:8]}"
    leader, escaped = _start_and_kill(tmp_path, ESCAPER, token)
    assert _gone_within([leader, escaped], 10), "a process that left the trial's group outlived the runner"
    assert _gone_within(processes_with_token(token), 5), processes_with_token(token)


def test_resume_ends_a_process_of_the_trial_left_running_before_relaunching(tmp_path):
    """What the watchdog could not end (it was killed itself) is ended by token when a run resumes."""
    from infrarsi.execute.executor import Handle
    from infrarsi.execute.local import LocalExecutor

    token = f"tok-left-{uuid.uuid4().hex[:8]}"
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                            env={**os.environ, "INFRARSI_TRIAL_TOKEN": token})
    try:
        deadline = time.monotonic() + 10
        while processes_with_token(token) != [left.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with_token(token) == [left.pid]
        handle = Handle(kind="local", trial_dir=str(tmp_path), token=token, job_id=str(left.pid),
                        submitted_at=time.time(), time_limit_s=600)
        assert LocalExecutor().adopt(handle) is None  # what Runner.resume does for a local trial before relaunching
        assert left.wait(timeout=10) == -signal.SIGKILL
    finally:
        if left.poll() is None:
            left.kill()


# A real torchrun trial: 2 ranks (each, as torchrun starts it, in a session of its own) that print their pids and
# wait. IGNORE_TERM ranks ignore SIGTERM, as a rank does that is slow to act on it: torchrun's own forwarding of
# SIGTERM then cannot end them before the executor's grace period is over and torchrun is SIGKILLed.
RANK = """import os, signal, sys, time
if sys.argv[1:] == ["ignore-term"]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(1, f"rank {os.environ['RANK']} pid {os.getpid()}\\n".encode())  # one write: the ranks share the pipe
time.sleep(600)
"""
TORCHRUN_RUNNER = r"""
import sys, time
from pathlib import Path
from infrarsi.execute.local import LocalExecutor
from infrarsi.trial import LaunchSpec
argv = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *sys.argv[3:]]
h = LocalExecutor().submit(LaunchSpec(argv=argv, time_limit_s=600), Path(sys.argv[1]), token=sys.argv[2])
print(h.job_id, flush=True)
time.sleep(600)
"""


def _rank_pids(stdout: Path, n: int = 2, timeout_s: float = 120) -> list[int]:
    """The pids the ranks printed to the trial's stdout, once all ``n`` have (torch's start-up takes seconds)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = stdout.read_text() if stdout.exists() else ""
        pids = [int(p) for p in re.findall(r"rank \d+ pid (\d+)", text)]
        if len(pids) == n:
            return pids
        time.sleep(0.2)
    raise AssertionError(f"the torchrun ranks never started: {stdout.read_text() if stdout.exists() else ''!r}")


def _session(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def test_sigterm_of_the_runner_ends_every_torchrun_rank(tmp_path):
    """SIGTERM to the process running a trial (a tune, a run) ends torchrun and its ranks, though torchrun starts
    each rank in a session of its own (out of the trial's process group), and nothing is left with its token."""
    token = f"tok-sigterm-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    trial = tmp_path / "trial"
    runner = subprocess.Popen([sys.executable, "-c", TORCHRUN_RUNNER, str(trial), token, str(script)],
                              stdout=subprocess.PIPE, text=True)
    leader = int(runner.stdout.readline())
    ranks = _rank_pids(trial / "stdout")
    assert all(_session(r) != _session(leader) for r in ranks)  # the ranks are outside the trial's group
    runner.send_signal(signal.SIGTERM)
    runner.wait(timeout=30)
    assert _gone_within([leader, *ranks], 20), [p for p in [leader, *ranks] if _alive(p)]
    assert _gone_within(processes_with_token(token), 5), processes_with_token(token)


def test_a_timed_out_torchrun_trial_leaves_no_rank_behind(tmp_path):
    """A torchrun trial past its limit: SIGTERM (torchrun forwards it; these ranks ignore it), SIGKILL after the
    grace period, and every rank is gone when the executor reports the time-out."""
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.trial import LaunchSpec

    script = tmp_path / "rank.py"
    script.write_text(RANK)
    token = f"tok-timeout-{uuid.uuid4().hex[:8]}"
    ex = LocalExecutor(LocalExecutor.Config(kill_grace_s=1.0))
    argv = ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
            "ignore-term"]
    h = ex.submit(LaunchSpec(argv=argv, time_limit_s=600), tmp_path / "trial", token=token)
    ranks = _rank_pids(tmp_path / "trial" / "stdout")
    h = h.model_copy(update={"time_limit_s": 0.0})  # past its limit from now on
    out = None
    deadline = time.monotonic() + 60
    while out is None and time.monotonic() < deadline:
        out = ex.poll(h)
        time.sleep(0.1)
    assert out is not None and out.timed_out, out
    assert not [r for r in ranks if _alive(r)], "ranks outlived their timed-out trial"
    assert processes_with_token(token) == []
