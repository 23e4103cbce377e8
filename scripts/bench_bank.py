"""Benchmark: does the experience bank make a run on new hardware start closer to the optimum?

For each target (a simulated workload on H100), the bank is first filled by ordinary unseeded tuning
runs of the same and related workloads on *A100* clusters (trials + the models' posterior knob
effects). Then, over several seeds, two runs on the H100 target are compared:

- unseeded: ``Tuner(space, initial=[baseline], priors=offline)``
- seeded:   ``Tuner(space, initial=[baseline, *seed.initial], priors=seed.merged_with(offline))`` with
            ``seed = seed_from_bank(bank, space, hardware=H100, workload=target)``

``offline`` is the offline knowledge base's priors for that workload and GPU (``offline_priors``);
every run, the A100 source runs included, starts from them, as ``infrarsi run`` does.

Reported: trials until the best setting found so far (by measured time) reaches 0.90, 0.95 and 0.97 of
the optimum's speed (optimum step time / its noise-free step time; the optimum is exhaustive), median
over seeds; a run that never reaches it within the budget counts as budget + 1 (shown as ">B").

    .venv/bin/python scripts/bench_bank.py                      # dense8b on H100, 7 seeds, 40 trials
    .venv/bin/python scripts/bench_bank.py --targets dense8b-h100x8 dense70b-h100x64 --seeds 5 --budget 40
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.bank import Bank, priors_from_effects, seed_from_bank, signature_from  # noqa: E402
from infrarsi.trial import Cost, Metrics, Trial  # noqa: E402
from infrarsi.priors import offline_priors  # noqa: E402
from infrarsi.priors.offline import memory_estimator  # noqa: E402
from infrarsi.workloads import simulated as sim  # noqa: E402

from infrarsi.search.outcome import Outcome  # noqa: E402
from infrarsi.search.tuner import Tuner  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402

TARGETS = (0.90, 0.95, 0.97)
ERRORS: list[str] = []  # tuner failures met during the benchmark (printed after each table)


def _make_tuner(space: Any, w: Any, *, seed: int, initial: list[Any], priors: list[Any] | None = None) -> Any:
    """As ``infrarsi run`` builds it: the analytical memory estimate as the memory model's offset and the
    run-to-run noise known (the simulator's)."""
    return Tuner(space, memory_capacity_bytes=w.spec.memory_bytes, priors=priors, seed=seed, initial=initial,
                 noise_cv=sim.DEFAULT_NOISE_CV,
                 memory_estimate=memory_estimator(space, workload=w.model.model_dump(), hardware=hardware_of(w)))


def _outcome(status: TrialStatus, t: float | None = None, peak: float | None = None) -> Outcome:
    return Outcome(status, t, peak)


# ------------------------------------------------------------------ one run
def hardware_of(w: sim.SimWorkload) -> dict[str, Any]:
    return {"kind": w.gpu, "devices": w.world_size, "nodes": w.nodes, "memory_bytes": w.spec.memory_bytes,
            "interconnect": "nvlink+ib" if w.nodes > 1 else "nvlink"}


def workload_of(w: sim.SimWorkload) -> Any:
    return signature_from(w.model.model_dump(), framework="simulated", name=w.name.split("-")[0])


def offline_for(w: sim.SimWorkload) -> list[Any]:
    return offline_priors(sim.space_for(w), workload=w.model.model_dump(), hardware=hardware_of(w))


def run(w: sim.SimWorkload, *, seed: int, budget: int, initial: list[Any], priors: list[Any] | None = None
        ) -> tuple[list[Trial], list[float | None], Any]:
    """Tune ``w`` for ``budget`` trials. Returns the trials, the noise-free step time of each trial's setting
    (None when it did not run) and the tuner."""
    space = sim.space_for(w)
    tuner = _make_tuner(space, w, seed=seed, initial=initial, priors=priors)
    trials: list[Trial] = []
    true_t: list[float | None] = []
    for i in range(budget):
        try:
            s = tuner.ask()
        except RuntimeError:  # the space is exhausted
            break
        except Exception as e:  # a tuner bug: the run stops here, the table says so
            ERRORS.append(f"{w.name} seed {seed}: tuner.ask() raised {type(e).__name__}: {e} after {i} trials")
            break
        r = sim.simulate(w, s, seed=seed * 1000 + i)
        if r.oom:
            status = TrialStatus.OOM
            out = _outcome(status)
            metrics = Metrics(peak_memory_bytes=r.peak_memory_bytes)
            true_t.append(None)
        else:
            status = TrialStatus.OK
            out = _outcome(status, r.step_time_s, r.peak_memory_bytes)
            metrics = Metrics(step_time_s=r.step_time_s, peak_memory_bytes=r.peak_memory_bytes, mfu=r.mfu)
            true_t.append(r.noise_free_step_time_s)
        tuner.tell(s, out)
        trials.append(Trial(id=i, setting=dict(s), status=status, metrics=metrics,
                            cost=Cost(wall_s=10 * (r.step_time_s or 60.0), devices=w.world_size),
                            role="baseline" if i == 0 else "search",
                            reason="" if status is TrialStatus.OK else "simulated CUDA out of memory"))
    return trials, true_t, tuner


def trials_to_target(trials: list[Trial], true_t: list[float | None], optimum_s: float, budget: int,
                     target: float = 0.97) -> int:
    """1-based trial index at which the best *measured* ok trial so far reaches ``target`` of the optimum's
    speed (judged on its noise-free time); budget + 1 when never."""
    best_meas = math.inf
    best_true = math.inf
    for i, (t, tt) in enumerate(zip(trials, true_t)):
        if t.status is TrialStatus.OK and t.metrics.step_time_s < best_meas:
            best_meas, best_true = t.metrics.step_time_s, tt
        if optimum_s / best_true >= target:
            return i + 1
    return budget + 1


# ------------------------------------------------------------------ main
SOURCES = {  # target -> (reference, overrides) of the A100 runs that fill the bank
    "dense8b-h100x8": [("dense8b-h100x8", {"gpu": "A100"}),
                       ("dense8b-h100x8", {"gpu": "A100", "seq_length": 4096}),
                       ("dense8b-h100x8", {"gpu": "A100", "nodes": 2})],
    "dense70b-h100x64": [("dense70b-h100x64", {"gpu": "A100"}),
                         ("dense70b-h100x64", {"gpu": "A100", "seq_length": 4096}),
                         ("dense8b-h100x8", {"gpu": "A100"})],
    "moe47b-h100x64": [("moe47b-h100x64", {"gpu": "A100"}), ("moe16b-h100x32", {"gpu": "A100"})],
    "moe16b-h100x32": [("moe16b-h100x32", {"gpu": "A100"}), ("moe47b-h100x64", {"gpu": "A100"})],
}


def fill_bank(bank: Bank, target: str, *, trials: int) -> list[str]:
    names = []
    have = {r.run_id for r in bank.runs()}
    for j, (ref, over) in enumerate(SOURCES[target]):
        w = sim.workload_from_args({"reference": ref, **over, "name": f"{ref.split('-')[0]}-{'-'.join(f'{k}{v}' for k, v in over.items())}"})
        rid = f"src-{target}-{j}-{w.name}-{trials}"
        names.append(rid)
        if rid in have:  # a kept bank (--bank) already holds this source run
            continue
        tr, _, tuner = run(w, seed=100 + j, budget=trials, initial=[w.baseline], priors=offline_for(w))
        bank.add_trials(rid, tr, hardware=hardware_of(w), workload=workload_of(w))
        tuner.top(1)  # refits the models on every trial (public API), so the effects are final
        mem = tuner.memory_model.effects() if tuner.memory_model is not None else []
        post = priors_from_effects(tuner.time_model.effects(), mem, space=sim.space_for(w))
        bank.add_posteriors(rid, post, hardware=hardware_of(w), workload=workload_of(w))
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", nargs="+", default=["dense8b-h100x8"], choices=sorted(SOURCES))
    ap.add_argument("--seeds", type=int, default=7)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--source-trials", type=int, default=60, help="trials of each A100 run that fills the bank")
    ap.add_argument("--k", type=int, default=5, help="initial settings taken from the bank")
    ap.add_argument("--bank", type=Path, default=None, help="keep the filled bank here (default: a temp file)")
    ns = ap.parse_args(argv)
    rows = []
    for target in ns.targets:
        w = sim.get_workload(target)
        t0 = time.perf_counter()
        opt = sim.exhaustive_optimum(w)
        tmp = tempfile.TemporaryDirectory()
        bank = Bank(ns.bank or Path(tmp.name) / "bank.sqlite")
        srcs = fill_bank(bank, target, trials=ns.source_trials)
        space = sim.space_for(w)
        base = offline_for(w)
        seed = seed_from_bank(bank, space, hardware=hardware_of(w), workload=workload_of(w), k=ns.k, base_priors=base)
        print(f"\n{target}: optimum {opt.step_time_s:.3f} s/step; bank from {len(srcs)} A100 runs; {seed.describe()}")
        for s in seed.sources:
            print(f"  source {s.run_id}: d_hw {s.hw_distance:.2f} d_wl {s.wl_distance:.2f} best {s.best_step_time_s:.3f} s "
                  f"-> {s.n_initial} initial, {s.n_priors} priors")
        per_seed = []
        for sd in range(ns.seeds):
            tr_u, tt_u, _ = run(w, seed=sd, budget=ns.budget, initial=[w.baseline], priors=base)
            tr_s, tt_s, _ = run(w, seed=sd, budget=ns.budget, initial=[w.baseline, *seed.initial],
                                priors=seed.merged_with(base))
            row = [sd]
            for tr, tt in ((tr_u, tt_u), (tr_s, tt_s)):
                row += [trials_to_target(tr, tt, opt.step_time_s, ns.budget, x) for x in TARGETS]
                row.append(_best_ratio(tr, tt, opt.step_time_s, 6))
            per_seed.append(row)
        heads = [f"u@{x:.2f}" for x in TARGETS] + ["u best@6"] + [f"s@{x:.2f}" for x in TARGETS] + ["s best@6"]
        print("  trials to reach a fraction of the optimum's speed (u = unseeded, s = seeded); best@6 = best/opt after 6")
        print(f"  {'seed':>4} | " + " | ".join(f"{h:>8}" for h in heads))
        for row in per_seed:
            print(f"  {row[0]:>4} | " + " | ".join(_cell(v, ns.budget) for v in row[1:]))
        med = [statistics.median(r[j] for r in per_seed) for j in range(1, len(per_seed[0]))]
        print(f"  {'med':>4} | " + " | ".join(_cell(v, ns.budget) for v in med) + f"   ({time.perf_counter() - t0:.0f} s)")
        for line in ERRORS:
            print(f"  error: {line}")
        ERRORS.clear()
        n = len(TARGETS)
        med_u, med_s = med[n - 1], med[2 * n]
        rows.append((target, med_u, med_s))
        bank.close()
        tmp.cleanup()
    print("\nsummary (median trials to reach 0.97 of the optimum; lower is better)")
    print(f"{'target':<20} | {'unseeded':>8} | {'seeded':>8}")
    for target, mu, ms in rows:
        print(f"{target:<20} | {_fmt(mu, ns.budget):>8} | {_fmt(ms, ns.budget):>8}")
    return 0


def _best_ratio(trials: list[Trial], true_t: list[float | None], optimum_s: float, n: int) -> float:
    """optimum / noise-free time of the best measured ok trial among the first n (0 when none ran)."""
    best = min(((t.metrics.step_time_s, tt) for t, tt in zip(trials[:n], true_t[:n]) if t.status is TrialStatus.OK),
               default=None)
    return 0.0 if best is None else optimum_s / best[1]


def _cell(v: float, budget: int) -> str:
    return f"{v:>8.3f}" if v <= 1.0 and not float(v).is_integer() else f"{_fmt(v, budget):>8}"


def _fmt(n: float, budget: int) -> str:
    return f">{budget}" if n > budget else f"{n:g}"


if __name__ == "__main__":
    raise SystemExit(main())
