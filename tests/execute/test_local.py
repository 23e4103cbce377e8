"""LocalExecutor against real processes: exit, time-out, cancel, memory cap, signals, process groups."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor, kill_token, processes_with_token
from infrarsi.trial import LaunchSpec

PY = sys.executable
MiB = 2**20


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_exit_outputs_env_and_memory_limit(tmp_path):
    code = ("import os, resource; print('cap', os.environ['INFRARSI_MEMORY_CAP_BYTES'], "
            "resource.getrlimit(resource.RLIMIT_DATA)[0], os.getpgid(0) == os.getpid(), os.environ['EXTRA']); "
            "import sys; print('to stderr', file=sys.stderr); sys.exit(3)")
    spec = LaunchSpec(argv=["python", "-c", code], env={"EXTRA": "x1"}, memory_cap_bytes=300 * MiB)
    ex = LocalExecutor()
    t0 = time.monotonic()
    h = ex.submit(spec, tmp_path, token="tok-exit")
    out = wait(ex, h)
    elapsed = time.monotonic() - t0
    assert out.returncode == 3 and out.signal is None and not out.timed_out
    assert (tmp_path / "stdout").read_text().split() == ["cap", str(300 * MiB), str(300 * MiB), "True", "x1"]
    assert "to stderr" in (tmp_path / "stderr").read_text()
    assert 0 < out.wall_s <= elapsed and h.job_id.isdigit()


def test_memory_cap_turns_a_big_allocation_into_memoryerror(tmp_path):
    spec = LaunchSpec(argv=["python", "-c", "b = bytearray(400 * 2**20)"], memory_cap_bytes=200 * MiB)
    ex = LocalExecutor()
    out = wait(ex, ex.submit(spec, tmp_path, token="tok-mem"))
    assert out.returncode == 1
    assert "MemoryError" in (tmp_path / "stderr").read_text()


def test_timeout_kills_the_whole_group_including_sigterm_ignoring_children(tmp_path):
    # The leader starts a child that ignores SIGTERM, prints both pids, then hangs.
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)']); "
            "print(c.pid, flush=True); time.sleep(600)")
    spec = LaunchSpec(argv=["python", "-c", code], time_limit_s=1.0)
    ex = LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5))
    t0 = time.monotonic()
    h = ex.submit(spec, tmp_path, token="tok-timeout")
    out = wait(ex, h)
    assert out.timed_out and not out.cancelled
    assert out.signal == signal.SIGTERM  # the leader took the polite signal
    assert time.monotonic() - t0 < 6
    assert any("time limit of 1 s" in e for e in out.evidence)
    child = int((tmp_path / "stdout").read_text().split()[0])
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "a SIGTERM-ignoring child outlived the time-out"


def test_cancel_and_signal_are_recorded(tmp_path):
    ex = LocalExecutor()
    h = ex.submit(LaunchSpec(argv=["python", "-c", "import time; time.sleep(600)"]), tmp_path / "a", token="tok-cancel")
    time.sleep(0.2)
    ex.cancel(h)
    out = wait(ex, h)
    assert out.cancelled and not out.timed_out and out.signal == signal.SIGTERM
    h2 = ex.submit(LaunchSpec(argv=["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]),
                   tmp_path / "b", token="tok-segv")
    out2 = wait(ex, h2)
    assert out2.signal == signal.SIGSEGV and out2.returncode is None
    assert any("SIGSEGV" in e for e in out2.evidence)


def test_missing_command_is_a_failed_launch_not_an_exception(tmp_path):
    ex = LocalExecutor()
    out = wait(ex, ex.submit(LaunchSpec(argv=["no-such-binary-xyz", "--flag"]), tmp_path, token="tok-missing"))
    assert out.returncode not in (0, None)
    assert "FileNotFoundError" in (tmp_path / "stderr").read_text()


def test_leftover_processes_are_found_and_ended_by_token(tmp_path):
    ex = LocalExecutor()
    h = ex.submit(LaunchSpec(argv=["python", "-c", "import time; time.sleep(600)"]), tmp_path, token="tok-orphan")
    deadline = time.monotonic() + 5
    while not processes_with_token("tok-orphan") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert int(h.job_id) in processes_with_token("tok-orphan")
    killed = kill_token("tok-orphan")
    assert int(h.job_id) in killed
    out = wait(ex, h)
    assert out.signal == signal.SIGKILL
    assert processes_with_token("tok-orphan") == []
    assert os.getpid() not in killed
