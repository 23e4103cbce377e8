"""SlurmExecutor against a real one-node Slurm cluster (tests/execute/conftest.py starts it)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from toy import TOY, ToyAdapter, toy_contract

from infrarsi.execute.classify import classify
from infrarsi.execute.executor import Handle, wait
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.execute.slurm import SlurmExecutor, SlurmUnreachable, parse_scontrol
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus
from infrarsi.testing.slurm import free_port

MiB = 2**20


def test_script_always_has_mem_time_outputs_and_token(tmp_path):
    ex = SlurmExecutor(SlurmExecutor.Config(partition="debug", extra_args=["--exclusive"]))
    s = ex.script(LaunchSpec(argv=["python", "-m", "m", "--x", "a b"], env={"K": "v w"}, time_limit_s=61,
                             memory_cap_bytes=512 * MiB, processes=2), tmp_path, token="t0k")
    assert "#SBATCH --job-name=infrarsi-t0k" in s and "#SBATCH --comment=infrarsi-t0k" in s
    assert "#SBATCH --mem=1280M" in s  # 2 x 512 MiB + 256 MiB overhead
    assert "#SBATCH --time=2" in s and "#SBATCH --ntasks-per-node=2" in s and "#SBATCH --partition=debug" in s
    assert f"#SBATCH --output={tmp_path.resolve()}/stdout" in s and "#SBATCH --exclusive" in s
    assert "export K='v w'" in s and f"export INFRARSI_MEMORY_CAP_BYTES={512 * MiB}" in s
    assert "ulimit -d 524288" in s and "srun --ntasks-per-node=2" in s and "'a b'" in s
    nocap = ex.script(LaunchSpec(argv=["python", "-m", "torch.distributed.run", "t.py"], processes=2), tmp_path, token="x")
    assert "#SBATCH --mem=1024M" in nocap and "ulimit" not in nocap and "\nsrun " not in nocap  # (a path may say srun)
    assert "#SBATCH --cpus-per-task=2" in nocap  # torchrun starts the workers itself


def test_parse_scontrol_keeps_values_with_spaces():
    d = parse_scontrol("JobId=7 JobName=infrarsi-abc JobState=RUNNING Reason=None Command=/a b/c.sh WorkDir=/w ExitCode=0:0")
    assert d["JobId"] == "7" and d["Command"] == "/a b/c.sh" and d["ExitCode"] == "0:0"


def _executor(slurm, **cfg) -> SlurmExecutor:
    return SlurmExecutor(SlurmExecutor.Config(**cfg), env=slurm.env)


@pytest.mark.slurm
def test_job_runs_with_its_environment_and_outputs_come_back(slurm, tmp_path):
    code = ("import os, resource; print('cap', os.environ['INFRARSI_MEMORY_CAP_BYTES'], "
            "resource.getrlimit(resource.RLIMIT_DATA)[0], os.environ['EXTRA'], os.environ['SLURM_JOB_ID'])")
    spec = LaunchSpec(argv=["python", "-c", code], env={"EXTRA": "e1"}, memory_cap_bytes=200 * MiB, time_limit_s=60)
    ex = _executor(slurm)
    h = ex.submit(spec, tmp_path, token="tok-run")
    out = wait(ex, h, timeout_s=60)
    assert out.state == "COMPLETED" and out.returncode == 0 and out.signal is None
    assert (tmp_path / "stdout").read_text().split() == ["cap", str(200 * MiB), str(200 * MiB), "e1", h.job_id]
    assert "#SBATCH --mem=456M" in (tmp_path / "job.sbatch").read_text()


@pytest.mark.slurm
def test_cancel_and_our_own_time_limit(slurm, tmp_path):
    ex = _executor(slurm)
    spec = LaunchSpec(argv=["python", "-c", "import time; print('up', flush=True); time.sleep(600)"], time_limit_s=600)
    h = ex.submit(spec, tmp_path / "a", token="tok-cancel")
    deadline = time.monotonic() + 30
    while "up" not in (tmp_path / "a" / "stdout").read_text() if (tmp_path / "a" / "stdout").exists() else True:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    ex.cancel(h)
    out = wait(ex, h, timeout_s=30)
    assert out.state == "CANCELLED" and out.cancelled and out.signal == signal.SIGTERM
    assert h.job_id not in [j["job_id"] for j in ex.queue()]
    # A limit shorter than Slurm's minute granularity is enforced by infrarsi itself (scancel).
    h2 = ex.submit(spec.model_copy(update={"time_limit_s": 2}), tmp_path / "b", token="tok-limit")
    out2 = wait(ex, h2, timeout_s=60)
    assert out2.timed_out and not out2.cancelled
    assert any("time limit of 2 s" in e for e in out2.evidence)


@pytest.mark.slurm
def test_job_over_its_mem_is_killed_and_classified_oom(slurm, tmp_path):
    ex = _executor(slurm, default_mem_mb=150)  # no RLIMIT cap: only Slurm's --mem stands in the way
    # Holds the memory for ~2 s of steps, so a polling enforcer (no cgroups) sees it too.
    spec = LaunchSpec(argv=["python", TOY, "--mode", "alloc", "--alloc-mb", "600", "--step-ms", "500"], time_limit_s=60)
    h = ex.submit(spec, tmp_path, token="tok-oom")
    out = wait(ex, h, timeout_s=60)
    assert out.oom, out
    contract = toy_contract()
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    v = classify(out, ToyAdapter().parse(contract, stdout, stderr, out.returncode), stdout=stdout, stderr=stderr)
    assert v.status is TrialStatus.OOM
    assert any("OUT_OF_MEMORY" in e or "exceeded memory limit" in e for e in v.evidence)


@pytest.mark.slurm
def test_several_trials_run_as_parallel_jobs(slurm, tmp_path):
    rec = RunRecord(tmp_path)
    with Runner(rec, _executor(slurm), ToyAdapter(), toy_contract(), config=Runner.Config(parallel=3)) as r:
        t0 = time.monotonic()
        trials = r.run([{"step_ms": 500}] * 3)  # ~2 s of steps each
        took = time.monotonic() - t0
    assert all(t.status is TrialStatus.OK for t in trials), [t.evidence for t in trials]
    assert len({t.job_id for t in trials}) == 3
    assert took < 3 * 2.0 + 3  # concurrent, not one after another (each alone >= 2 s)
    for t in trials:
        assert "iteration" in (rec.trial_dir(t.id) / "stdout").read_text()
        assert t.cost.wall_s >= 1


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {toydir!r})
    from toy import ToyAdapter, toy_contract
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    from infrarsi.execute.slurm import SlurmExecutor
    with Runner(RunRecord({run!r}), SlurmExecutor(), ToyAdapter(), toy_contract(timeout_s=120)) as r:
        r.run([{{"mode": "ok", "step_ms": 500}}])
""")


