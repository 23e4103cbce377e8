"""Benchmark: this search vs the tuners users have, on landscapes its priors were not built with.

Two suites (``--suite``):

- ``family`` (default): ``--variants`` perturbed simulated clusters (``infrarsi/workloads/variants.py``:
  hardware efficiencies and bandwidths, memory constants x 0.6-1.6, per-layout compute efficiency, two
  hidden knob interactions), drawn in turn from the four reference workloads, one tuner seed per variant
  (``--variant-seeds`` for more).
  The priors and the analytical estimate share formulas with the unperturbed simulator only, so here they
  are approximately right at best.
- ``named``: the four reference workloads themselves, ``--seeds`` seeds each (``--first-seed`` for held-out
  seeds). Priors and estimate share the simulator's formulas here: a circular, optimistic setting.

Tuners (``--tuners``), each given the same space, validity rule and repair moves:

- ``cold``: the ask/tell Tuner as a library user builds it (README): no priors, no memory estimate, no
  typical config (it holds its own knob semantics, ``search/semantics.py``: ``--set knob_semantics=false`` for none);
- ``priors``: the run stage's tuner (offline priors, the analytical memory estimate as the memory model's
  offset, the typical config first); ``priors-noest``: priors without the estimate; ``cold-est``: ``cold`` with the
  analytical memory estimate (its prior before any trial, then the offset; ``--set memory_prior_from_estimate=false``:
  P(OOM) 0 until a trial is told, as before);
- ``wrong``: priors whose time effects on the three most important knobs are reversed and made confident
  (sd 0.1), with no estimate: the priors must be revised by the trials;
- ``cold-oracle-memory``: a diagnosis, not a peer: ``cold`` told the truth about "does it fit" for every candidate;
- ``cold-oracle-time``: a diagnosis, not a peer: ``cold`` whose time model is the landscape's noise-free step time;
- ``cold-oracle-physics``: a diagnosis, not a peer: ``cold`` whose time model is the variant's own step-time formulas
  on its drawn hardware constants (``Variant.formula_time``) plus a GP on what they miss, learned from the trials: the
  ceiling of a search that knows the simulator; ``cold-oracle-formulas``: the same with the base workload's nominal
  constants (the formulas alone, not the cluster). Family suite only;
- ``priors-time``: ``priors`` whose time model starts from the predicted step time (``search/estimated.py``, the run
  stage's default on a Megatron GPU launch: estimate/step_model.py on the base workload's nominal constants, which the
  variant's drawn constants, per-layout efficiencies and interactions are not); ``priors-time-reversed``: the same
  with the estimate turned upside down around the baseline's (a wrong one); ``cold-time``: ``cold`` with the estimate;
- ``random``: uniform over valid settings;
- ``tpe``: Optuna TPE, multivariate and grouped, with ``constraints_func`` (an invalid or OOM setting is
  infeasible); ``gp``: Optuna GPSampler with the same constraints; ``smac``: SMAC3 random-forest BO
  (HyperparameterOptimizationFacade), an OOM or invalid setting costs the worst time seen x 2;
  an invalid proposal of these three is told as infeasible at no budget and replaced by the nearest valid
  untried setting of a shared pool (the same projection for all);
- ``greedy``: coordinate descent from the typical config, one knob at a time with the repair moves that a
  one-knob change needs (so it can change layout), keeping what is faster.

``--report peaks`` (default): an ok trial reports its step time and peak memory; ``--report time``: step
time only (the memory model learns only from "it fit" and "it did not").

Arms that cannot flatter the search (``bench_landscape.py``): ``--names opaque`` renames every knob to an opaque token
and every categorical value too, in an order drawn per run (nothing the search knows by name applies; the priors and
the estimate, which speak the catalog's names, are translated for ``priors``), ``--names short`` uses the spellings a
user writes (``tp``, ``mbs``, ``recompute``...); ``--oom-heavy`` gives each variant the device capacity at which a
drawn 70-85% of its valid settings run out of memory. The table prints each row's worst run beside the median and, per
budget, against random search on the same landscapes: the landscapes where the row's median over seeds is below
random's, its OOM trials over random's, and the runs with more than half their trials OOM where random fits one time
in four or better. ``--set`` takes TunerConfig fields and the ablations that are parts now (``ABLATIONS``: ``joint``,
``memory_structured``, ``memory_savers``, ``time_bubble``, ``thompson_every``...), by their old names.
Score: the noise-free step time of the setting the tuner would pick (its best measured) as a fraction of
the exhaustive optimum; OOM trials counted over the budget; overhead = seconds per ask. "verified pick": the
same fraction for the setting a run stage keeps after re-verifying the tuner's 3 best (this search ranks them by
its posterior mean, a peer by its measurements), each rerun 3 times with fresh noise outside the budget: with 2%
run-to-run noise the best single measurement is often a lucky draw of a slightly slower setting. "own pick": this
search's ``Tuner.top(1)`` (the posterior mean's fastest that ran; no reruns). "best tried": the fastest setting that
ran, by its noise-free time (what a pick that noise could not fool would keep).

    python scripts/bench_search.py                                   # family of 20, all tuners, 20/30/50
    python scripts/bench_search.py --report time --tuners cold random
    python scripts/bench_search.py --suite named --seeds 10 --tuners cold priors greedy
    python scripts/bench_search.py --jobs 2 --json > family.json
    python scripts/bench_search.py --tuners cold random --names opaque --oom-heavy --variant-seeds 3 --budgets 20 30
    python scripts/bench_search.py --table family.json --paired priors priors-time   # B minus A, paired
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


from infrarsi.knobs import Setting  # noqa: E402
from infrarsi.search import Outcome, Tuner, TunerConfig, run_tuner  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402
from infrarsi.workloads.simulated import WORKLOADS  # noqa: E402

import bench_oracles  # noqa: E402  (the diagnosis tuners: cold-oracle-*)
from bench_compare import compare, print_rows, read_runs  # noqa: E402
from bench_landscape import NAMES, NOISE_CV, Bench, Landscape  # noqa: E402  (the objectives)
from bench_peers import _optuna, run_greedy, run_random, run_smac  # noqa: E402  (the tuners users have)

# The verified pick (score "verified"): what the run stage does after its search, for every tuner alike. Its
# VERIFY_TOP best candidates (this search: ``Tuner.top``, by the time model's posterior mean; a peer: its fastest
# measured) each rerun VERIFY_REPEATS times with fresh noise, outside the budget; the fastest mean is the pick.
VERIFY_TOP, VERIFY_REPEATS = 3, 3
CONFIG: dict[str, Any] = {}  # TunerConfig overrides for this search's tuners (--set)
ARM: dict[str, Any] = {}  # Landscape arguments of the arm (--names, --oom-heavy), for the diagnoses (set before forking)
History = list[tuple[Setting, Outcome]]


# ------------------------------------------------------------------------------------------ ours
def _ours(b: Bench, budget: int, *, priors: str, estimate: bool, typical: bool,
          oracle: str | None = None, time_est: str | None = None) -> tuple[History, float]:
    t, pri = _run_ours(b, budget, priors=priors, estimate=estimate, typical=typical, oracle=oracle, time_est=time_est)
    if priors == "wrong":  # which of the reversed priors the run flags as miscalibrated (what the report shows)
        from infrarsi.models import revision

        t.fit_models()
        wrong = [p for p in pri if p.source == "wrong"]
        flagged = {r.feature.split("=")[0] for r in revision(wrong, t.time_model) if r.miscalibrated}
        b.notes["wrong_flagged"] = f"{len(flagged)}/{len({p.knob for p in wrong})}"
    b.notes["overhead_last10_s"] = statistics.fmean(t.overhead_s[-10:])
    return t.history, statistics.fmean(t.overhead_s)


def time_prior(b: Bench, how: str) -> tuple[Callable[[Any], float | None], frozenset[str] | None]:
    """The predicted step time the run stage starts from (estimate/step_model.py), as a landscape's time prior:
    ``right``: the step-time model on the base workload's model and nominal H100/B200 constants (what
    ``infrarsi estimate`` prints for the job; the variant's drawn constants, per-layout efficiencies and knob-pair
    interactions are what it does not know); ``reversed``: the same turned upside down around the baseline's
    time (est(baseline)^2 / est(s): the fastest layout priced slowest), a wrong prior the trials must overturn.
    Returns (the estimate, the knobs it reads: None = all, where the landscape renames the knobs)."""
    from infrarsi.estimate.step_model import TimeEstimate, unread_knobs

    land = b.land
    unread = set(unread_knobs({k: None for k in land.named_space.names}))
    est = TimeEstimate(w=land.w, base={}, knobs=frozenset(k for k in land.named_space.names if k not in unread))
    named = (lambda s: est(land.to_named(s))) if land.ren is not None else est
    reads = est.knobs if land.ren is None else None  # the columns whose prior moves to the residual's
    if how == "right":
        return named, reads
    if how == "reversed":
        pivot = named(b.baseline)

        def fn(s: Any) -> float | None:
            t = named(s)
            return None if t is None or pivot is None else pivot * pivot / t
    else:
        raise ValueError(f"time_est={how!r}: right or reversed")
    return fn, reads


def _run_ours(b: Bench, budget: int, *, priors: str, estimate: bool, typical: bool,
              oracle: str | None = None, time_est: str | None = None) -> tuple[Tuner, list]:
    """This search as ``_ours`` configures it, driven for ``budget`` trials: (the tuner, its priors)."""
    from infrarsi.priors import priors_for
    from infrarsi.priors.offline import memory_estimator

    land = b.land
    w = land.w
    hw = {"kind": w.gpu, "devices": w.world_size}
    wl = w.model.model_dump()
    # the priors and the estimate speak the catalog's names: a renamed space gets them translated, as a user who
    # renamed the knobs would state them
    pri = priors_for(land.named_space, workload=wl, hardware=hw) if priors != "none" else []
    if priors == "wrong":
        pri = wrong_priors(pri)
    pri = [land.translate_prior(p) for p in pri]
    est = None
    if estimate:
        named_est = memory_estimator(land.named_space, workload=wl, hardware=hw)
        est = named_est if land.ren is None else land.translate_estimate(named_est)
    config = {k: v for k, v in CONFIG.items() if k in TunerConfig.__dataclass_fields__}
    parts = ablated_parts({k: v for k, v in CONFIG.items() if k not in config}, estimate=est is not None)
    if oracle:
        parts.update(bench_oracles.ORACLES[oracle](b))
    if time_est:
        from infrarsi.search.estimated import EstimatedTime

        fn, reads = time_prior(b, time_est)
        parts["time"] = EstimatedTime(fn, reads=reads)
    t = Tuner(b.space, memory_capacity_bytes=b.capacity, priors=pri, seed=b.seed, config=TunerConfig(**config),
              initial=[b.baseline] if typical else (), noise_cv=NOISE_CV if priors != "none" else None,
              memory_estimate=est, **parts)
    def record_top(n: int) -> None:  # the tuner's top candidates at the scored budgets
        if n in b.verify_at:
            b.tops[n] = t.top(VERIFY_TOP)

    run_tuner(t, b, budget, after=record_top)
    return t, pri


def wrong_priors(priors: list) -> list:
    """Reverse the time effects of the three knobs whose priors say the most (largest spread of time_mean)
    and make them confident (sd 0.1): deliberately wrong beliefs the trials must overturn."""
    by_knob: dict[str, list] = {}
    for p in priors:
        by_knob.setdefault(p.knob, []).append(p)
    spread = {k: max(abs(p.time_mean) for p in ps) for k, ps in by_knob.items()}
    top = sorted(spread, key=spread.get, reverse=True)[:3]
    return [p.model_copy(update={"time_mean": -p.time_mean, "time_sd": 0.1, "source": "wrong"})
            if p.knob in top else p for p in priors]


def wrong_knobs(priors: list) -> list[str]:
    return sorted({p.knob for p in wrong_priors(priors) if p.source == "wrong"})


OURS = ("cold", "cold-est", "priors", "priors-noest", "wrong", "cold-oracle-memory", "cold-oracle-time", "cold-oracle-physics",
        "cold-oracle-formulas", "cold-time", "priors-time", "priors-time-reversed")
TUNERS: dict[str, Callable[[Bench, int], tuple[History, float]]] = {
    "cold": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False),
    "priors": lambda b, n: _ours(b, n, priors="offline", estimate=True, typical=True),
    "priors-noest": lambda b, n: _ours(b, n, priors="offline", estimate=False, typical=True),
    "cold-est": lambda b, n: _ours(b, n, priors="none", estimate=True, typical=False),
    "wrong": lambda b, n: _ours(b, n, priors="wrong", estimate=False, typical=True),
    "cold-oracle-memory": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False,
                                            oracle="memory"),
    "cold-oracle-time": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False, oracle="time"),
    "cold-oracle-physics": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False,
                                             oracle="physics"),
    "cold-oracle-formulas": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False,
                                              oracle="formulas"),
    "cold-time": lambda b, n: _ours(b, n, priors="none", estimate=False, typical=False, time_est="right"),
    "priors-time": lambda b, n: _ours(b, n, priors="offline", estimate=True, typical=True, time_est="right"),
    "priors-time-reversed": lambda b, n: _ours(b, n, priors="offline", estimate=True, typical=True,
                                               time_est="reversed"),
    "random": run_random,
    "tpe": lambda b, n: _optuna(b, n, "tpe"),
    "gp": lambda b, n: _optuna(b, n, "gp"),
    "smac": run_smac,
    "greedy": run_greedy,
}


def score(b: Bench, hist: History, budget: int, opt: float) -> dict[str, float]:
    h = hist[:budget]
    ooms = sum(o.status is TrialStatus.OOM for _, o in h)
    ok = [i for i, (_, o) in enumerate(h) if o.status is TrialStatus.OK]
    if not ok:
        return {"frac": 0.0, "ooms": ooms, "found_at": budget}
    i_best = min(ok, key=lambda i: h[i][1].step_time_s)
    out = {"frac": opt / b.true_time(h[i_best][0]), "ooms": ooms, "found_at": i_best + 1,
           "verified": opt / b.true_time(verified_pick(b, h, budget)),
           "best_tried": max(opt / b.true_time(h[i][0]) for i in ok)}
    if b.tops.get(budget):  # this search only: Tuner.top(1)
        out["own_pick"] = opt / b.true_time(b.tops[budget][0])
    return out


def verified_pick(b: Bench, h: History, budget: int) -> Setting:
    """The setting the run stage would keep: of the tuner's VERIFY_TOP best after ``budget`` trials (its own ranking
    when it has one, else the fastest measured), the one with the fastest mean over VERIFY_REPEATS fresh reruns."""
    cands = b.tops.get(budget)
    if not cands:
        ok = sorted((o.step_time_s, i) for i, (_, o) in enumerate(h) if o.status is TrialStatus.OK)
        cands = list(dict.fromkeys(h[i][0] for _, i in ok))[:VERIFY_TOP]
    means = [statistics.fmean(b.remeasure(s, r) for r in range(VERIFY_REPEATS)) for s in cands]
    return cands[means.index(min(means))]


def q(xs: list[float]) -> tuple[float, float, float]:
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    qs = statistics.quantiles(xs, n=4, method="inclusive")
    return qs[1], qs[0], qs[2]


def _job(args: tuple[str, int | None, int, str, str, list[int], dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    base, variant, seed, report, tuner, budgets, config, arm = args
    CONFIG.clear()
    CONFIG.update(config)
    land = Landscape(base, variant, rename_seed=seed, **arm)
    b = Bench(land, seed, report)
    b.verify_at = set(budgets)
    hist, overhead = TUNERS[tuner](b, max(budgets))
    opt = land.optimum()
    name = tuner + "".join(f" {k}={v}" for k, v in config.items()) if tuner in OURS and config else tuner
    if tuner == "cold-oracle-time" and bench_oracles.ORACLE_TIME_SD:
        name += f" sd={bench_oracles.ORACLE_TIME_SD:g}"
    return {"landscape": land.name, "base": base, "tuner": name, "seed": seed, "overhead_s": overhead,
            "names": land.names, "oom_heavy": land.oom_heavy, "report": report, "oom_share": land.oom_share(),
            "scores": {n: score(b, hist, n, opt) for n in budgets}, **b.notes}


def append_runs(path: Path, jobs: list[tuple], n_jobs: int) -> int:
    """``--append``: run the jobs whose (tuner, arm, workload, seed, budgets) ``path`` lacks (a cell's seed names its
    variant), each appended as one JSON line as it ends."""
    def key(tuner: str, names: str, oom_heavy: bool, report: str, base: str, seed: int, budgets: Any) -> tuple:
        return tuner, names, bool(oom_heavy), report, base, int(seed), tuple(sorted(int(n) for n in budgets))

    done = {key(r["tuner"], r["names"], r["oom_heavy"], r["report"], r["base"], r["seed"], r["scores"])
            for r in (read_runs(path) if path.exists() else [])}
    todo = []
    for j in jobs:
        base, _, seed, report, tuner, budgets, config, arm = j
        name = tuner + "".join(f" {k}={v}" for k, v in config.items()) if tuner in OURS and config else tuner
        if key(name, arm.get("names", "catalog"), arm.get("oom_heavy", False), report, base, seed, budgets) not in done:
            todo.append(j)
    print(f"# {len(jobs) - len(todo)} of {len(jobs)} runs already in {path}", file=sys.stderr)
    with mp.get_context("fork").Pool(n_jobs) as pool, path.open("a") as f:
        for r in pool.imap_unordered(_job, todo):
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"# {r['tuner']} {r['landscape']} seed {r['seed']}: "
                  f"{r['scores'][max(r['scores'], key=int)]['frac']:.3f}", file=sys.stderr, flush=True)
    return 0


def label(r: dict[str, Any]) -> str:
    """A run's row in the table: its tuner, and the arm when it is not the default (catalog names, peaks reported)."""
    arm = [x for x in (r.get("names", "catalog") != "catalog" and f"{r['names']} names",
                       r.get("oom_heavy") and "OOM-heavy", r.get("report", "peaks") == "time" and "time only") if x]
    return r["tuner"] + (f" [{', '.join(arm)}]" if arm else "")


