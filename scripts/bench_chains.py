"""`infrarsi knobs` on launches read through their layers (tests/fixtures/chains/): wall and CPU seconds per chain,
without the framework check (--no-framework-check), median of --repeats runs in fresh processes, each run's setting
checked against the one the chain's scripts state.

    python scripts/bench_chains.py [--repeats 5]

Each command runs from the chain's folder, as a user runs it from the folder the job is submitted from. The target
(issue: wrapper chains): the right setting within 1 s per chain. Wall time depends on the machine's load (printed)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAINS = ROOT / "tests" / "fixtures" / "chains"
# (folder, the file a user names, what the chain's scripts set: the setting `knobs` must print)
CASES = [
    ("megatron_slurm", "scripts/sbatch_gpt.sh",
     {"tensor_parallel": 4, "pipeline_parallel": 2, "data_parallel": 2, "nccl_algo": "Ring"}),
    ("nemo_launcher", "results/gpt3_5b/nemo-megatron-gpt3_5b_submission.sh",
     {"tensor_parallel": 2, "data_parallel": 8, "micro_batch_size": 2, "nccl_proto": "Simple"}),
    ("pyxis_sbatch", "scripts/llama3_8b.sbatch",
     {"tensor_parallel": 2, "data_parallel": 16, "nccl_min_nchannels": 4, "recompute_granularity": "selective"}),
    ("apptainer_sbatch", "scripts/train_mixtral.sbatch",
     {"pipeline_parallel": 4, "expert_parallel": 8, "data_parallel": 8, "nccl_algo": "Tree"}),
    ("torchtitan_run_train", "scripts/train_llama3_8b.sh",
     {"tensor_parallel": 2, "data_parallel": 4, "micro_batch_size": 2, "nccl_proto": "Simple"}),
    ("args_wrapper", "scripts/pretrain_llama2_7b.sh",
     {"tensor_parallel": 2, "data_parallel": 4, "micro_batch_size": 2, "nccl_min_nchannels": 16}),
    # the same command on a one-file launch, under the same load: what reading the layers adds
    ("../megatron", "llama2_70b_slurm.sh", {"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 2}),
]


def one(folder: Path, file: str) -> tuple[float, float, dict]:
    """(wall s, CPU s, the JSON printed) of one `infrarsi knobs FILE --json --no-framework-check` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "knobs", file, "--json", "--no-framework-check"],
                       capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"infrarsi knobs {file} failed: {r.stderr.strip()[-300:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"median of {a.repeats}")
    print("| chain | file | layers | right setting | wall s | CPU s |")
    print("|---|---|---|---|---|---|")
    for name, file, want in CASES:
        runs = [one(CHAINS / name, file) for _ in range(a.repeats)]
        d = runs[-1][2]
        right = all(r[2]["setting"][k] == v for r in runs for k, v in want.items())
        depth = d.get("chain", "").count(" -> ")
        label = "(one file, for comparison)" if name.startswith("..") else name
        print(f"| {label} | `{file}` | {depth} | {'yes' if right else 'NO: ' + str(d['setting'])} | "
              f"{statistics.median(w for w, _, _ in runs):.2f} | {statistics.median(c for _, c, _ in runs):.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
