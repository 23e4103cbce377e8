"""Slurm faults against the real local cluster: a held job, a job stuck in the queue, the controller killed
mid-run and restarted, a garbage or missing configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi import exitcodes
from infrarsi.execute.executor import wait
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.execute.slurm import SlurmExecutor, SlurmPendingTimeout
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus

ROOT = Path(__file__).resolve().parents[2]


def _state(slurm, job_id):
    out = slurm.client("scontrol", "show", "job", job_id, "-o").stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def _until(cond, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slurm
def test_a_held_job_is_cancelled_and_the_trial_launched_again(slurm, tmp_path):
    rec = RunRecord(tmp_path / "run")
    ex = SlurmExecutor(env=slurm.env)
    with Runner(rec, ex, ToyAdapter(), toy_contract(timeout_s=120)) as r:
        fut = r.submit({"step_ms": 500})
        assert _until(lambda: rec.get(0) and rec.get(0).job_id and _state(slurm, rec.get(0).job_id).get("JobState") == "RUNNING")
        first = rec.get(0).job_id
        # What a controller restart does to a job it could not launch: requeued, held.
        assert slurm.client("scontrol", "requeuehold", first).returncode == 0
        t = fut.result(timeout=120)
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert t.job_id != first and rec.launch_info(0).attempt == 1
    assert any(f"slurm job {first} was held" in e and "Reason=job_requeued_in_held_state" in e for e in t.evidence)
    assert _state(slurm, first).get("JobState") == "CANCELLED"


@pytest.mark.slurm
def test_a_job_stuck_in_the_queue_stops_at_the_contracts_pending_timeout(slurm, tmp_path):
    ex = SlurmExecutor(env=slurm.env)
    assert slurm.client("scontrol", "update", "NodeName=localhost", "State=DRAIN", "Reason=maintenance").returncode == 0
    try:
        h = ex.submit(LaunchSpec(argv=["true"], pending_timeout_s=2), tmp_path, token="tok-pending")
        t0 = time.monotonic()
        with pytest.raises(SlurmPendingTimeout) as e:
            wait(ex, h, timeout_s=60)
        assert 2 <= time.monotonic() - t0 < 30
        msg = str(e.value)
        assert "\n" not in msg and f"slurm job {h.job_id}" in msg and "pending_timeout_s = 2 s" in msg and "Reason=" in msg
    finally:
        slurm.client("scancel", h.job_id)
        slurm.client("scontrol", "update", "NodeName=localhost", "State=RESUME")


def _cli(*args, env, **kw):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, **kw)


def _error_line(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.fixture
def sim_on_slurm(slurm, tmp_path):
    """A simulated run directory after init + doctor (local), whose run goes through Slurm."""
    text = (ROOT / "contracts" / "sim-dense8b-h100x8.toml").read_text()
    contract = tmp_path / "sim.toml"
    contract.write_text(text.replace("doctor_repeats = 5", "doctor_repeats = 3").replace("max_trials = 40", "max_trials = 3")
                        .replace("parallel_trials = 2", "parallel_trials = 1"))
    env = {**os.environ, "INFRARSI_BANK": str(tmp_path / "bank.sqlite"), "INFRARSI_LLM": "off",
           "INFRARSI_CACHE": str(tmp_path / "cache"), "COLUMNS": "400"}
    run_dir = tmp_path / "run"
    assert _cli("init", contract, "--run-dir", run_dir, env=env).returncode == 0
    assert _cli("doctor", "--run-dir", run_dir, env=env).returncode == 0
    return run_dir, {**env, **slurm.env, "INFRARSI_EXECUTOR": "slurm"}


@pytest.mark.slurm
@pytest.mark.parametrize("kind", ["garbage", pytest.param("missing", marks=pytest.mark.slow)])
def test_garbage_or_missing_slurm_configuration_is_one_line(sim_on_slurm, tmp_path, kind):
    run_dir, env = sim_on_slurm
    garbage = tmp_path / "garbage.conf"
    garbage.write_bytes(os.urandom(256))
    for conf in [str(garbage) if kind == "garbage" else str(tmp_path / "missing.conf")]:
        r = _cli("run", "--run-dir", run_dir, env={**env, "SLURM_CONF": conf})
        line = _error_line(r.stderr)
        if kind == "missing":  # refused before the first stage (cli.check_environment): bad usage, at once
            assert r.returncode == 2 and f"SLURM_CONF={conf} is not a file" in line, line
            continue
        assert r.returncode == 1
        assert f"SLURM_CONF={conf}" in line and "rerun `infrarsi run --run-dir" in line and len(line) < 800, line
    records = sorted((run_dir / "trials").glob("*/trial.json"))
    assert not [p for p in records if json.loads(p.read_text())["role"] == "search"
                and json.loads(p.read_text())["status"] not in ("running",)]


@pytest.mark.slurm
@pytest.mark.slow
def test_controller_killed_mid_run_is_one_line_and_the_rerun_after_restart_finishes(slurm, sim_on_slurm):
    run_dir, env = sim_on_slurm
    p = subprocess.Popen([sys.executable, "-m", "infrarsi.cli", "run", "--run-dir", str(run_dir)], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    search = lambda: [json.loads(f.read_text()) for f in (run_dir / "trials").glob("*/trial.json")
                      if json.loads(f.read_text())["role"] == "search"]
    assert _until(lambda: any(t.get("job_id") for t in search()), 120)
    slurm.kill_controller()
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise
    assert p.returncode == 1
    line = _error_line(err)
    assert "Slurm unreachable" in line and f"SLURM_CONF={slurm.conf}" in line and "adopt" in line, line
    slurm.restart_controller()
    r = _cli("run", "--run-dir", run_dir, env=env, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    final = [json.loads(f.read_text()) for f in (run_dir / "trials").glob("*/trial.json")]
    assert not [t for t in final if t["status"] == "running"]
    assert (run_dir / "verification.json").exists()


@pytest.mark.slurm
@pytest.mark.slow  # ~80 s on two cores; the gate itself: tests/search/test_run_stage.py, the report: tests/report
def test_a_run_on_nodes_without_bwrap_is_recorded_unisolated_and_promotes_nothing(sim_on_slurm):
    """The Slurm node has no bwrap (INFRARSI_BWRAP names one that is not there): every Slurm trial is recorded as
    unisolated; the candidates that would be promoted are not, for that reason; the report says so."""
    run_dir, env = sim_on_slurm
    r = _cli("run", "--run-dir", run_dir, env={**env, "INFRARSI_BWRAP": "/nonexistent/bwrap"}, timeout=600)
    assert r.returncode == exitcodes.NO_PROMOTION, r.stderr[-3000:]  # finished, nothing promoted
    slurm_trials = [json.loads(p.read_text()) for p in (run_dir / "trials").glob("*/trial.json")
                    if json.loads(p.read_text())["role"] in ("search", "verify")]
    assert slurm_trials and all(t["warnings"][0].startswith("ran without isolation: the Slurm node has no working "
                                                            "bwrap") for t in slurm_trials)
    ver = json.loads((run_dir / "verification.json").read_text())
    assert ver["candidates"] and not any(c["promoted"] for c in ver["candidates"])
    assert any("ran without isolation" in c["reason"] and "allow_unisolated" in c["reason"] for c in ver["candidates"])
    assert _cli("report", "--run-dir", run_dir, env=env).returncode == 0
    text = (run_dir / "report.md").read_text()
    assert "**Isolation:**" in text and "needs invariants.isolation.allow_unisolated = true" in text