def _median_of(scores: list[dict[str, Any]], key: str) -> str:
    """The median of a score column, or "-" where a run lacks it (saved before the column, or a peer: no own pick)."""
    xs = [x[key] for x in scores if key in x]
    return f"{statistics.median(xs):.3f}" if xs and len(xs) == len(scores) else "-"


def _at(r: dict[str, Any], n: int) -> dict[str, Any] | None:
    return r["scores"].get(str(n), r["scores"].get(n))


def print_table(runs: list[dict[str, Any]], tuners: list[str], budgets: list[int], groups: list[str], title: str) -> None:
    """The table (``tuners``: row labels, :func:`label`), then the per-landscape checks (:func:`print_checks`)."""
    print(title)
    print(f"{'group':18s} {'tuner':40s} {'budget':>6s} {'frac of optimum: median [IQR]':>30s} {'worst':>6s} "
          f"{'OOM trials':>10s} {'max':>4s} {'best at':>8s} {'overhead/ask':>12s} {'verified pick':>14s} "
          f"{'own pick':>9s} {'best tried':>10s}")
    for g in groups:
        for tuner in tuners:
            rs = [r for r in runs if label(r) == tuner and (g == "all" or r["base"] == g)]
            if not rs:
                continue
            for n in budgets:
                sc = [x for x in (_at(r, n) for r in rs) if x is not None]
                if not sc:
                    continue
                med, lo, hi = q([x["frac"] for x in sc])
                verified, own, tried = (_median_of(sc, k) for k in ("verified", "own_pick", "best_tried"))
                print(f"{g:18s} {tuner:40s} {n:6d} {med:>12.3f} [{lo:.3f}, {hi:.3f}] {min(x['frac'] for x in sc):6.3f} "
                      f"{statistics.fmean(x['ooms'] for x in sc):10.1f} {max(x['ooms'] for x in sc):4d} "
                      f"{statistics.median(x['found_at'] for x in sc):8.0f} "
                      f"{statistics.fmean(r['overhead_s'] for r in rs) * 1000:9.1f} ms {verified:>14s} {own:>9s} "
                      f"{tried:>10s}  (n={len(rs)})")
    for tuner in tuners:
        rs = [r for r in runs if label(r) == tuner]
        end = [r["overhead_last10_s"] for r in rs if "overhead_last10_s" in r]
        if end:
            print(f"# {tuner}: overhead per ask over the last 10 asks: mean {statistics.fmean(end) * 1000:.0f} ms, "
                  f"max {max(end) * 1000:.0f} ms")
        fl = [r["wrong_flagged"] for r in rs if "wrong_flagged" in r]
        if fl:
            print(f"# {tuner}: reversed priors the run flags as miscalibrated: "
                  f"{', '.join(f'{x} x{fl.count(x)}' for x in sorted(set(fl)))} (runs)")
    print_checks(runs, tuners, budgets)


