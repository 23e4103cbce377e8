"""Diagnoses of the cold search on the perturbed clusters of ``bench_search.py`` (the same landscapes, seeds and tuner).

``--kinds``: per proposal kind (design, acquisition, local, paired, probe, Thompson), how many trials it took, how many
ran out of memory and how many improved the best so far (by noise-free step time). Which steps do the work.

``--time-check``: after ``--budget`` trials, how well the time model ranks settings that fit, when the search is
left to exploit it: up to 1500 of the tuner's candidate pool that truly fit, ranked by the search's time model
(``Tuner.predict_time``, the joint GP) and by its additive part alone (``Tuner.time_model``). Per variant: the true
fraction of the optimum of the model's first pick and of the best of its first 5, and the rank correlation with the
true step time over all of them and over the 100 truly fastest.

``--models``: the same check for other regressors fitted on the same trials (the step times of the trials that ran):
random forests on the value indices and on ``structured.features`` (ln value / 0-1 / one-hot), extra trees, and ridge
regressions on those features with and without all pairwise products (scikit-learn, which the ``bench`` extra brings
with SMAC3). Is the model's form what limits the ranking?

``--layout-gap``: after ``--budget`` trials, where the gap to the optimum is: the best measured setting's fraction of the
optimum, the best setting with its parallel layout (tensor, pipeline, context, data, expert parallel kept; every other
knob free) and the best with its other knobs (the layout free), each by exhaustive enumeration. The first says what
perfect tuning of the other knobs would give on the layout the search settled on; the second what the right layout
would give with the knobs it found.

``--time-error``: after ``--budget`` trials, how far the time model's predictions are from the truth, on the scale of
``bench_search.py --tuners cold-oracle-time --oracle-time-sd SD`` (a time model off by an error of sd SD per setting):
the sd of predicted minus true log step time over up to 1500 pool settings that fit, over the 100 truly fastest of
them and over those within ``trust_radius`` knob changes of the 5 fastest measured (where acquisition steps choose),
the model's own predictive sd there, and the median |error| / predictive sd over the 100 fastest. How accurate must a
time model be, and how far is this one?

``--neighbours``: after ``--budget`` trials, how much the incumbent's one-knob moves (with repairs, untried) hold and
how well they are ranked: the incumbent's fraction of the optimum, that of its best move, and the gain of the best of
the first 1, 3 and 6 moves (fractions of the optimum; a move that runs out of memory gains nothing) in random order, in
the search's order (its own acquisition, ``acquisition.score``: expected improvement with the sd x ``ei_sd_scale``, times
P(fit) and P(pass the loss check), the moves above the P(OOM) cap last) and by a random forest on the trials that ran
(scikit-learn, the ``bench`` extra), the same cap first. Can the trials tell which move to run next?

    python scripts/search_diagnose.py --kinds --variants 8 --budget 30
    python scripts/search_diagnose.py --layout-gap --variants 20 --budget 30
    python scripts/search_diagnose.py --models --variants 12 --budget 30
    python scripts/search_diagnose.py --time-check --variants 10 --budget 30
    python scripts/search_diagnose.py --neighbours --variants 20 --budget 20
    python scripts/search_diagnose.py --time-error --variants 20 --budget 30
    python scripts/search_diagnose.py --kinds --set thompson_every=4 trust_radius=0 ei_sd_scale=1   # the search before
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_search as bs  # noqa: E402  (puts the repository root on sys.path)
from infrarsi.search.acquisition import score  # noqa: E402
from infrarsi.search.steps import Context, within_trust_radius  # noqa: E402
from infrarsi.trial.status import TrialStatus  # noqa: E402


CONFIG: dict[str, Any] = {}  # TunerConfig overrides (--set), as bench_search.py takes them


def _cold(variant: int, budget: int) -> tuple[Any, Any]:
    bs.CONFIG.clear()
    bs.CONFIG.update(CONFIG)
    wl = list(bs.WORKLOADS)
    land = bs.Landscape(wl[variant % len(wl)], variant)
    b = bs.Bench(land, variant, "peaks")
    t, _ = bs._run_ours(b, budget, priors="none", estimate=False, typical=False)
    return b, t


def kinds(args: tuple[int, int]) -> dict[str, Any]:
    """Per trial of the cold search on one variant: its kind, whether it ran out of memory, whether it improved."""
    variant, budget = args
    b, t = _cold(variant, budget)
    best, rows = math.inf, []
    for s, o in t.history:
        true = b.true_time(s)
        better = o.status is TrialStatus.OK and true is not None and true < best
        best = min(best, true) if better else best
        why = t.why(s)
        rows.append((why.kind if why else "?", o.status is TrialStatus.OOM, better))
    return {"name": b.land.name, "rows": rows}


LAYOUT = ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "expert_parallel")


def layout_gap(args: tuple[int, int]) -> dict[str, Any]:
    """The best measured setting after ``budget`` cold trials, and the best settings that keep its layout or its other
    knobs, as fractions of the optimum."""
    b, t = _cold(*args)
    land, sp = b.land, b.space
    inc = t.best()[0]
    opt = land.optimum()

    def best_keeping(names: list[str]) -> float:
        return opt / land.v.optimum(sp.restrict({n: [inc[n]] for n in names}, keep=sp.names)).step_time_s

    layout = [n for n in LAYOUT if n in sp]
    return {"name": land.name, "best": opt / b.true_time(inc), "its layout": best_keeping(layout),
            "its other knobs": best_keeping([n for n in sp.names if n not in layout])}


def _rank_corr(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _fitting_pool(variant: int, budget: int) -> tuple[Any, Any, list[Any], np.ndarray]:
    """The cold search after ``budget`` trials (models fitted), and up to 1500 of its pool that truly fit with their
    true log step times."""
    b, t = _cold(variant, budget)
    cands = [c for c in t.pool if b.true_time(c) is not None][:1500]
    t.fit_models()
    return b, t, cands, np.log([b.true_time(c) for c in cands])


def _ranking(b: Any, log_true: np.ndarray, preds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per predictor: the true fraction of the optimum of its first pick and of the best of its first 5, its rank
    correlation with the truth over all candidates and over the 100 truly fastest."""
    opt = b.land.optimum()
    fastest = np.argsort(log_true)[:100]
    out: dict[str, Any] = {"name": b.land.name}
    for name, pred in preds.items():
        top = np.argsort(pred, kind="stable")[:5]
        out[name] = (opt / math.exp(log_true[top[0]]), opt / math.exp(log_true[top].min()),
                     _rank_corr(pred, log_true), _rank_corr(pred[fastest], log_true[fastest]))
    return out


