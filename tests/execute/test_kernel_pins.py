"""A kernel trial of a locked run where the seal key cannot be read: isolated locally (the key reads as empty)
and as a Slurm job on a node without the user's key. The launch carries the pins (candidate value -> its
file's sha256, checked against the sealed verdict file by the stage that holds the key), so the candidate runs;
the same launch without its pins is refused, because the trial cannot check the seal itself."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from infrarsi.adapters import get_adapter
from infrarsi.contract import write_lock
from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.execute.slurm import SlurmExecutor
from infrarsi.kernels import verdicts
from tests.referee.conftest import ROOT, tiny

KERNEL_FILE = "kernels/rmsnorm/triton_rows.py"
KERNEL = f"{KERNEL_FILE}@rows4"  # one of the file's VARIANTS: pinned as such


@pytest.fixture
def pinned_launch(tmp_path, monkeypatch):
    """(run dir, the launch of a setting that uses KERNEL, pinned to the run's sealed verdicts)."""
    project = tmp_path / "project"
    (project / "kernels/rmsnorm").mkdir(parents=True)
    shutil.copy(ROOT / KERNEL_FILE, project / KERNEL_FILE)
    # Two iterations, not tiny()'s six: what is checked is whether the candidate may load and run, not its step
    # times, and each step through Triton's CPU interpreter costs ~0.5 s.
    text = tiny(knobs=f'kernel_rmsnorm = ["{KERNEL}"]')
    for old, new in (("train_iters = 6", "train_iters = 2"), ("warmup_steps = 2", "warmup_steps = 1"),
                     ("measured_steps = 4", "measured_steps = 1"), ("compare_steps = 6", "compare_steps = 2")):
        assert old in text, old
        text = text.replace(old, new)
    (project / "c.toml").write_text(text)
    monkeypatch.chdir(project)  # the run works from its repository's root; candidates are named relative to it
    contract, _ = write_lock(project / "c.toml", project / "run")
    run = project / "run"
    f = verdicts.record(run, {KERNEL: {"op": "rmsnorm", "verdict": "pass",
                                       "sha256": hashlib.sha256((project / KERNEL_FILE).read_bytes()).hexdigest()}})
    adapter = get_adapter("minigpt")
    setting = adapter.knob_space(contract).complete({"kernel_rmsnorm": KERNEL, "micro_batch_size": 4})
    spec = verdicts.pinned(adapter, f).launch(contract, setting)
    pin = f"{(project / KERNEL_FILE).resolve()}@rows4"
    assert f"rmsnorm={KERNEL}" in " ".join(spec.argv) and f'"{pin}"' in spec.env[verdicts.PINS_ENV]
    return run, spec


def _unpinned(spec):
    return spec.model_copy(update={"env": {k: v for k, v in spec.env.items() if k != verdicts.PINS_ENV}})


def _stderr(trial_dir: Path) -> str:
    return (trial_dir / "stderr").read_text(errors="replace")


@pytest.mark.skipif(isolation_problem() is not None, reason=f"no trial isolation here: {isolation_problem()}")
def test_an_isolated_trial_runs_its_pinned_kernel_without_the_key(pinned_launch):
    run, spec = pinned_launch
    ex = LocalExecutor()
    assert ex.isolates(run / "trials" / "0")  # the key is there, and hidden from the trial
    out = wait(ex, ex.submit(spec, run / "trials" / "0", token="tok-pinned"), timeout_s=300)
    assert out.returncode == 0, _stderr(run / "trials" / "0")[-2000:]
    assert verdicts.REFUSED not in _stderr(run / "trials" / "0")
    out = wait(ex, ex.submit(_unpinned(spec), run / "trials" / "1", token="tok-unpinned"), timeout_s=300)
    err = " ".join(_stderr(run / "trials" / "1").split())
    # the isolation hides the run directory (and the key): the trial cannot check the verdict file itself
    assert out.returncode == 2 and f"{verdicts.REFUSED}: rmsnorm={KERNEL} cannot be checked: the run's verdict file" in err
    assert "cannot be read here" in err, err[-2000:]


@pytest.mark.slurm
@pytest.mark.slow  # the local pinned run: test_an_isolated_trial_runs_its_pinned_kernel_without_the_key
def test_a_slurm_job_runs_its_pinned_kernel_on_a_node_without_the_key(pinned_launch, slurm, tmp_path):
    run, spec = pinned_launch
    node_key = tmp_path / "node-home" / ".infrarsi" / "seal.key"  # where a node without the user's home looks
    spec = spec.model_copy(update={"env": {**spec.env, "INFRARSI_SEAL_KEY": str(node_key)}})
    ex = SlurmExecutor(env=slurm.env)
    out = wait(ex, ex.submit(spec, run / "trials" / "0", token="tok-slurm-pinned"), timeout_s=300)
    assert out.state == "COMPLETED" and out.returncode == 0, _stderr(run / "trials" / "0")[-2000:]
    assert "export INFRARSI_KERNEL_PINS=" in (run / "trials" / "0" / "job.sbatch").read_text()
    assert not node_key.exists()  # the trial never looked for a key
    out = wait(ex, ex.submit(_unpinned(spec), run / "trials" / "1", token="tok-slurm-unpinned"), timeout_s=300)
    err = " ".join(_stderr(run / "trials" / "1").split())
    # isolated on its node (this machine's Slurm node has bwrap): no run directory to check; else no key
    assert out.returncode == 2 and ("cannot be read here" in err or "sealed with another key" in err), err[-2000:]