def print_paired(runs: list[dict[str, Any]], a: str, b: str) -> None:
    """``--paired A B``: row B minus row A (:func:`label`) paired on the same landscape and seed, per budget, as
    ``bench_compare.py`` pairs two files (its statistics and its table: 95% bootstrap interval of the mean difference)."""
    def keyed(tuner: str) -> dict[tuple[str, int], dict[str, Any]]:
        return {(r["landscape"], int(r["seed"])): {str(k): v for k, v in r["scores"].items()}
                for r in runs if label(r) == tuner}

    base, new = keyed(a), keyed(b)
    if not base.keys() & new.keys():
        raise SystemExit(f"--paired {a} {b}: no landscape and seed ran both; the runs' tuners: "
                         f"{', '.join(dict.fromkeys(label(r) for r in runs))}")
    print(f"paired: {b} minus {a}, fraction of the optimum (best measured), per (landscape, seed) both ran")
    print_rows(compare(base, new))


def print_checks(runs: list[dict[str, Any]], tuners: list[str], budgets: list[int]) -> None:
    """Per row and budget, against random search on the same landscapes (random is the same whatever the knobs are
    called): the landscapes where the row's median over seeds is below random's, its mean OOM trials over random's, and
    the runs that spent more than half their trials out of memory on a landscape where random fits one time in four or
    better (at most 75% of its valid settings OOM, by exhaustive count)."""
    rand: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        if r["tuner"] == "random":
            for n in budgets:
                if _at(r, n) is not None:
                    rand.setdefault((r["landscape"], n), []).append(_at(r, n))
    for tuner in tuners:
        rs = [r for r in runs if label(r) == tuner]
        for n in budgets:
            heavy = [r for r in rs if _at(r, n) is not None and r.get("oom_share", 1.0) <= 0.75
                     and _at(r, n)["ooms"] > n / 2]
            easy = sum(1 for r in rs if _at(r, n) is not None and r.get("oom_share", 1.0) <= 0.75)
            line = f"# {tuner} @{n}: runs with > {n // 2} OOM trials where random fits >= 1 in 4: {len(heavy)} of {easy}"
            lands = sorted({r["landscape"] for r in rs if (r["landscape"], n) in rand})
            if lands and not tuner.startswith("random"):
                below = []
                ours_oom, rand_oom = [], []
                for land in lands:
                    mine = [_at(r, n) for r in rs if r["landscape"] == land and _at(r, n) is not None]
                    theirs = rand[(land, n)]
                    if statistics.median(x["frac"] for x in mine) < statistics.median(x["frac"] for x in theirs):
                        below.append(land)
                    ours_oom += [x["ooms"] for x in mine]
                    rand_oom += [x["ooms"] for x in theirs]
                ratio = statistics.fmean(ours_oom) / max(statistics.fmean(rand_oom), 1e-9)
                line += (f"; median below random's on {len(below)} of {len(lands)} landscapes"
                         f"{' (' + ', '.join(below) + ')' if below else ''}; OOM trials {ratio:.2f}x random's")
            print(line)