def time_check(args: tuple[int, int]) -> dict[str, Any]:
    b, t, cands, log_true = _fitting_pool(*args)
    return _ranking(b, log_true, {"model": t.predict_time(cands)[0],
                                  "additive": t.time_model.predict(cands, noise=False)[0]})


def time_error(args: tuple[int, int]) -> dict[str, Any]:
    b, t, cands, log_true = _fitting_pool(*args)
    mean, sd = t.predict_time(cands)
    err = mean - log_true
    fastest = np.argsort(log_true)[:100]
    near = within_trust_radius(t.encoder, t.history, cands, t.config.trust_radius)
    return {"name": b.land.name, "all": float(err.std()), "100 fastest": float(err[fastest].std()),
            "trust radius": float(err[near].std()) if near.sum() > 2 else math.nan,
            "pred sd (radius)": float(np.median(sd[near])) if near.any() else math.nan,
            "|z| fastest": float(np.median(np.abs(err[fastest] - np.median(err)) / sd[fastest]))}


def models(args: tuple[int, int]) -> dict[str, Any]:
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor
    from sklearn.linear_model import Ridge

    from infrarsi.search.structured import features

    b, t, cands, log_true = _fitting_pool(*args)
    ran = [(s, o.step_time_s) for s, o in t.history if o.status is TrialStatus.OK]
    xs, y = [s for s, _ in ran], np.log([v for _, v in ran])

    def phi(ss: list[Any]) -> np.ndarray:
        return features(t.encoder.model_space, ss)

    def pairs(m: np.ndarray) -> np.ndarray:
        return np.hstack([m] + [(m[:, i] * m[:, j])[:, None] for i in range(m.shape[1]) for j in range(i + 1, m.shape[1])])

    preds = {"additive": t.time_model.predict(cands, noise=False)[0],
             "forest, indices": RandomForestRegressor(200, max_features=0.5, random_state=0).fit(
                 t.encoder.codes(xs), y).predict(t.encoder.codes(cands)),
             "forest, features": RandomForestRegressor(200, max_features=0.5, random_state=0).fit(
                 phi(xs), y).predict(phi(cands)),
             "extra trees": ExtraTreesRegressor(200, max_features=0.5, random_state=0).fit(phi(xs), y).predict(phi(cands))}
    for alpha in (0.3, 1.0, 3.0):
        preds[f"ridge {alpha}"] = Ridge(alpha=alpha).fit(phi(xs), y).predict(phi(cands))
        preds[f"ridge pairs {alpha}"] = Ridge(alpha=alpha).fit(pairs(phi(xs)), y).predict(pairs(phi(cands)))
    return _ranking(b, log_true, preds)