@pytest.mark.slurm
def test_killed_runner_resumes_by_adopting_the_running_job(slurm, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, **slurm.env}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(toydir=str(Path(__file__).parent), run=str(run))], env=env)
    rec = RunRecord(run)
    deadline = time.monotonic() + 40
    while not ((t := rec.get(0)) and t.job_id):
        assert time.monotonic() < deadline and driver.poll() is None, "the driver never submitted its job"
        time.sleep(0.05)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    job_id, token = rec.get(0).job_id, rec.launch_info(0).token
    ex = _executor(slurm)
    assert ex.job_info(job_id)["JobState"] in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")  # still going without its runner
    with Runner(rec, ex, ToyAdapter(), toy_contract(timeout_s=120)) as r:
        [t] = [f.result() for f in r.resume()]
    assert t.id == 0 and t.status is TrialStatus.OK and t.job_id == job_id
    assert rec.launch_info(0).attempt == 0 and not any("restart" in e for e in t.evidence)
    named = slurm.client("squeue", "-h", "-t", "all", "--name", f"infrarsi-{token}", "-o", "%i").stdout.split()
    assert named == [job_id]  # submitted once, never twice
    # A job id that exists but carries another trial's token is not ours: never adopted.
    stranger = Handle(kind="slurm", trial_dir=str(tmp_path), token="someone-else", job_id=job_id, submitted_at=0,
                      time_limit_s=60)
    assert ex.adopt(stranger) is None and ex.poll(stranger).lost


# slow (~13 s: the client's own timeouts): a Slurm that cannot be used is one line naming slurm.conf by default in
# tests/execute/test_slurm_faults.py::test_garbage_or_missing_slurm_configuration_is_one_line[garbage]
@pytest.mark.slow
@pytest.mark.slurm
def test_unreachable_controller_is_one_line_naming_slurm_conf(slurm, tmp_path):
    bad = tmp_path / "slurm.conf"
    bad.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm.conf.read_text()))
    ex = SlurmExecutor(SlurmExecutor.Config(client_timeout_s=2), env={"SLURM_CONF": str(bad)})
    t0 = time.monotonic()
    with pytest.raises(SlurmUnreachable) as e:
        ex.submit(LaunchSpec(argv=["true"]), tmp_path / "t", token="tok-down")
    assert time.monotonic() - t0 < 10
    msg = str(e.value)
    assert "\n" not in msg and f"SLURM_CONF={bad}" in msg and "sbatch" in msg
    # Through the runner: the future raises, and the trial stays "running" on disk for a later resume.
    rec = RunRecord(tmp_path / "run")
    with Runner(rec, ex, ToyAdapter(), toy_contract()) as r:
        with pytest.raises(SlurmUnreachable):
            r.submit({}).result()
    assert [t.status for t in rec.trials()] == [TrialStatus.RUNNING] and rec.launch_info(0).token


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_time_limit_gives_timeout(slurm, tmp_path):
    """Slurm checks limits every 30 s and rounds to minutes: this costs 60-90 s."""
    ex = _executor(slurm, time_slack_s=1000)  # leave the limit to Slurm
    h = ex.submit(LaunchSpec(argv=["sleep", "600"], time_limit_s=60), tmp_path, token="tok-slurm-timeout")
    out = wait(ex, h, timeout_s=200, max_interval_s=2)
    assert out.state == "TIMEOUT" and out.timed_out