def memory_check(args: tuple[str, int | None, int, str, int, dict[str, Any]]) -> dict[str, Any]:
    """How the cold tuner prices the fastest valid settings after ``budget`` trials (see ``--memory-check``)."""
    import numpy as np

    base, variant, seed, report, budget, config = args
    CONFIG.clear()
    CONFIG.update(config)
    land = Landscape(base, variant, rename_seed=seed, **ARM)
    b = Bench(land, seed, report)
    t, _ = _run_ours(b, budget, priors="none", estimate=False, typical=False)
    timed = [(b.true_time(s), s) for s in b.space.candidates(4000, random.Random(99))]
    fast = [s for _, s in sorted((x for x in timed if x[0]), key=lambda x: x[0])[:20]]
    true_peak = np.log([land.simulate(s, None, 0.0).peak_memory_bytes for s in fast])
    mean, sd = t.predict_memory(fast)
    cap = math.log(b.capacity * (1 - t.config.oom_margin))
    return {"name": land.name, "bias": float(np.median(mean - true_peak)), "sd": float(np.median(sd)),
            "blocked": float(np.mean(t.p_oom(fast) > t.config.max_p_oom)), "headroom": float(np.median(cap - true_peak))}


def trace_conflicts(args: tuple[str, int | None, int, dict[str, Any], list[int]]) -> str:
    """The ``wrong`` tuner on one landscape: at each of ``at`` trials, which knobs' time priors it has set aside
    (``Tuner.conflicted``), next to the knobs whose priors were reversed, and its best so far."""
    base, variant, seed, config, at = args
    CONFIG.clear()
    CONFIG.update(config)
    land = Landscape(base, variant, rename_seed=seed, **ARM)
    b = Bench(land, seed, "peaks")
    opt = land.optimum()
    lines, done = [], 0
    t, pri = None, []
    for n in sorted(at):  # one search, looked at after n trials each
        if t is None:
            t, pri = _run_ours(b, n, priors="wrong", estimate=False, typical=True)
        else:
            run_tuner(t, b, n - done)
        done = n
        t.fit_models()
        aside = sorted({f.split("=")[0] for f in t.conflicted})
        wrong = wrong_knobs(pri)
        best, _ = t.best()
        lines.append(f"{land.name:24s} {n:3d} reversed {','.join(wrong):48s} set aside: "
                     f"{', '.join(k + ('' if k in wrong else ' (right)') for k in aside) or '-'}; best "
                     f"{opt / b.true_time(best):.3f}")
    return "\n".join(lines)