def neighbours(args: tuple[int, int]) -> dict[str, Any]:
    """The incumbent's untried one-knob moves after ``budget`` cold trials: what the best of the first k holds, by
    ranking."""
    from sklearn.ensemble import RandomForestRegressor

    b, t = _cold(*args)
    t.fit_models()
    opt = b.land.optimum()
    frac = lambda s: 0.0 if (v := b.true_time(s)) is None else opt / v  # noqa: E731
    inc = t.top(1)[0]
    ctx = t.context()
    moves = [m for m in ctx.neighbors(inc) if m not in t.history]
    fr, f0 = np.array([frac(m) for m in moves]), frac(inc)
    # The search's own scores (its pairing variants come after the moves: dropped); capped moves ranked, not -inf.
    n = len(moves)
    sc = score(Context(**{**ctx.__dict__, "candidates": moves}), t.steps.p_pass)
    capped = sc.p_oom[:n] > ctx.cap
    ok = [(s, o.step_time_s) for s, o in t.history if o.status is TrialStatus.OK]
    xs = [s for s, _ in ok]
    enc = lambda ss: np.hstack([t.encoder.codes(ss), t.time.design(ss)])  # noqa: E731
    forest = RandomForestRegressor(200, min_samples_leaf=2, random_state=0).fit(enc(xs), np.log([v for _, v in ok]))
    order = {"random": np.random.default_rng(args[0]).permutation(n),
             "search": np.lexsort((-(sc.ei * (1 - sc.p_oom) * sc.p_pass)[:n], capped)),
             "forest": np.lexsort((forest.predict(enc(moves)), capped))}
    out: dict[str, Any] = {"name": b.land.name, "incumbent": f0, "best move": max(f0, fr.max(initial=0.0)),
                           "moves": n, "OOM": float((fr == 0).mean()) if n else 0.0}
    for name, o in order.items():
        for k in (1, 3, 6):
            out[f"{name} @{k}"] = max(f0, fr[o[:k]].max(initial=0.0)) - f0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", action="store_true")
    ap.add_argument("--time-check", action="store_true")
    ap.add_argument("--models", action="store_true")
    ap.add_argument("--layout-gap", action="store_true")
    ap.add_argument("--neighbours", action="store_true")
    ap.add_argument("--time-error", action="store_true")
    ap.add_argument("--variants", type=int, default=8)
    ap.add_argument("--first-variant", type=int, default=0)
    ap.add_argument("--budget", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="TunerConfig overrides")
    args = ap.parse_args(argv)
    CONFIG.update(bs.config_overrides(ap, args.set))
    jobs = {"kinds": kinds, "time_check": time_check, "models": models, "layout_gap": layout_gap,
            "neighbours": neighbours, "time_error": time_error}
    chosen = [job for name, job in jobs.items() if getattr(args, name)]
    if len(chosen) != 1:
        ap.error("give one of --kinds, --time-check, --models, --layout-gap, --neighbours, --time-error")
    job = chosen[0]
    cells = [(args.first_variant + i, args.budget) for i in range(args.variants)]
    with mp.get_context("fork").Pool(args.jobs) as pool:
        rows = pool.map(job, cells)
    if args.neighbours:
        cols = [k for k in rows[0] if k != "name"]
        print(f"after {args.budget} cold trials: the incumbent's untried one-knob moves; gains are fractions of the"
              " optimum over the incumbent's")
        print(f"{'':8s} " + " ".join(f"{c:>10s}" for c in cols))
        for what, f in (("median", statistics.median), ("mean", statistics.fmean)):
            print(f"{what:8s} " + " ".join(f"{f(r[c] for r in rows):10.3f}" for c in cols))
        return 0
    if args.time_error:
        cols = [k for k in rows[0] if k != "name"]
        print(f"after {args.budget} cold trials: predicted minus true log step time (sd) over pool settings that fit")
        print(f"{'landscape':26s} " + " ".join(f"{c:>16s}" for c in cols))
        for r in rows:
            print(f"{r['name']:26s} " + " ".join(f"{r[c]:16.3f}" for c in cols))
        print(f"{'median':26s} " + " ".join(f"{statistics.median(r[c] for r in rows):16.3f}" for c in cols))
        return 0
    if args.layout_gap:
        cols = ("best", "its layout", "its other knobs")
        print(f"after {args.budget} cold trials: the best measured setting, and the best that keeps its layout or its"
              f" other knobs (fractions of the optimum)")
        print(f"{'landscape':26s} " + " ".join(f"{c:>15s}" for c in cols))
        for r in rows:
            print(f"{r['name']:26s} " + " ".join(f"{r[c]:15.3f}" for c in cols))
        print(f"{'median':26s} " + " ".join(f"{statistics.median(r[c] for r in rows):15.3f}" for c in cols))
        print(f"{'mean':26s} " + " ".join(f"{statistics.fmean(r[c] for r in rows):15.3f}" for c in cols))
        return 0
    if args.kinds:
        n, oom, better = Counter(), Counter(), Counter()
        for r in rows:
            for kind, o, b in r["rows"]:
                n[kind] += 1
                oom[kind] += o
                better[kind] += b
        print(f"cold search, {args.variants} variants x {args.budget} trials")
        print(f"{'kind':14s} {'trials':>7s} {'OOM':>5s} {'improved the best':>18s}")
        for kind in sorted(n, key=lambda k: -n[k]):
            print(f"{kind:14s} {n[kind]:7d} {oom[kind]:5d} {better[kind]:11d} ({better[kind] / n[kind]:.0%})")
        return 0
    if args.models:
        print(f"after {args.budget} cold trials, medians over {args.variants} variants: each regressor's ranking of up to"
              f" 1500 pool settings that fit")
        print(f"{'regressor':20s} {'1st pick':>8s} {'best of 5':>9s} {'rho':>5s} {'rho100':>6s}")
        for name in [k for k in rows[0] if k != "name"]:
            m = [statistics.median(r[name][i] for r in rows) for i in range(4)]
            print(f"{name:20s} {m[0]:8.3f} {m[1]:9.3f} {m[2]:5.2f} {m[3]:6.2f}")
        return 0
    print(f"after {args.budget} cold trials: the time model's ranking of up to 1500 pool settings that fit")
    print(f"{'landscape':26s} {'model: 1st':>10s} {'best of 5':>9s} {'rho':>5s} {'rho100':>6s}"
          f" {'additive: 1st':>13s} {'best of 5':>9s} {'rho':>5s} {'rho100':>6s}")
    for r in rows:
        print(f"{r['name']:26s} {r['model'][0]:10.3f} {r['model'][1]:9.3f} {r['model'][2]:5.2f} {r['model'][3]:6.2f}"
              f" {r['additive'][0]:13.3f} {r['additive'][1]:9.3f} {r['additive'][2]:5.2f} {r['additive'][3]:6.2f}")
    med = {k: [statistics.median(r[k][i] for r in rows) for i in range(4)] for k in ("model", "additive")}
    print(f"{'median':26s} {med['model'][0]:10.3f} {med['model'][1]:9.3f} {med['model'][2]:5.2f} {med['model'][3]:6.2f}"
          f" {med['additive'][0]:13.3f} {med['additive'][1]:9.3f} {med['additive'][2]:5.2f} {med['additive'][3]:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
