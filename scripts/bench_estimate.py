"""Benchmark: the pre-flight estimate vs real measured peaks, and vs the analytical estimate.

    python scripts/bench_estimate.py --calibrate          # the measured constant for what trackers cannot see
    python scripts/bench_estimate.py --minigpt            # every minigpt layout that runs here: error table
    python scripts/bench_estimate.py --scale              # torchtitan llama3 8B on 64 ranks, 70B on 256

Errors are (estimate - measured) / measured of the per-process peak; rank order is the share of setting pairs
whose order by memory the estimate gets right (pairs whose measured peaks differ by under 2% are ties, skipped).
Measurements are cached in --cache (a killed benchmark resumes); --fresh ignores the cache.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infrarsi.contract.model import load_contract  # noqa: E402

MiB = 2**20
ROOT = Path(__file__).resolve().parents[1]


def _cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def minigpt_grid(full: bool = False) -> list[dict]:
    """The shipped minigpt contract's memory knobs: micro-batch x recompute x attention in fp32, and bf16 at
    micro-batch 4 and 16 (threads 1; adam foreach). --full adds bf16 everywhere."""
    out = []
    for mbs, rc, attn, bf16 in itertools.product((1, 2, 4, 8, 16), ("none", "selective", "full"), ("auto", "unfused"),
                                                  (False, True)):
        if bf16 and not full and mbs not in (4, 16):
            continue
        out.append({"micro_batch_size": mbs, "recompute_granularity": rc, "attention_backend": attn, "bf16": bf16,
                    "intra_op_threads": 1})
    return out


def pairs_right(est: list[float], meas: list[float], tie: float = 0.02) -> tuple[int, int]:
    right = total = 0
    for i, j in itertools.combinations(range(len(est)), 2):
        if abs(meas[i] - meas[j]) <= tie * max(meas[i], meas[j]):
            continue
        total += 1
        right += (est[i] - est[j]) * (meas[i] - meas[j]) > 0
    return right, total


def run_minigpt(args) -> int:
    from infrarsi.adapters.minigpt import MiniGPTAdapter
    from infrarsi.estimate import estimate
    from infrarsi.estimate.measure import measured_peak_minigpt
    from infrarsi.priors.offline import memory_estimator

    contract = load_contract(ROOT / "contracts/minigpt-cpu.toml")
    space = MiniGPTAdapter().knob_space(contract)
    analytical = memory_estimator(space, workload=dict(contract.workload.args), hardware=contract.hardware.model_dump())
    cache_path = Path(args.cache)
    cache = {} if args.fresh else _cache(cache_path)
    grid = minigpt_grid(args.full)
    if args.limit:
        grid = grid[:: max(1, round(len(grid) / args.limit))]
    rows = []
    for s in grid:
        key = json.dumps(s, sort_keys=True)
        if key not in cache:
            cache[key] = {"measured": measured_peak_minigpt(contract, s)}
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
        e = estimate(contract, s)
        full = space.complete(s)
        rows.append((s, cache[key]["measured"], e, analytical(full)))
    print(f"{'mbs':>3} {'recompute':>9} {'attn':>7} {'bf16':>5} | {'measured':>8} {'estimate':>8} {'err':>6} | "
          f"{'analytic':>8} {'err':>6} | tracked: params grads opt act temp  (MiB)")
    errs, aerrs = [], []
    for s, m, e, a in rows:
        err, aerr = e.peak_bytes / m - 1, a / m - 1
        errs.append(err)
        aerrs.append(aerr)
        c = e.by_category()
        print(f"{s['micro_batch_size']:>3} {s['recompute_granularity']:>9} {s['attention_backend']:>7} {str(s['bf16']):>5} | "
              f"{m / MiB:8.0f} {e.peak_bytes / MiB:8.0f} {err:+6.1%} | {a / MiB:8.0f} {aerr:+6.1%} | "
              f"{c['parameters'] / MiB:.0f} {c['gradients'] / MiB:.0f} {c['optimizer'] / MiB:.0f} "
              f"{c['activations'] / MiB:.0f} {c['temporaries'] / MiB:.0f}")
    meas = [m for _, m, _, _ in rows]
    r, t = pairs_right([e.peak_bytes for _, _, e, _ in rows], meas)
    ar, at = pairs_right([a for *_, a in rows], meas)
    print(f"\n{len(rows)} settings; unseen constant {rows[0][2].unseen_bytes / MiB:.0f} MiB ({rows[0][2].unseen_source})")
    print(f"estimate:   median |error| {statistics.median(map(abs, errs)):.1%}, max {max(map(abs, errs)):.1%}, "
          f"rank order right in {r}/{t} pairs ({r / max(t, 1):.1%})")
    print(f"analytical: median |error| {statistics.median(map(abs, aerrs)):.1%}, max {max(map(abs, aerrs)):.1%}, "
          f"rank order right in {ar}/{at} pairs ({ar / max(at, 1):.1%})")
    print(f"estimate wall time: median {statistics.median(e.wall_s for _, _, e, _ in rows):.2f} s per setting")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minigpt", action="store_true")
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--scale", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="measure only about this many settings of the grid")
    p.add_argument("--cache", default=str(ROOT / ".infrarsi/bench_estimate/minigpt.json"))
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--full", action="store_true", help="the whole grid (bf16 at every micro-batch)")
    args = p.parse_args(argv)
    if args.calibrate:
        from infrarsi.estimate.overhead import calibrate

        for name, v in calibrate().items():
            print(f"{name}: {v / MiB:.1f} MiB" if name.startswith("base") else f"{name}: {v:.3f} per byte")
    if args.minigpt:
        run_minigpt(args)
    if args.scale:
        from infrarsi.estimate.torchtitan import scale_table

        scale_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