@pytest.mark.slurm
def test_job_submitted_just_before_a_crash_is_found_by_its_token(slurm, tmp_path):
    """sbatch went through but the runner died before recording the job id: resume finds it by token."""
    rec, ex, adapter, contract = RunRecord(tmp_path), _executor(slurm), ToyAdapter(), toy_contract()
    runner = Runner(rec, ex, adapter, contract)
    setting = runner.complete({})
    t = rec.start(setting)
    spec = adapter.launch(contract, setting)
    rec.write_launch(t.id, handle=None, spec=spec, attempt=0, token="tok-gap")
    h = ex.submit(spec, rec.trial_dir(t.id), token="tok-gap")
    assert rec.get(t.id).job_id is None
    with runner:
        [done] = [f.result() for f in runner.resume()]
    assert done.status is TrialStatus.OK, done.evidence
    assert done.job_id == h.job_id and rec.launch_info(t.id).attempt == 0


# Reads a record of its run (the trial directory's grandparent) and tries to write the repository (its cwd).
PEEK = ("import os, pathlib; run = pathlib.Path(os.environ['INFRARSI_TRIAL_DIR']).parent.parent\n"
        "for what, f in (('read', lambda: (run / 'noise.json').read_text()), ('write', lambda: open('PWNED', 'w'))):\n"
        "    try:\n        f(); print(what, 'ok')\n    except OSError as e:\n        print(what, e.strerror)\n")


def _peek(ex, tmp_path, token):
    run, repo = tmp_path / "run", tmp_path / "repo"
    repo.mkdir()
    (run / "trials" / "0").mkdir(parents=True)
    (run / "noise.json").write_text('{"mde": 0.05}')
    spec = LaunchSpec(argv=["python", "-c", PEEK], cwd=str(repo), time_limit_s=60)
    h = ex.submit(spec, run / "trials" / "0", token=token)
    out = wait(ex, h, timeout_s=120)
    assert out.state == "COMPLETED" and out.returncode == 0, (run / "trials" / "0" / "stderr").read_text()
    return h, (run / "trials" / "0" / "stdout").read_text().split("\n"), run, repo


@pytest.mark.slurm
def test_a_slurm_trial_runs_isolated_on_a_node_with_bwrap(slurm, tmp_path):
    h, lines, run, repo = _peek(_executor(slurm), tmp_path, "tok-iso")
    assert h.sandboxed and not h.unsandboxed_why  # the probe job found bwrap on the node
    assert "bwrap" in (run / "trials" / "0" / "job.sbatch").read_text()
    assert lines[:2] == ["read No such file or directory", "write Read-only file system"], lines
    assert not (repo / "PWNED").exists()


@pytest.mark.slurm
def test_a_slurm_trial_on_a_node_without_bwrap_is_recorded_unisolated(slurm, tmp_path):
    h, lines, run, repo = _peek(_executor(slurm, bwrap="/nonexistent/bwrap"), tmp_path, "tok-bare")
    assert not h.sandboxed and "the Slurm node has no working bwrap" in h.unsandboxed_why, h
    assert "/nonexistent/bwrap" in h.unsandboxed_why and "bwrap" not in (run / "trials" / "0" / "job.sbatch").read_text()
    assert lines[:2] == ["read ok", "write ok"], lines  # what it could do, which the runner's record says
    from infrarsi.execute.runner import _unsandboxed

    assert _unsandboxed(h)[0].startswith("ran without isolation: the Slurm node has no working bwrap")


@pytest.mark.slurm
def test_each_task_of_a_multi_task_slurm_job_is_isolated(slurm, tmp_path):
    """srun's tasks are started by slurmd, not by the batch script: the script isolates each (srun ... bwrap ...)."""
    ex = _executor(slurm)
    run = tmp_path / "run"
    (run / "trials" / "0").mkdir(parents=True)
    (run / "noise.json").write_text("{}")
    code = ("import os, pathlib; run = pathlib.Path(os.environ['INFRARSI_TRIAL_DIR']).parent.parent\n"
            "print('task', os.environ.get('SLURM_PROCID'), 'sees the run:', (run / 'noise.json').exists(), flush=True)")
    h = ex.submit(LaunchSpec(argv=["python", "-c", code], processes=2, time_limit_s=60), run / "trials" / "0",
                  token="tok-tasks")
    out = wait(ex, h, timeout_s=120)
    assert out.state == "COMPLETED" and out.returncode == 0, (run / "trials" / "0" / "stderr").read_text()
    assert h.sandboxed and "srun --ntasks-per-node=2 " in (run / "trials" / "0" / "job.sbatch").read_text()
    lines = sorted((run / "trials" / "0" / "stdout").read_text().splitlines())
    assert lines == ["task 0 sees the run: False", "task 1 sees the run: False"], lines
