"""Benchmark: ``infrarsi tune`` end to end on a real one-node Slurm, for a launch that starts its own ``srun``.

Writes a small project (a megatron-core GPT on this machine's CPU, 2 gloo ranks, the shipped
``launchers/pretrain_gpt_cpu.py``) whose launch is the cluster shape: an sbatch file whose ``srun`` runs one task
per node, a ``bash`` script whose ``torchrun`` starts the ranks (``--shape srun``: srun and torchrun in one script). Starts a one-node Slurm on localhost (``infrarsi/testing/slurm.py``), runs
``infrarsi tune`` with ``INFRARSI_EXECUTOR=slurm`` (every trial a batch job, each srun task in the box on the node),
and prints the tune's wall time, its trials, what isolated them, and the promoted speedup (baseline time /
candidate time, from the verification's A/B pairs) with its 95% interval.

    .venv/bin/python scripts/bench_slurm_tune.py                  # prints one line; exit 0 when it promoted
    .venv/bin/python scripts/bench_slurm_tune.py --shape srun     # srun -> torchrun

The 1-minute load average before and after is printed too: on a shared 2-core machine it decides how much the
wall time says.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infrarsi.testing.slurm import SlurmCluster  # noqa: E402

# The launch as a cluster team writes it: srun starts one task per node, torchrun starts the 2 ranks in it.
# A small GPT (2 layers, hidden 64, sequence 128, 32 sequences per step), tensor parallel 2, micro-batch 1.
TRAIN_SH = """#!/bin/bash
# megatron-core's GPT on this machine's CPU, launched the way a cluster team launches it: srun starts one task per
# node, whose torchrun starts the 2 ranks (gloo).
set -euo pipefail

LAUNCHERS={launchers}

srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\
    torchrun --standalone --nproc-per-node 2 ${{LAUNCHERS}}/pretrain_gpt_cpu.py \\
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \\
    --vocab-size 1024 --tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 32 --train-iters 6 \\
    --lr 3.0e-4 --seed 1234 \\
    --use-cpu-initialization --log-interval 1 --attention-dropout 0.0 --hidden-dropout 0.0
"""

# The same job as Megatron-LM's Slurm examples launch it: sbatch -> srun -> bash -> torchrun. The sbatch file sets the
# job's environment; scripts/train_gpt.sh (which takes the steps as its argument) sets the model and the layout (tensor
# parallel 2, micro-batch 1), where apply edits them. Tensor parallelism on gloo meets the other rank several times per layer and micro-batch:
# on CPU ranks that share 2 cores, data parallelism with larger micro-batches is much faster (a speedup a machine
# whose step times vary 20-30% run to run can confirm).
SBATCH_SH = """#!/bin/bash
#SBATCH --job-name=gpt-cpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=00:20:00

# megatron-core's GPT on this machine's CPU, launched the way Megatron-LM's Slurm examples are: one srun task per
# node runs scripts/train_gpt.sh, whose torchrun starts the 2 ranks (gloo).

export OMP_NUM_THREADS=1

srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash scripts/train_gpt.sh 6
"""

TRAIN_GPT_SH = """#!/bin/bash
# A small GPT (2 layers, hidden 64, sequence 128, 32 sequences per step) for $1 steps.
ITERS=$1
LAUNCHERS={launchers}

torchrun --standalone --nproc-per-node 2 ${{LAUNCHERS}}/pretrain_gpt_cpu.py \\
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \\
    --vocab-size 1024 --tensor-model-parallel-size 2 --micro-batch-size 1 \\
    --global-batch-size 32 --train-iters ${{ITERS}} --lr 3.0e-4 --seed 1234 --use-cpu-initialization \\
    --log-interval 1 --attention-dropout 0.0 --hidden-dropout 0.0
"""

CONTRACT = """name = "srun-cpu"

[workload]
adapter = "megatron"
launch = "{launch}"

[hardware]
kind = "cpu"
devices = 2
memory_capacity_gib = 2.0

[invariants.timing]
warmup_steps = 2
measured_steps = 4
timeout_s = 240

[invariants.loss]
compare_steps = 6
rtol = 0.05

[scope]
files = []