def memory_form(args: tuple[str, int | None, int]) -> dict[str, Any]:
    """Can a sum of power-law terms hold this landscape's peak? ``structured.StructuredMemory`` with 1, 2 and 3 terms
    fitted on the measured peaks of 400 random valid settings: median |error| in log bytes on 200 others."""
    import numpy as np

    from infrarsi.search import structured
    from infrarsi.search.censored import OBS

    base, variant, seed = args
    land = Landscape(base, variant, rename_seed=seed, **ARM)
    space = Tuner(land.space, memory_capacity_bytes=land.capacity, seed=seed).encoder.model_space  # the models' knobs
    pool = land.space.candidates(4000, random.Random(99))
    rng = random.Random(1)
    train, hold = rng.sample(pool, 400), rng.sample(pool, 200)
    y = np.log([land.simulate(s, None, 0.0).peak_memory_bytes for s in train])
    y_hold = np.log([land.simulate(s, None, 0.0).peak_memory_bytes for s in hold])
    phi, phi_hold = structured.features(space, train), structured.features(space, hold)
    out: dict[str, Any] = {"name": land.name}
    for k in (1, 2, 3):
        sm = structured.StructuredMemory.fit(phi, np.full(len(train), OBS), y, math.log(land.capacity), terms=k)
        out[k] = float(np.median(np.abs(sm.predict(phi_hold)[0] - y_hold)))
    return out


