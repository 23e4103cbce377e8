"""Runner: real trials through the local executor -- every failure kind, resource limits, resume after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from toy import ToyAdapter, toy_contract

from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner, local_parallel_limit
from infrarsi.trial import TrialStatus

GiB = 2**30


def test_parallel_limit_arithmetic():
    # 8 requested; 2 processes each on 6 cores -> 3; 2 x 1 GiB each in 5 GiB -> 2.
    assert local_parallel_limit(8, processes=2, cap_bytes=GiB, cores=6, usable_bytes=5 * GiB) == 2
    assert local_parallel_limit(8, processes=1, cap_bytes=None, cores=6) == 6
    assert local_parallel_limit(1, processes=4, cap_bytes=GiB, cores=2, usable_bytes=GiB) == 1  # never below 1


def test_every_outcome_becomes_a_recorded_status(tmp_path):
    rec = RunRecord(tmp_path)
    contract = toy_contract(timeout_s=3)
    settings = [
        {"mode": "ok"}, {"mode": "hang"}, {"mode": "garbage"}, {"mode": "alloc", "alloc_mb": 300},
        {"mode": "signal", "signal": 11}, {"mode": "exit"}, {"mode": "drift"},
    ]
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), ToyAdapter(), contract,
                config=Runner.Config(parallel=2)) as runner:
        trials = runner.run(settings, reference_losses=[4.9, 4.8, 4.7])
    ok, hang, garbage, oom, sig, exit_, drift = trials
    assert ok.status is TrialStatus.OK and 0.015 < ok.metrics.step_time_s < 1.0 and ok.exit_code == 0
    assert ok.cost.wall_s > 0 and ok.cost.devices == 1 and ok.started_at and ok.finished_at
    assert hang.status is TrialStatus.TIMEOUT and hang.signal == signal.SIGTERM
    assert any("time limit of 3 s" in e for e in hang.evidence) and 3 <= hang.cost.wall_s < 8
    assert garbage.status is TrialStatus.CRASH and any("garbage" in e for e in garbage.evidence)
    assert oom.status is TrialStatus.OOM and any("MemoryError" in e for e in oom.evidence)
    assert oom.metrics.step_time_s is None
    assert sig.status is TrialStatus.CRASH and sig.signal == signal.SIGSEGV
    assert exit_.status is TrialStatus.CRASH and exit_.exit_code == 1
    assert any("failed on purpose" in e for e in exit_.evidence)
    assert drift.status is TrialStatus.NUMERICS_DRIFT and drift.metrics.step_time_s is not None, drift.reason
    # On disk: one directory per trial with everything needed to audit it.
    assert [t.id for t in rec.trials()] == [0, 1, 2, 3, 4, 5, 6]
    assert {t.status for t in rec.finished()} == {t.status for t in trials}
    d = rec.trial_dir(ok.id)
    assert {"trial.json", "launch.json", "command", "env.json", "stdout", "stderr"} <= {p.name for p in d.iterdir()}
    assert "toy_workload.py --mode ok" in (d / "command").read_text()
    assert "iteration" in (d / "stdout").read_text()
    assert rec.get(ok.id) == ok
    costs = rec.cost_by_status()
    assert costs["timeout"] == hang.cost.device_s and abs(costs["total"] - sum(t.cost.device_s for t in trials)) < 1e-9


def test_invalid_and_contract_violations_are_never_launched(tmp_path):
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract()) as runner:
        bad, fixed = runner.run([{"step_ms": 7}, {"seq_length": 4096}])
    assert bad.status is TrialStatus.INVALID and "step_ms" in bad.evidence[0]
    assert fixed.status is TrialStatus.CONTRACT_VIOLATION and "seq_length" in fixed.evidence[0]
    for t in (bad, fixed):
        assert not (rec.trial_dir(t.id) / "stdout").exists() and t.cost.wall_s == 0


def test_cancel_a_running_trial(tmp_path):
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract(timeout_s=60)) as runner:
        fut = runner.submit({"mode": "hang"})
        deadline = time.monotonic() + 20
        while not runner.running_ids():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert runner.cancel(runner.running_ids()[0])
        t = fut.result()
    assert t.status is TrialStatus.CANCELLED and t.signal == signal.SIGTERM and rec.get(t.id) == t
    assert any("cancelled after" in e for e in t.evidence)


def _max_overlap(trials) -> int:
    events = sorted([(t.started_at, 1) for t in trials] + [(t.finished_at, -1) for t in trials])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def test_parallel_trials_respect_cores_and_memory(tmp_path):
    contract = toy_contract(cap_gib=1.0)
    settings = [{"step_ms": 100}] * 4
    # cores: 4 requested, 2 cores, 1 process each -> at most 2 at once
    with Runner(RunRecord(tmp_path / "a"), LocalExecutor(), ToyAdapter(), contract,
                config=Runner.Config(parallel=4, cores=2, usable_memory_bytes=64 * GiB)) as r:
        by_cores = r.run(settings)
    # memory: 4 requested, 8 cores, 2.5 GiB usable at 1 GiB per process -> at most 2 at once
    with Runner(RunRecord(tmp_path / "b"), LocalExecutor(), ToyAdapter(), contract,
                config=Runner.Config(parallel=4, cores=8, usable_memory_bytes=int(2.5 * GiB))) as r:
        by_mem = r.run(settings)
    for trials in (by_cores, by_mem):
        assert all(t.status is TrialStatus.OK for t in trials)
        assert _max_overlap(trials) == 2


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {toydir!r})
    from toy import ToyAdapter, toy_contract
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    with Runner(RunRecord({run!r}), LocalExecutor(), ToyAdapter(), toy_contract(timeout_s=60)) as r:
        r.run([{{"mode": "ok"}}])
        r.run([{{"mode": "ok", "step_ms": 500}}])
""")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_resume_after_kill_9_requeues_local_trials_and_keeps_finished_ones(tmp_path):
    run = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(toydir=str(Path(__file__).parent), run=str(run))])
    rec = RunRecord(run)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t1 = rec.get(1)
        if t1 is not None and t1.job_id and "toy start" in (rec.trial_dir(1) / "stdout").read_text():
            break
        time.sleep(0.05)
    else:
        driver.kill()
        raise AssertionError("the driver never started its second trial")
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    orphan = int(rec.get(1).job_id)
    deadline = time.monotonic() + 10
    while _alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(orphan)  # the trial died with its runner (trial_wrapper's watchdog)
    first = (rec.trial_dir(0) / "trial.json").read_bytes()
    assert [t.status for t in rec.trials()] == [TrialStatus.OK, TrialStatus.RUNNING]

    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract(timeout_s=60)) as r:
        resumed = [f.result() for f in r.resume()]
    assert [t.id for t in resumed] == [1] and resumed[0].status is TrialStatus.OK
    assert resumed[0].job_id != str(orphan) and rec.launch_info(1).attempt == 1
    assert any("interrupted by a restart" in e for e in resumed[0].evidence)
    assert (rec.trial_dir(0) / "trial.json").read_bytes() == first  # finished trials are never rerun
    assert [t.id for t in rec.trials()] == [0, 1]
