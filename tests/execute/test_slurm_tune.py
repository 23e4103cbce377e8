"""``infrarsi tune`` end to end on the real one-node Slurm for a launch that starts its own srun (the cluster shape):
every trial a batch job whose srun tasks run in the box, and the winner promoted with no opt-in.

Slow (10-20 minutes on the shared 2-core machine: ~14 megatron-core trials of 40-70 s each). The default run keeps
its mechanism covered by tests/execute/test_user_srun.py (the user's srun kept and each task boxed, on the real
Slurm; such a trial recorded isolated through the runner) and tests/execute/test_podman_trials.py (the promotion's
isolation gate on such trials)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from infrarsi.execute.slurm import BWRAP_PER_USER_TASK

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_slurm_tune.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_slurm_tune_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.slurm
def test_an_srun_launch_tunes_end_to_end_on_slurm_and_promotes(slurm, tmp_path):
    bench = _bench()
    project = tmp_path / "project"
    bench.write_project(project)
    out = bench.tune(project, slurm)
    assert out["returncode"] == 0, out["log"][-3000:]
    assert out["promoted"] and out["promoted"][0]["speedup"] > 1, out["promoted"]
    assert out["trials"] and all(t["isolation"] == BWRAP_PER_USER_TASK and not t["warnings"] for t in out["trials"]), \
        [(t["id"], t["isolation"], t["warnings"]) for t in out["trials"]]
    job = (project / out["trials"][0]["path"] / "job.sbatch").read_text()  # the path: relative to the project, or not
    [line] = [ln for ln in job.splitlines() if ln.startswith("srun ")]
    assert line.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=1 ") and " bwrap " in f" {line} "
    assert "#SBATCH --ntasks-per-node=1" in job and "#SBATCH --cpus-per-task=2" in job  # the srun's own shape
