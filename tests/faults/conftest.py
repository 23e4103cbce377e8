"""A simulated 8 x H100 run directory after init + doctor (a few seconds on the CPU), and the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env, **kw):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, **kw)


def _as_a_shell_starts_it() -> None:
    """In the child before exec: the signal state a shell gives a command (SIGINT and SIGTERM handled by default
    and not blocked), whatever the test process's own is: an ignored or blocked signal is inherited through exec."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def start(*args, env):
    """The CLI in the background, in its own process group (so a test can kill -9 it and what it started), with
    the signal state a shell gives it."""
    return subprocess.Popen([sys.executable, "-m", "infrarsi.cli", *map(str, args)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_as_a_shell_starts_it)


def signal_state(pid: int) -> str:
    """The process's blocked and ignored signal masks (/proc/PID/status: SigBlk, SigIgn), for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as e:
        return f"no /proc/{pid}/status ({e.strerror})"
    return "; ".join(ln for ln in lines if ln.startswith(("SigBlk", "SigIgn", "SigCgt")))


def trials(run_dir, role=None, finished=True):
    out = {}
    for p in sorted((Path(run_dir) / "trials").glob("*/trial.json")):
        t = json.loads(p.read_text())
        if (role is None or t["role"] == role) and (not finished or t["status"] != "running"):
            out[t["id"]] = t
    return out


def wait_for(cond, timeout_s=120.0, proc=None):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return bool(cond())
        time.sleep(0.1)
    return False


def one_line_error(r):
    """The command failed with exactly one error line on stderr and no traceback (notes may precede it)."""
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr[-3000:]
    assert len(r.stderr.splitlines()) <= 4, r.stderr[-3000:]
    return lines[0]


def sim_env(tmp_path):
    return {**os.environ, "INFRARSI_BANK": str(tmp_path / "bank.sqlite"), "INFRARSI_LLM": "off",
            "INFRARSI_CACHE": str(tmp_path / "cache"), "COLUMNS": "400"}


def sim_contract(tmp_path, max_trials=4, timeout_s=None):
    contract = tmp_path / "sim.toml"
    text = (ROOT / "contracts" / "sim-dense8b-h100x8.toml").read_text()
    text = text.replace("doctor_repeats = 5", "doctor_repeats = 3").replace("max_trials = 40", f"max_trials = {max_trials}")
    if timeout_s is not None:
        text = text.replace("timeout_s = 60", f"timeout_s = {timeout_s}")
    contract.write_text(text)
    return contract


@pytest.fixture
def sim_run(tmp_path):
    env = sim_env(tmp_path)
    run_dir = tmp_path / "run"
    r = cli("init", sim_contract(tmp_path), "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr
    r = cli("doctor", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr
    return run_dir, env