def describe(cells: list[tuple[str, int | None, int]], n: int = 4000) -> None:
    """How needle-like each landscape is: what a uniform draw over its valid settings finds."""
    print(f"{'landscape':34s} {'OOM':>5s} {'(all)':>5s} {'>=0.8':>7s} {'>=0.9':>7s} {'>=0.95':>7s} {'sample best':>11s}"
          "   (fractions of a uniform sample of valid settings; speed as a fraction of the optimum's; (all): the OOM "
          "share of every valid setting)")
    for base, var, seed in cells:
        land = Landscape(base, var, rename_seed=seed, **ARM)
        b = Bench(land, seed, "peaks")
        opt = land.optimum()
        frac = [opt / t if (t := b.true_time(s)) else 0.0 for s in land.space.candidates(n, random.Random(seed))]
        share = [sum(f >= x for f in frac) / len(frac) for x in (0.8, 0.9, 0.95)]
        print(f"{land.name:34s} {sum(f == 0 for f in frac) / len(frac):5.2f} {land.oom_share():5.2f} {share[0]:7.2%} "
              f"{share[1]:7.2%} {share[2]:7.2%} {max(frac):11.3f}", flush=True)


# The switches that took a part of the search away, by the TunerConfig names they had (--set KEY=VALUE): each gives
# the Tuner another part (search/parts.py), so the figures measured with them reproduce.
ABLATIONS: dict[str, Any] = {"residual": True, "joint": True, "memory_gp": True, "memory_structured": True,
                             "memory_structure": True, "memory_savers": True, "memory_gp_min_peaks": 3,
                             "time_bubble": False, "time_bubble_mean": 1.0, "time_bubble_sd": 0.5,
                             "memory_from_ok": True, "learn_drift": True, "thompson_every": 0,
                             "time_interactions": True, "local_by_evidence": False,
                             "memory_anchored": False, "memory_prior_from_estimate": True}


