"""A/A check of the promotion rule: the candidate IS the baseline, so every promotion is a false one.

Step times come from the simulated clusters' noise model (log-normal, the given CV, an independent draw per
run) for the dense 8B workload's typical config; each repetition runs ``repeats`` interleaved A/B pairs, computes
the paired speedup CI and applies the promotion rule with the doctor's minimum detectable effect for that
CV and repeat count. Target: at most 5% of repetitions promote.

    python scripts/bench_aa.py [--reps 2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.doctor.noise import mde  # noqa: E402
from infrarsi.search.verify import promote, speedup_ci  # noqa: E402
from infrarsi.workloads.simulated import get_workload, simulate, space_for  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--workload", default="dense8b-h100x8")
    args = ap.parse_args(argv)
    w = get_workload(args.workload)
    base = space_for(w).complete(w.baseline)
    print(f"{'CV':>6s} {'pairs':>5s} {'mde':>7s} {'promoted':>9s} {'rate':>7s}  (A/A: every promotion is false)")
    worst = 0.0
    for cv in (0.01, 0.02, 0.05, 0.10):
        for repeats in (2, 3, 5):
            m = mde(cv, repeats)
            promoted = 0
            for r in range(args.reps):
                # One repetition: runs 0..2n-1 alternate A, B; each run is an independent noisy draw.
                times = [simulate(w, base, seed=r * 10_000 + k, noise_cv=cv).step_time_s for k in range(2 * repeats)]
                promoted += promote(speedup_ci(times[0::2], times[1::2]), m)[0]
            rate = promoted / args.reps
            worst = max(worst, rate)
            print(f"{cv:6.2%} {repeats:5d} {m:7.2%} {promoted:9d} {rate:7.2%}")
    print(f"worst false-promotion rate {worst:.2%} (target <= 5%)")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
