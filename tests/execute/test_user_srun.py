"""A launch that starts its own srun: its options kept, each task in the box on its node (execute/user_srun.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.execute import user_srun
from infrarsi.execute.executor import wait
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner, unisolated
from infrarsi.execute.slurm import BWRAP_PER_USER_TASK, SlurmExecutor
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus


def _run_dir(tmp_path: Path) -> Path:
    """A run directory with a record the trial must not read; returns its trial 0's directory."""
    run = tmp_path / "run"
    (run / "trials" / "0").mkdir(parents=True)
    (run / "noise.json").write_text('{"mde": 0.05}')
    (run / "contract.lock").write_text("{}")
    return run / "trials" / "0"


def _job_line(script: str) -> list[str]:
    """The job script's line that starts the user's srun, as the shell splits it."""
    [line] = [ln for ln in script.splitlines() if ln.startswith("srun ")]
    return shlex.split(line.replace('"${infrarsi_dev[@]}"', ""))


def test_split_keeps_srun_and_its_options_and_refuses_an_srun_without_a_command():
    own = user_srun.split(["srun", "-N", "1", "--ntasks-per-node=1", "--label", "--container-image=nvcr.io#x",
                           "torchrun", "--nproc-per-node=2", "train.py"])
    assert own.srun == ["srun", "-N", "1", "--ntasks-per-node=1", "--label", "--container-image=nvcr.io#x"]
    assert own.command == ["torchrun", "--nproc-per-node=2", "train.py"]
    assert own.count("-N", "--nodes") == 1 and own.value("--container-image") == "nvcr.io#x"
    assert user_srun.split(["torchrun", "train.py"]) is None
    with pytest.raises(ValueError, match="srun has no command after its options"):
        user_srun.split(["srun", "--ntasks-per-node=1"])


def test_the_job_gets_the_tasks_and_cpus_the_users_srun_asks_for():
    shape = lambda argv, procs: user_srun.job_shape(user_srun.split(argv), processes=procs, nodes=1)  # noqa: E731
    assert shape(["srun", "--ntasks-per-node=1", "torchrun", "--nproc-per-node=2", "t.py"], 2) == (1, 2)
    assert shape(["srun", "torchrun", "--nproc-per-node=2", "t.py"], 2) == (1, 2)  # torchrun starts the ranks
    assert shape(["srun", "bash", "train.sh"], 2) == (1, 2)  # so does a script that runs a launcher
    assert shape(["srun", "python", "train.py"], 2) == (2, 1)  # one rank per task
    assert shape(["srun", "-n", "4", "-c", "3", "python", "train.py"], 4) == (4, 3)


def test_each_task_of_the_users_srun_enters_the_box_with_every_option_kept_and_quoted(tmp_path):
    trial = _run_dir(tmp_path)
    ex = SlurmExecutor(SlurmExecutor.Config(isolation="on"))
    odd = "--comment=a b;touch /tmp/pwned$(id)"
    spec = LaunchSpec(argv=["srun", "--ntasks-per-node=2", "--label", odd, "python", "-c", "print('x y')"],
                      processes=2, time_limit_s=60)
    script = ex.script(spec, trial, token="t0k")
    assert "#SBATCH --ntasks-per-node=2" in script and "#SBATCH --cpus-per-task=1" in script
    words = _job_line(script)
    assert words[:4] == ["srun", "--ntasks-per-node=2", "--label", odd]  # as written, one word each
    bwrap = words.index("bwrap")
    assert words[4:bwrap] == ["/bin/sh", "-c", 'exec "$@" 9<"$0"', str(trial.resolve() / "seccomp.bpf")] or \
        words[4:bwrap] == []  # each task opens the keyring filter for its own bwrap (when this machine made one)
    inner = words[words.index("--", bwrap) + 1:]
    assert inner[1:5] == ["-I", "-S", inner[3], "--inner"] and inner[3].endswith("trial_wrapper.py")
    assert inner[5] == "/dev/null" and inner[-2:] == ["-c", "print('x y')"]  # the user's program, last
    assert ex.command_line(spec)[:4] == ["srun", "--ntasks-per-node=2", "--label", odd]


@pytest.mark.slurm
def test_a_launch_with_its_own_srun_runs_each_task_isolated_on_the_node(slurm, tmp_path):
    """The user's srun (with --label) starts two tasks; each is in the box: no run directory, repository read-only."""
    trial = _run_dir(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    code = ("import os, pathlib; run = pathlib.Path(os.environ['INFRARSI_TRIAL_DIR']).parent.parent\n"
            "try:\n    open('PWNED', 'w'); w = 'ok'\nexcept OSError as e:\n    w = e.strerror\n"
            "print('task', os.environ['SLURM_PROCID'], 'sees the run:', (run / 'noise.json').exists(), 'write:', w)")
    ex = SlurmExecutor(env=slurm.env)
    spec = LaunchSpec(argv=["srun", "--ntasks-per-node=2", "--label", "python", "-c", code], cwd=str(repo),
                      processes=2, time_limit_s=60)
    h = ex.submit(spec, trial, token="tok-own-srun")
    out = wait(ex, h, timeout_s=120)
    assert out.state == "COMPLETED" and out.returncode == 0, (trial / "stderr").read_text()
    assert h.sandboxed and not h.unsandboxed_why and h.isolation == BWRAP_PER_USER_TASK and h.network == "shared"
    lines = sorted((trial / "stdout").read_text().splitlines())
    assert lines == ["0: task 0 sees the run: False write: Read-only file system",
                     "1: task 1 sees the run: False write: Read-only file system"], lines  # --label kept
    assert not (repo / "PWNED").exists()


class SrunToy(ToyAdapter):
    """The toy workload launched the way a cluster team writes it: its own srun, with options."""

    def launch(self, contract, setting):
        spec = super().launch(contract, setting)
        return spec.model_copy(update={"argv": ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *spec.argv]})