def ablated_parts(ablations: dict[str, Any], *, estimate: bool) -> dict[str, Any]:
    """The Tuner's parts for ``ablations`` ({} gives {}: the search's own)."""
    if not ablations:
        return {}
    from infrarsi.search import AdditivePeak, AdditiveTime, CensoredPeak, JointTime, ResidualTime, Steps, StructuredPeak
    from infrarsi.search.structured import STRUCTURE, STRUCTURE_WITH_SAVERS

    a = {**ABLATIONS, **ablations}
    inter = a["time_interactions"]
    time_part = (JointTime(bubble=a["time_bubble"], bubble_mean=a["time_bubble_mean"], bubble_sd=a["time_bubble_sd"],
                           interactions=inter)
                 if a["residual"] and a["joint"] else ResidualTime(interactions=inter) if a["residual"]
                 else AdditiveTime(interactions=inter))
    ok = a["memory_from_ok"]
    if a["memory_structured"] and not estimate:
        structure = () if not a["memory_structure"] else STRUCTURE_WITH_SAVERS if a["memory_savers"] else STRUCTURE
        memory = StructuredPeak(structure=structure, from_runs_without_peak=ok, anchored=a["memory_anchored"])
    elif a["memory_gp"]:
        memory = CensoredPeak(min_peaks=a["memory_gp_min_peaks"], from_runs_without_peak=ok,
                              prior_from_estimate=a["memory_prior_from_estimate"])
    else:
        memory = AdditivePeak(from_runs_without_peak=ok, prior_from_estimate=a["memory_prior_from_estimate"])
    return {"time": time_part, "memory": memory,
            "steps": Steps(thompson_every=a["thompson_every"], learn_drift=a["learn_drift"],
                           local_by_evidence=a["local_by_evidence"])}