# data_parallel is derived (2 / TP); it is in scope so that settings that change TP stay consistent. Four settings
# in all (TP 2 or DP 2, micro-batch 1 or 8): the search's 4 trials see each, and the best is a large speedup.
[scope.knobs]
tensor_parallel = [1, 2]
data_parallel = [1, 2]
micro_batch_size = [1, 8]

# The doctor's noise gate is off (confirm_speedup): on a shared 2-core machine at load 15-25 the step time varies
# ~30% run to run, which would stop the tune at the doctor; the verification's sequential A/B test still decides.
[budget]
max_trials = 4
parallel_trials = 1
doctor_repeats = 3
confirm_speedup = 100.0
verify_pairs = 6
"""


SHAPES = {"sbatch": "sbatch -> srun -> bash -> torchrun", "srun": "srun -> torchrun"}


def write_project(where: Path, shape: str = "sbatch") -> Path:
    """The project in ``where``: ``scripts/sbatch_gpt.sh`` + ``scripts/train_gpt.sh`` (shape "sbatch") or
    ``train.sh`` (shape "srun"), and ``c.toml``; returns the contract's path."""
    where.mkdir(parents=True, exist_ok=True)
    if shape == "sbatch":
        (where / "scripts").mkdir(exist_ok=True)
        (where / "scripts" / "sbatch_gpt.sh").write_text(SBATCH_SH)
        (where / "scripts" / "train_gpt.sh").write_text(TRAIN_GPT_SH.format(launchers=ROOT / "launchers"))
        launch = "scripts/sbatch_gpt.sh"
    else:
        (where / "train.sh").write_text(TRAIN_SH.format(launchers=ROOT / "launchers"))
        launch = "train.sh"
    (where / "c.toml").write_text(CONTRACT.format(launch=launch))
    return where / "c.toml"


def tune(project: Path, cluster: SlurmCluster, *, timeout_s: float = 3000) -> dict:
    """Run ``infrarsi tune c.toml --run-dir run`` in ``project`` on ``cluster``; the figures as a dict."""
    env = {**os.environ, **cluster.env, "INFRARSI_EXECUTOR": "slurm"}
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    with open(project / "tune.log", "w") as log:
        r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "tune", "c.toml", "--run-dir", "run"], cwd=project,
                           env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    wall = time.monotonic() - t0
    run = project / "run"
    trials = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*/trial.json"))]
    verification = json.loads((run / "verification.json").read_text()) if (run / "verification.json").exists() else {}
    promoted = [c for c in verification.get("candidates", []) if c.get("promoted")]
    return {"returncode": r.returncode, "wall_s": wall, "load": (load0, os.getloadavg()[0]), "trials": trials,
            "promoted": promoted, "log": (project / "tune.log").read_text()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, help="where to write the project (default: a temporary folder)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="sbatch",
                   help="the launch: sbatch -> srun -> bash -> torchrun (default), or srun -> torchrun in one script")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slurm-tune-") as tmp:
        project = a.workdir or Path(tmp) / "project"
        write_project(project, a.shape)
        with SlurmCluster(cpus=4, workdir=Path(tmp) / "slurm") as cluster:
            out = tune(project, cluster)
    isolated: dict[str, int] = {}
    for t in out["trials"]:
        isolated[t.get("isolation") or "none"] = isolated.get(t.get("isolation") or "none", 0) + 1
    best = out["promoted"][0] if out["promoted"] else None
    level = f"{100 * best['level']:.2f}%" if best and best.get("level") else "95%"  # the sequential look's level
    said = (f"promoted {best['setting']}: speedup {best['speedup']:.2f}x ({level} interval {best['ci95'][0]:.2f}-"
            f"{best['ci95'][1]:.2f}, {best['pairs']} pairs)" if best else "promoted nothing")
    print(f"slurm tune ({SHAPES[a.shape]}, megatron-core CPU, 2 ranks): wall {out['wall_s']:.0f} s, "
          f"{len(out['trials'])} trials ({', '.join(f'{n} {k}' for k, n in isolated.items())}), {said}; "
          f"exit {out['returncode']}; load {out['load'][0]:.1f} -> {out['load'][1]:.1f}")
    if out["returncode"] not in (0, 3):
        print(out["log"][-3000:])
    return 0 if best else 1


if __name__ == "__main__":
    raise SystemExit(main())
