"""A/A check of the sequential promotion rule: the candidate IS the baseline, so every promotion is a false one.

Step times come from the simulated clusters' noise model (log-normal, the given CV, an independent draw per
run) for the dense 8B workload's typical config. Each repetition adds interleaved A/B pairs one at a time and applies
``speedup.decide`` after each (as the verify step does) until it decides or ``--pairs`` ran, with the doctor's
minimum detectable effect for that CV and ``--doctor-repeats``. Columns:

- ``bar 1+mde``: false promotions of the rule as it runs (target <= 5%);
- ``bar 1``: the same looks with the bar at 1 (mde = 0): the sequential interval's own error (<= 2.5% by design);
- ``peeking``: what looking at a fixed-n 95% t-interval after every pair would give, bar 1 (the mistake the
  alpha spending avoids);
- ``1.5x found``: the share of repetitions in which a true 1.5x speedup is promoted (power), and the mean pairs used.

    python scripts/bench_aa.py [--reps 200] [--pairs 12] [--doctor-repeats 3]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.doctor.noise import mde  # noqa: E402
from infrarsi.verify.speedup import FIRST_LOOK, decide, speedup_ci  # noqa: E402
from infrarsi.workloads.simulated import get_workload, simulate, space_for  # noqa: E402


def run_pairs(draw, speedup: float, bar_mde: float, max_pairs: int) -> tuple[bool, int]:
    """(promoted, pairs used) for one repetition of the sequential rule; ``draw()`` is one noisy step time."""
    a: list[float] = []
    b: list[float] = []
    while True:
        d = decide(a, b, mde=bar_mde, max_pairs=max_pairs)
        if d.done or len(a) >= max_pairs:
            return d.promoted, len(a)
        a.append(draw())
        b.append(draw() / speedup)


def peeking(draw, max_pairs: int) -> bool:
    """Whether a fixed-n 95% interval, looked at after every pair from 2 on, ever has its lower bound above 1."""
    a, b = [draw(), draw()], [draw(), draw()]
    while True:
        if speedup_ci(a, b).lo > 1.0:
            return True
        if len(a) >= max_pairs:
            return False
        a.append(draw())
        b.append(draw())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=12, help="budget.verify_pairs")
    ap.add_argument("--doctor-repeats", type=int, default=3, help="the doctor's repeats (sets the bar's mde)")
    ap.add_argument("--workload", default="dense8b-h100x8")
    args = ap.parse_args(argv)
    w = get_workload(args.workload)
    base = space_for(w).complete(w.baseline)
    print(f"A/A, sequential rule: looks after every pair from {FIRST_LOOK} to {args.pairs}; bar mde from "
          f"{args.doctor_repeats} doctor repeats; {args.reps} repetitions per row")
    print(f"{'CV':>5s} {'mde':>7s} {'bar 1+mde':>10s} {'bar 1':>7s} {'peeking':>8s} {'1.5x found':>11s} {'pairs':>6s}")
    worst = 0.0
    for cv in (0.01, 0.02, 0.05, 0.10, 0.15):
        m = mde(cv, args.doctor_repeats)
        counter = [0]

        def draw() -> float:
            counter[0] += 1
            return simulate(w, base, seed=int(cv * 1e4) * 10**7 + counter[0], noise_cv=cv).step_time_s

        false_bar = sum(run_pairs(draw, 1.0, m, args.pairs)[0] for _ in range(args.reps))
        false_one = sum(run_pairs(draw, 1.0, 0.0, args.pairs)[0] for _ in range(args.reps))
        peek = sum(peeking(draw, args.pairs) for _ in range(args.reps))
        power = [run_pairs(draw, 1.5, m, args.pairs) for _ in range(args.reps)]
        found = sum(p for p, _ in power)
        used = sum(n for _, n in power) / len(power)
        rate = false_bar / args.reps
        worst = max(worst, rate)
        print(f"{cv:5.0%} {m:7.2%} {rate:10.2%} {false_one / args.reps:7.2%} {peek / args.reps:8.2%} "
              f"{found / args.reps:11.0%} {used:6.1f}")
    print(f"worst false-promotion rate {worst:.2%} (target <= 5%)")
    return 0 if worst <= 0.05 and math.isfinite(worst) else 1


if __name__ == "__main__":
    sys.exit(main())