def config_overrides(ap: argparse.ArgumentParser, items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE ...``: TunerConfig overrides and :data:`ABLATIONS`, each value of its field's type (an
    unknown key: ap.error)."""
    config: dict[str, Any] = {}
    fields = {k: f.default for k, f in TunerConfig.__dataclass_fields__.items()} | ABLATIONS
    for kv in items:
        k, _, v = kv.partition("=")
        if k not in fields:
            ap.error(f"--set {kv}: {k!r} is not a TunerConfig field or an ablation; fields: {', '.join(fields)}")
        config[k] = type(fields[k])(json.loads(v.lower()) if v.lower() in ("true", "false") else v)
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("family", "named"), default="family")
    ap.add_argument("--variants", type=int, default=20, help="family: how many perturbed clusters")
    ap.add_argument("--first-variant", type=int, default=0, help="family: seed of the first variant")
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--seeds", type=int, default=10, help="named: seeds per workload")
    ap.add_argument("--variant-seeds", type=int, default=1,
                    help="family: tuner seeds per variant (seed k of variant v is v + 1000 k + --first-seed; 1: the "
                         "seed is v + --first-seed)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="named: first seed (10 for held-out seeds 10-19); family: added to every seed")
    ap.add_argument("--budgets", type=int, nargs="*", default=[20, 30, 50])
    ap.add_argument("--tuners", nargs="*", default=["cold", "priors", "wrong", "random", "tpe", "gp", "smac", "greedy"])
    ap.add_argument("--report", choices=("peaks", "time"), default="peaks")
    ap.add_argument("--names", choices=NAMES, default="catalog",
                    help="what the tuners see the knobs called: the catalog's names, a user's short spellings (tp, pp, "
                         "mbs...), or opaque tokens with opaque categorical values (the unnamed arm; bench_landscape.py)")
    ap.add_argument("--oom-heavy", action="store_true",
                    help="family: each variant with a device capacity at which a drawn 70-85%% of its valid settings run "
                         "out of memory")
    ap.add_argument("--jobs", type=int, default=1, help="processes")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="TunerConfig overrides for this search's tuners, e.g. max_p_oom=0.5 local_every=2")
    ap.add_argument("--oracle-time-sd", type=float, default=0.0,
                    help="cold-oracle-time: sd of a fixed error per setting on the oracle's log step time (default 0)")
    ap.add_argument("--json", action="store_true", help="print every run as JSON instead of the table")
    ap.add_argument("--append", type=Path, metavar="JSONL",
                    help="append each run to JSONL as one line as it ends, and skip the runs already there (a cut "
                         "run keeps what it measured and resumes; --table and bench_compare.py read the file)")
    ap.add_argument("--describe", action="store_true",
                    help="print how hard each landscape is (a uniform sample of 4,000 valid settings: OOM share, "
                         "share within 0.8/0.9/0.95 of the optimum, the sample's best) and exit")
    ap.add_argument("--memory-check", action="store_true",
                    help="after the largest budget of the cold tuner (with --set), how it prices the 20 fastest valid "
                         "settings of each landscape (a 4,000-setting sample): predicted minus true log peak, "
                         "predictive sd, share above the P(OOM) cap, true headroom; and exit")
    ap.add_argument("--memory-form", action="store_true",
                    help="how well a sum of 1, 2, 3 power-law terms fits each landscape's peaks (400 measured, 200 "
                         "held out) and exit")
    ap.add_argument("--trace-conflicts", action="store_true",
                    help="the wrong-prior tuner at each --budgets: which knobs' priors it has set aside; and exit")
    ap.add_argument("--table", nargs="+", type=Path, metavar="JSON",
                    help="print the table of runs saved with --json (several files: one table) and exit")
    ap.add_argument("--paired", nargs=2, metavar=("A", "B"),
                    help="with --table: tuner B minus tuner A paired on the same landscapes and seeds, per budget")
    args = ap.parse_args(argv)
    if args.paired and not args.table:
        ap.error("--paired A B compares saved runs: give them with --table JSON ...")
    if args.table:
        runs = [r for f in args.table for r in read_runs(f)]
        budgets = sorted({int(n) for r in runs for n in r["scores"]})
        tuners = list(dict.fromkeys(label(r) for r in runs))
        bases = list(dict.fromkeys(r["base"] for r in runs))
        print_table(runs, tuners, budgets, ["all"] + (bases if args.suite == "named" else []),
                    f"suite {args.suite} (from {len(args.table)} file(s))")
        if args.paired:
            print_paired(runs, *args.paired)
        return 0
    bad = [t for t in args.tuners if t not in TUNERS]
    if bad:
        ap.error(f"--tuners: unknown {bad}; choose from {', '.join(TUNERS)}")
    if args.variant_seeds < 1:
        ap.error(f"--variant-seeds {args.variant_seeds}: give 1 or more tuner seeds per variant")
    if args.suite == "family":
        cells = [(args.workloads[i % len(args.workloads)], args.first_variant + i,
                  args.first_variant + i + 1000 * k + args.first_seed)
                 for k in range(args.variant_seeds) for i in range(args.variants)]
    else:
        cells = [(w, None, args.first_seed + k) for w in args.workloads for k in range(args.seeds)]
    ARM.update(names=args.names, oom_heavy=args.oom_heavy)
    if args.describe:
        describe(cells)
        return 0
    config = config_overrides(ap, args.set)
    bench_oracles.ORACLE_TIME_SD = args.oracle_time_sd
    if args.trace_conflicts:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            for block in pool.map(trace_conflicts, [(b, v, sd, config, args.budgets) for b, v, sd in cells]):
                print(block, flush=True)
        return 0
    if args.memory_form:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(memory_form, cells)
        print(f"{'landscape':24s} {'1 term':>7s} {'2 terms':>8s} {'3 terms':>8s}   (median |error| in log bytes on 200 "
              f"held-out settings; fitted on 400 measured peaks)")
        for r in rows:
            print(f"{r['name']:24s} {r[1]:7.3f} {r[2]:8.3f} {r[3]:8.3f}")
        return 0
    if args.memory_check:
        todo = [(base, var, seed, args.report, max(args.budgets), config) for base, var, seed in cells]
        with mp.get_context("fork").Pool(args.jobs) as pool:
            rows = pool.map(memory_check, todo)
        print(f"{'landscape':24s} {'bias':>6s} {'sd':>6s} {'>cap':>6s} {'headroom':>8s}   (log bytes; the 20 fastest "
              f"valid settings after {max(args.budgets)} cold trials)")
        for r in rows:
            print(f"{r['name']:24s} {r['bias']:6.2f} {r['sd']:6.2f} {r['blocked']:6.0%} {r['headroom']:8.2f}")
        med = {k: statistics.median(r[k] for r in rows) for k in ("bias", "sd", "blocked", "headroom")}
        print(f"{'median':24s} {med['bias']:6.2f} {med['sd']:6.2f} {med['blocked']:6.0%} {med['headroom']:8.2f}")
        return 0
    # tuners innermost: a cut --append run holds every tuner on the cells it reached (what --paired compares)
    jobs = [(base, var, seed, args.report, t, args.budgets, config, dict(ARM))
            for base, var, seed in cells for t in args.tuners]
    t0 = time.perf_counter()
    if args.append:
        return append_runs(args.append, jobs, args.jobs)
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            runs = list(pool.imap_unordered(_job, jobs))
    else:
        runs = []
        for j in jobs:
            runs.append(_job(j))
            print(f"# {j[4]} {runs[-1]['landscape']}: {runs[-1]['scores'][max(args.budgets)]['frac']:.3f}",
                  file=sys.stderr, flush=True)
    print(f"# {len(runs)} runs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    groups = ["all"] + (list(args.workloads) if args.suite == "named" else [])
    names = list(dict.fromkeys(label(r) for r in runs))
    print_table(runs, names, args.budgets, groups,
                f"suite {args.suite}, report {args.report}; {len(cells)} runs per tuner")
    return 0


if __name__ == "__main__":
    sys.exit(main())
