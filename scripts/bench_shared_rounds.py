"""Benchmark: two candidates verified together, each round's baseline run shared (B1 A B2), against one after the
other (A B1 ... then A B2 ...), on simulated draws through the verify step itself (verify/reverify.py).

Each draw: a run record with 3 doctor runs of the baseline and one search run of each of two candidates, then
``reverify`` with ``share`` on or off (the paired arms see the same draws: one seed per draw). A run's step time is
its setting's true step time x exp(N(0, cv)); its device cost is ``--devices`` x (start-up + steps x its step time),
so the baseline (the slowest setting) is the dearest run, as in a tune. Printed per case: the median and mean
verification device-seconds of each arm and their ratio, the share of draws with 0, 1 or 2 candidates promoted, and
the true speedup of the candidate each arm picks (the highest promoted lower bound, as the report's result does;
1.0 when none is promoted), mean over the draws. The
draws carry no isolation, so the contract is told ``allow_unisolated``; nothing else of the rule is changed.

    python scripts/bench_shared_rounds.py --draws 200
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from infrarsi.contract.model import Contract  # noqa: E402
from infrarsi.doctor.noise import profile  # noqa: E402
from infrarsi.execute.record import RunRecord  # noqa: E402
from infrarsi.knobs import Setting  # noqa: E402
from infrarsi.trial import Cost, Metrics, TrialStatus  # noqa: E402
from infrarsi.verify.reverify import reverify  # noqa: E402

BASE, ONE, TWO = {"x": 0}, {"x": 1}, {"x": 2}
LOSSES = [2.0, 1.9, 1.8, 1.7, 1.6, 1.5]  # every run's loss trace: the same computation, so the loss check passes
CASES = [  # (name, cv, true speedup of candidate 1, of candidate 2)
    ("demo-like: 2.7x and 2.5x", 0.05, 2.7, 2.5),
    ("close: 1.30x and 1.28x", 0.03, 1.30, 1.28),
    ("noisy: 1.5x and 1.5x", 0.10, 1.5, 1.5),
    ("apart: 2.0x and 1.1x", 0.03, 2.0, 1.1),
    ("A/A: 1.0x and 1.0x", 0.05, 1.0, 1.0),
]


@dataclass
class _Done:
    trial: object

    def result(self):
        return self.trial


class DrawRunner:
    """Runs a setting by drawing its step time: a finished ok trial in the record, its cost by the module doc."""

    def __init__(self, record: RunRecord, rng: np.random.Generator, truth: dict[str, float], *, cv: float,
                 startup_s: float, steps: int, devices: int) -> None:
        self.record, self.rng, self.truth, self.cv = record, rng, truth, cv
        self.startup_s, self.steps, self.devices = startup_s, steps, devices

    def submit(self, setting, role: str = "search", reference_losses=None) -> _Done:
        s = Setting(setting)
        step = self.truth[s.key()] * math.exp(self.rng.normal(0.0, self.cv))
        t = self.record.start(s.to_dict(), role=role)
        return _Done(self.record.finish(t.model_copy(update={
            "status": TrialStatus.OK, "metrics": Metrics(step_time_s=step, steps_run=self.steps, losses=LOSSES),
            "cost": Cost(wall_s=self.startup_s + self.steps * step, devices=self.devices)})))


class Ranked:
    """The search's ranking: the two candidates, best first (what ``Tuner.top`` hands the verify step)."""

    def top(self, k: int = 3) -> list[Setting]:
        return [Setting(ONE), Setting(TWO)][:k]

    def why(self, setting):
        return None


def contract(max_pairs: int) -> Contract:
    return Contract.model_validate({
        "name": "draws", "workload": {"adapter": "minigpt", "args": {}}, "hardware": {"memory_capacity_gib": 1},
        "baseline": {}, "budget": {"verify_pairs": max_pairs},
        "invariants": {"isolation": {"allow_unisolated": True}}})


def one_draw(seed: int, *, share: bool, cv: float, x1: float, x2: float, args) -> tuple[float, list[float | None]]:
    """(verification device-seconds, each candidate's promoted lower bound or None) of one draw."""
    rng = np.random.default_rng(seed)
    truth = {Setting(BASE).key(): args.base_step_s, Setting(ONE).key(): args.base_step_s / x1,
             Setting(TWO).key(): args.base_step_s / x2}
    with tempfile.TemporaryDirectory() as d:
        record = RunRecord(d)
        runner = DrawRunner(record, rng, truth, cv=cv, startup_s=args.startup_s, steps=args.steps,
                            devices=args.devices)
        doctor = [runner.submit(BASE, role="doctor").result() for _ in range(3)]
        for s in (ONE, TWO):
            runner.submit(s, role="search")
        noise = profile([t.metrics.step_time_s for t in doctor], trial_ids=[t.id for t in doctor])
        v = reverify(Path(d), contract(args.max_pairs), record, runner, Ranked(), Setting(BASE), LOSSES, noise,
                     Console(file=io.StringIO()), share=share)
        spent = sum(t.cost.device_s for t in record.finished() if t.role == "verify")
    by_key = {Setting(c.setting).key(): c for c in v.candidates}
    return spent, [by_key[Setting(s).key()].ci95[0] if by_key[Setting(s).key()].promoted else None for s in (ONE, TWO)]


def pick(lows: list[float | None]) -> int | None:
    """The candidate the result names: the highest promoted lower bound (None: none promoted)."""
    ok = [(lo, i) for i, lo in enumerate(lows) if lo is not None]
    return max(ok)[1] if ok else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-pairs", type=int, default=12)
    ap.add_argument("--base-step-s", type=float, default=1.5, help="the baseline's true step time")
    ap.add_argument("--startup-s", type=float, default=5.0, help="a run's start-up")
    ap.add_argument("--steps", type=int, default=6, help="steps a run pays for")
    ap.add_argument("--devices", type=int, default=1)
    args = ap.parse_args(argv)
    print(f"{args.draws} draws per case; a run costs {args.devices} x ({args.startup_s:g} s + {args.steps} x its step "
          f"time), the baseline's {args.base_step_s:g} s; at most {args.max_pairs} pairs per candidate\n")
    print("| case | off: device-s median (mean) | on: device-s median (mean) | on / off (mean) | promoted 0/1/2 off "
          "| promoted 0/1/2 on | picked true speedup off / on |")
    print("|---|---|---|---|---|---|---|")
    for name, cv, x1, x2 in CASES:
        off, on, prom = [], [], {False: [0, 0, 0], True: [0, 0, 0]}
        picked = {False: [], True: []}
        for k in range(args.draws):
            seed = args.seed * 1_000_003 + k
            for share in (False, True):
                spent, lows = one_draw(seed, share=share, cv=cv, x1=x1, x2=x2, args=args)
                (on if share else off).append(spent)
                prom[share][sum(lo is not None for lo in lows)] += 1
                i = pick(lows)
                picked[share].append(1.0 if i is None else (x1, x2)[i])
        n = args.draws
        frac = lambda c: "/".join(f"{x / n:.0%}" for x in c)  # noqa: E731
        print(f"| {name}, CV {cv:.0%} | {statistics.median(off):.1f} ({statistics.fmean(off):.1f}) | "
              f"{statistics.median(on):.1f} ({statistics.fmean(on):.1f}) | "
              f"{statistics.fmean(on) / statistics.fmean(off):.2f} | {frac(prom[False])} | {frac(prom[True])} | "
              f"{statistics.fmean(picked[False]):.3f} / {statistics.fmean(picked[True]):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
