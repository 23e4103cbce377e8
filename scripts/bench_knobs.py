"""How long `infrarsi knobs FILE` takes, the first command a user runs: wall and CPU seconds per launch file, with
and without megatron-core's own check (--no-framework-check), median of --repeats runs in fresh processes.

    python scripts/bench_knobs.py [--repeats 3]

The target (docs/knobs.md): the tables in under 1 s of CPU without the framework check; with it, the check
says it is running while torch and megatron-core import. Wall time depends on the machine's load (printed)."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/fixtures/megatron/llama2_70b_slurm.sh", "tests/fixtures/megatron/mixtral_8x7b.sh",
         "tests/fixtures/torchtitan/llama3_8b.toml"]


def one(args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one `infrarsi knobs` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "knobs", *args], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "COLUMNS": "160"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"infrarsi knobs {' '.join(args)} failed: {r.stderr.strip()[-300:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"median of {a.repeats}")
    print(f"{'file':48s} {'check':>6s} {'wall s':>8s} {'cpu s':>8s}")
    for f in FILES:
        for flags, label in (([], "on"), (["--no-framework-check"], "off")):
            runs = [one([f, *flags]) for _ in range(a.repeats)]
            print(f"{f:48s} {label:>6s} {statistics.median(w for w, _ in runs):8.2f} "
                  f"{statistics.median(c for _, c in runs):8.2f}", flush=True)


if __name__ == "__main__":
    main()