@pytest.mark.slurm
def test_a_trial_with_its_own_srun_is_recorded_isolated_and_needs_no_opt_in(slurm, tmp_path):
    rec = RunRecord(tmp_path / "run")
    with Runner(rec, SlurmExecutor(env=slurm.env), SrunToy(), toy_contract(timeout_s=120)) as r:
        [t] = r.run([{"mode": "ok", "step_ms": 100}])
    assert t.status is TrialStatus.OK, t.evidence
    assert t.isolation == BWRAP_PER_USER_TASK and t.network == "shared" and not unisolated(t), t.warnings
    assert rec.launch_info(t.id).handle.isolation == BWRAP_PER_USER_TASK
    assert (rec.trial_dir(t.id) / "command").read_text().startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=1")


@pytest.mark.parametrize("argv, said", [
    (["srun", "--container-image=nvcr.io#nvidia/pytorch:24.05-py3", "--container-mounts=/data:/data", "python", "t.py"],
     "pyxis's container shares the node's processes, network and environment"),
    (["srun", "docker", "run", "--rm", "img", "python", "t.py"], "docker's daemon starts the container outside"),
    (["srun", "enroot", "start", "img", "python", "t.py"], "enroot's container shares the node's processes"),
])
def test_a_container_that_is_no_isolation_leaves_the_trial_unisolated_with_the_reason(tmp_path, argv, said):
    """pyxis/enroot and docker are not counted as isolation: the job runs the launch as written, recorded unisolated
    (the runner watches the repository and the seals; promotion needs the contract's opt-in)."""
    trial = _run_dir(tmp_path)
    ex = SlurmExecutor(SlurmExecutor.Config(isolation="on"))
    spec = LaunchSpec(argv=argv, processes=1, time_limit_s=60)
    assert said in ex.isolation_why(trial, spec) and not ex.isolates(trial, spec)
    script = ex.script(spec, trial, token="t")
    assert "bwrap" not in script and ("exec " + shlex.join(argv)) in script  # as written: its options kept


@pytest.mark.slurm
def test_srun_then_a_script_then_torchrun_runs_its_ranks_in_the_box(slurm, tmp_path):
    """The usual wrapper chain below sbatch: srun runs one task, a shell script, whose torchrun starts 2 ranks, all
    inside the task's box (the script and its torchrun included)."""
    import sys

    from toy import TOY

    trial = _run_dir(tmp_path)
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\nset -euo pipefail\nNPROC=$1\n"
                      f"exec {shlex.quote(sys.executable)} -m torch.distributed.run --standalone --nproc-per-node $NPROC "
                      f"{TOY} --mode ok --steps 3 --step-ms 20\n")
    ex = SlurmExecutor(env=slurm.env)
    spec = LaunchSpec(argv=["srun", "--ntasks-per-node=1", "bash", str(script), "2"], processes=2, time_limit_s=120)
    h = ex.submit(spec, trial, token="tok-chain")
    out = wait(ex, h, timeout_s=180)
    assert out.state == "COMPLETED" and out.returncode == 0, (trial / "stderr").read_text()[-2000:]
    assert h.isolation == BWRAP_PER_USER_TASK
    job = (trial / "job.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=1" in job and "#SBATCH --cpus-per-task=2" in job  # one task, two ranks
    starts = [ln for ln in (trial / "stdout").read_text().splitlines() if ln.startswith("toy start")]
    assert sorted(ln.split()[3] for ln in starts) == ["rank=0", "rank=1"], starts


def test_a_launch_with_its_own_srun_is_refused_by_the_local_executor_in_one_line(tmp_path):
    """srun cannot reach a controller from inside a local trial's box: the trial is refused before it starts."""
    from infrarsi.execute.local import LocalExecutor

    rec = RunRecord(tmp_path / "run")
    with Runner(rec, LocalExecutor(), SrunToy(), toy_contract()) as r:
        [t] = r.run([{"mode": "ok"}])
    assert t.status is TrialStatus.INVALID and t.reason == "the launch starts its own srun: run it with INFRARSI_EXECUTOR=slurm"
    assert not (rec.trial_dir(t.id) / "stdout").exists()  # never launched
