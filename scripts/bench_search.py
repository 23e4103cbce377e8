"""Benchmark: this search vs the tuners users reach for today, on the four simulated reference workloads.

Peers: random search (uniform over valid settings); Optuna TPE with an OOM reported as a failed trial,
and with an OOM scored as zero throughput; greedy coordinate descent from the workload's typical
Megatron config (one knob at a time, keep what is faster). Every tuner gets the same budget of
trials, counts every launch it makes (an OOM costs a trial), and is scored by the noise-free step
time of the setting it would pick (its best observed) as a fraction of the exhaustive optimum.

    python scripts/bench_search.py                  # 4 workloads x 10 seeds, budgets 20/30/50
    python scripts/bench_search.py --seeds 3 --workloads dense8b-h100x8 --json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.knobs import KnobSpace, Setting  # noqa: E402
from infrarsi.search import Outcome, Tuner, TunerConfig  # noqa: E402
from infrarsi.workloads.simulated import WORKLOADS, exhaustive_optimum, get_workload, simulate, space_for  # noqa: E402

NOISE_CV = 0.02


class Bench:
    """One workload: its space, the objective with noise, the true (noise-free) time of any setting."""

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.seed = name, seed
        self.w = get_workload(name)
        self.space: KnobSpace = space_for(name)
        self.capacity = self.w.spec.memory_bytes
        self.baseline = self.space.complete(self.w.baseline)
        self._true: dict[Setting, float | None] = {}

    def __call__(self, s: Setting) -> Outcome:
        r = simulate(self.name, s, seed=self.seed, noise_cv=NOISE_CV)
        self._true[s] = r.noise_free_step_time_s
        if r.oom:
            return Outcome("oom")
        return Outcome("ok", step_time_s=r.step_time_s, peak_memory_bytes=r.peak_memory_bytes)

    def true_time(self, s: Setting) -> float:
        if s not in self._true:
            self._true[s] = simulate(self.name, s, noise_cv=0.0).noise_free_step_time_s
        return self._true[s]


History = list[tuple[Setting, Outcome]]


def run_ours(b: Bench, budget: int) -> tuple[History, float]:
    from infrarsi.priors import priors_for
    from infrarsi.priors.offline import memory_estimator

    hw = {"kind": b.w.gpu, "devices": b.w.world_size}
    wl = b.w.model.model_dump()
    priors = priors_for(b.space, workload=wl, hardware=hw)
    t = Tuner(b.space, memory_capacity_bytes=b.capacity, priors=priors, seed=b.seed, initial=[b.baseline],
              noise_cv=NOISE_CV, config=TunerConfig(),
              memory_estimate=memory_estimator(b.space, workload=wl, hardware=hw))
    t0 = time.perf_counter()
    for _ in range(budget):
        s = t.ask()
        t.tell(s, b(s))
    return t.history, (time.perf_counter() - t0) / budget


def run_random(b: Bench, budget: int) -> tuple[History, float]:
    t0 = time.perf_counter()
    settings = b.space.sample(random.Random(b.seed), budget, max_tries=200_000)
    hist = [(s, b(s)) for s in settings]
    return hist, (time.perf_counter() - t0) / budget


def run_greedy(b: Bench, budget: int) -> tuple[History, float]:
    """Coordinate descent from the typical config: try each other value of each knob in turn, keep the faster."""
    t0 = time.perf_counter()
    hist: History = []
    seen: set[Setting] = set()

    def trial(s: Setting) -> Outcome | None:
        if len(hist) >= budget or s in seen:
            return None
        seen.add(s)
        o = b(s)
        hist.append((s, o))
        return o

    cur = b.baseline
    o = trial(cur)
    best = o.step_time_s if o and o.status == "ok" else float("inf")
    improved = True
    while len(hist) < budget and improved:
        improved = False
        for k in b.space.knobs:
            for v in k.domain:
                cand = cur.replace(**{k.name: v})
                if v == cur[k.name] or not b.space.is_valid(cand):
                    continue
                o = trial(cand)
                if o is not None and o.status == "ok" and o.step_time_s < best:
                    cur, best, improved = cand, o.step_time_s, True
                    break  # move on from the improved point
            if len(hist) >= budget:
                break
    return hist, (time.perf_counter() - t0) / max(1, len(hist))


def run_optuna(b: Bench, budget: int, *, oom_as: str) -> tuple[History, float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=b.seed, n_startup_trials=min(10, budget // 3))
    study = optuna.create_study(direction="maximize", sampler=sampler)  # throughput = 1 / step time
    hist: History = []
    t0 = time.perf_counter()
    tries = 0
    while len(hist) < budget and tries < budget * 200:
        tries += 1
        trial = study.ask()
        s = Setting({k.name: trial.suggest_categorical(k.name, list(k.domain)) for k in b.space.knobs})
        if not b.space.is_valid(s) or s in {h for h, _ in hist}:
            # Invalid or repeated: Megatron would refuse it at start-up; costs TPE a failed trial, not budget.
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        o = b(s)
        hist.append((s, o))
        if o.status == "ok":
            study.tell(trial, 1.0 / o.step_time_s)
        elif oom_as == "zero":
            study.tell(trial, 0.0)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return hist, (time.perf_counter() - t0) / max(1, len(hist))


TUNERS: dict[str, Callable[[Bench, int], tuple[History, float]]] = {
    "infrarsi": run_ours,
    "random": run_random,
    "optuna-tpe (oom=fail)": lambda b, n: run_optuna(b, n, oom_as="fail"),
    "optuna-tpe (oom=zero)": lambda b, n: run_optuna(b, n, oom_as="zero"),
    "greedy (typical start)": run_greedy,
}


def score(b: Bench, hist: History, budget: int, opt: float) -> dict[str, float]:
    h = hist[:budget]
    ok = [(s, o) for s, o in h if o.status == "ok"]
    if not ok:
        return {"frac": 0.0, "ooms": sum(o.status == "oom" for _, o in h), "found_at": budget}
    i_best = min(range(len(h)), key=lambda i: h[i][1].step_time_s if h[i][1].status == "ok" else float("inf"))
    pick = h[i_best][0]
    return {"frac": opt / b.true_time(pick), "ooms": sum(o.status == "oom" for _, o in h), "found_at": i_best + 1}


def q(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    qs = statistics.quantiles(xs, n=4, method="inclusive")
    return qs[1], qs[0], qs[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budgets", type=int, nargs="*", default=[20, 30, 50])
    ap.add_argument("--tuners", nargs="*", default=list(TUNERS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    top = max(args.budgets)
    rows = []
    for name in args.workloads:
        t0 = time.perf_counter()
        opt = exhaustive_optimum(name)
        print(f"# {name}: optimum {opt.step_time_s:.3f} s/step over {opt.n_valid} valid settings "
              f"({opt.n_oom} OOM), found in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        for tuner in args.tuners:
            per_budget: dict[int, list[dict[str, float]]] = {n: [] for n in args.budgets}
            overheads = []
            for seed in range(args.seeds):
                b = Bench(name, seed)
                hist, overhead = TUNERS[tuner](b, top)
                overheads.append(overhead)
                for n in args.budgets:
                    per_budget[n].append(score(b, hist, n, opt.step_time_s))
            for n in args.budgets:
                sc = per_budget[n]
                med, lo, hi = q([x["frac"] for x in sc])
                rows.append({"workload": name, "tuner": tuner, "budget": n, "frac_median": med, "frac_q1": lo,
                             "frac_q3": hi, "ooms_mean": statistics.fmean(x["ooms"] for x in sc),
                             "found_at_median": statistics.median(x["found_at"] for x in sc),
                             "overhead_s": statistics.fmean(overheads)})
            print(f"#   {tuner}: done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'workload':18s} {'tuner':24s} {'budget':>6s} {'frac of optimum: median [IQR]':>30s} "
          f"{'OOM trials':>10s} {'best at':>8s} {'overhead/trial':>14s}")
    for r in rows:
        print(f"{r['workload']:18s} {r['tuner']:24s} {r['budget']:6d} "
              f"{r['frac_median']:>12.3f} [{r['frac_q1']:.3f}, {r['frac_q3']:.3f}] "
              f"{r['ooms_mean']:10.1f} {r['found_at_median']:8.0f} {r['overhead_s'] * 1000:11.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
