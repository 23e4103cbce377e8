"""Paired comparison of two search benchmarks: is a change to the search better than seed noise?

Reads two files saved by ``bench_search.py --json`` or ``--append`` (the same landscapes and seeds; a search with and without the
change), pairs their runs by (landscape, seed) and prints, per budget: each side's median and mean fraction of the
optimum, the worst run of each, the mean per-run difference (new - base) with a 95% bootstrap interval over the pairs,
how many runs the change put ahead and behind, and the mean OOM trials of each. Two arms of the same landscapes pair
too (``--names catalog`` against ``--names opaque``: what the names are worth).

A change whose interval straddles 0 is not told apart from noise. On this search one run's trajectory turns on
every decision, so other seeds alone move single runs by up to +-0.2 of the optimum. ``--by landscape`` pairs by
landscape alone: the same search under other seeds (``bench_search.py --first-seed 1000``) against itself gives that
noise floor (BENCHMARKS.md has its figures).

    python scripts/bench_search.py --tuners cold --budgets 20 30 --jobs 2 --json > base.json
    python scripts/bench_search.py --tuners cold --budgets 20 30 --jobs 2 --json --set local_every=2 > new.json
    python scripts/bench_compare.py base.json new.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

BOOTSTRAP = 10_000  # resamples of the pairs for the interval


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs of a ``bench_search.py --json`` file (one JSON list) or ``--append`` file (one run per line)."""
    try:
        text = path.read_text()
        if text.lstrip().startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: not a bench_search.py --json or --append file ({e}); save one with --json > {path}")


def load(path: Path, tuner: str | None) -> dict[tuple[str, int], dict[str, Any]]:
    """(landscape, seed) -> that run's scores per budget, for one tuner of a ``bench_search.py --json`` file."""
    runs = read_runs(path)
    names = sorted({r["tuner"] for r in runs})
    if tuner is None and len(names) > 1:
        raise SystemExit(f"{path} holds runs of {len(names)} tuners ({', '.join(names)}); pick one with --tuner")
    chosen = [r for r in runs if tuner is None or r["tuner"] == tuner]
    if not chosen:
        raise SystemExit(f"{path}: no runs of tuner {tuner!r}; it has {', '.join(names)}")
    return {(r["landscape"], int(r["seed"])): {str(k): v for k, v in r["scores"].items()} for r in chosen}


def by_landscape(runs: dict[tuple[str, int], dict[str, Any]], path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The same runs keyed by (landscape, 0): one run per landscape, whatever its seed."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for (land, _), scores in runs.items():
        if (land, 0) in out:
            raise SystemExit(f"{path}: several runs of {land}; --by landscape needs one per landscape")
        out[(land, 0)] = scores
    return out


def bootstrap_ci(diffs: list[float], rng: random.Random, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean of ``diffs`` over resamples of them."""
    n = len(diffs)
    means = sorted(statistics.fmean(rng.choices(diffs, k=n)) for _ in range(BOOTSTRAP))
    lo = means[int((1 - level) / 2 * BOOTSTRAP)]
    hi = means[min(BOOTSTRAP - 1, int((1 + level) / 2 * BOOTSTRAP))]
    return lo, hi


def compare(base: dict[tuple[str, int], dict[str, Any]], new: dict[tuple[str, int], dict[str, Any]],
            seed: int = 0) -> list[dict[str, Any]]:
    """One row per budget both sides scored: medians, means, mean difference and its 95% interval, ahead/behind,
    mean OOM trials."""
    pairs = sorted(base.keys() & new.keys())
    if not pairs:
        raise SystemExit("the two files share no (landscape, seed) run: run both with the same --first-variant, "
                         "--variants and seeds")
    budgets = sorted({b for k in pairs for b in base[k]} & {b for k in pairs for b in new[k]}, key=int)
    rng = random.Random(seed)
    rows = []
    for b in budgets:
        ks = [k for k in pairs if b in base[k] and b in new[k]]
        fa = [base[k][b]["frac"] for k in ks]
        fb = [new[k][b]["frac"] for k in ks]
        d = [y - x for x, y in zip(fa, fb)]
        lo, hi = bootstrap_ci(d, rng)
        rows.append({"budget": int(b), "n": len(ks), "base_median": statistics.median(fa),
                     "new_median": statistics.median(fb), "base_worst": min(fa), "new_worst": min(fb),
                     "base_mean": statistics.fmean(fa),
                     "new_mean": statistics.fmean(fb), "diff": statistics.fmean(d), "lo": lo, "hi": hi,
                     "ahead": sum(x > 1e-9 for x in d), "behind": sum(x < -1e-9 for x in d),
                     "base_ooms": statistics.fmean(base[k][b]["ooms"] for k in ks),
                     "new_ooms": statistics.fmean(new[k][b]["ooms"] for k in ks)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="bench_search.py --json output without the change")
    ap.add_argument("new", type=Path, help="the same with the change")
    ap.add_argument("--tuner", help="which tuner's runs, when a file holds several")
    ap.add_argument("--by", choices=("seed", "landscape"), default="seed",
                    help="pair runs by (landscape, seed) (a change to the search), or by landscape alone (the same "
                         "search under other seeds, e.g. bench_search.py --first-seed 1000: the noise floor)")
    args = ap.parse_args(argv)
    base, new = load(args.base, args.tuner), load(args.new, args.tuner)
    if args.by == "landscape":
        base, new = by_landscape(base, args.base), by_landscape(new, args.new)
    print_rows(compare(base, new))
    return 0


def print_rows(rows: list[dict[str, Any]]) -> None:
    """:func:`compare`'s rows as the table this script prints (``bench_search.py --paired`` prints it too)."""
    print(f"{'budget':>6s} {'pairs':>5s} {'median base -> new':>19s} {'mean base -> new':>17s} "
          f"{'worst base -> new':>18s} {'mean diff [95% CI]':>26s} {'ahead':>5s} {'behind':>6s} {'OOM base -> new':>16s}")
    for r in rows:
        print(f"{r['budget']:6d} {r['n']:5d} {r['base_median']:>8.3f} -> {r['new_median']:.3f} "
              f"{r['base_mean']:>7.3f} -> {r['new_mean']:.3f} {r['base_worst']:>8.3f} -> {r['new_worst']:.3f} "
              f"{r['diff']:>+9.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] "
              f"{r['ahead']:5d} {r['behind']:6d} {r['base_ooms']:>7.1f} -> {r['new_ooms']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
