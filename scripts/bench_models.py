"""Benchmark: refit + prediction time of TimeModel and MemoryModel.

For each trial count n, a model that has already been fit on n - 1 trials is refit on n trials
(the search loop's case: one new trial per step) and then predicts n_candidates settings
(TimeModel.predict; MemoryModel.predict and p_oom). "cold fit" is the first fit (on n - 1 trials,
from the prior). Times are medians over --repeats; the machine's other load shows in them.

    .venv/bin/python scripts/bench_models.py                      # 50 trials, 10,000 candidates
    .venv/bin/python scripts/bench_models.py --trials 10 50 100 --svi
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from infrarsi.models import MemoryModel, TimeModel
from infrarsi.testing.synthetic import GIB, SyntheticTruth, ten_knob_space

MEM_COEF = {
    "micro_batch_size=2": 0.4, "micro_batch_size=4": 0.8, "micro_batch_size=8": 1.2,
    "recompute_granularity=selective": -0.25, "recompute_granularity=full": -0.6,
    "tensor_parallel=2": -0.3, "tensor_parallel=4": -0.6, "tensor_parallel=8": -0.9,
    "pipeline_parallel=2": -0.2, "pipeline_parallel=4": -0.4, "distributed_optimizer=True": -0.2,
}
TIME_COEF = {
    "micro_batch_size=2": -0.1, "micro_batch_size=4": -0.18, "micro_batch_size=8": -0.22,
    "recompute_granularity=selective": 0.04, "recompute_granularity=full": 0.3,
    "tensor_parallel=2": 0.05, "tensor_parallel=4": 0.12, "tensor_parallel=8": 0.3,
    "pipeline_parallel=2": 0.08, "pipeline_parallel=4": 0.15, "overlap_grad_reduce=True": -0.05,
    "log2(pipeline_parallel)*log2(virtual_pipeline)": -0.04,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, nargs="+", default=[50])
    ap.add_argument("--candidates", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--svi", action="store_true", help="also time MemoryModel(inference='svi')")
    args = ap.parse_args()

    space = ten_knob_space()
    truth = SyntheticTruth(space, capacity_bytes=80 * GIB, time_coef=TIME_COEF, mem_coef=MEM_COEF,
                           mem_intercept=math.log(80 * GIB), mem_sigma=0.08)
    rng = np.random.default_rng(0)
    everything = list(space.enumerate())  # 13,824 settings; candidates drawn once, not timed
    cands = [everything[i] for i in rng.choice(len(everything), min(args.candidates, len(everything)), replace=False)]
    kinds = [("time", {}), ("memory", {})] + ([("memory", {"inference": "svi"})] if args.svi else [])

    print(f"{'model':<14}{'n trials':>9}{'n cand':>8}{'OOMs':>6}{'cold fit s':>11}{'refit s':>9}{'predict s':>11}{'refit+pred s':>13}")
    for n in args.trials:
        pool = [cands[i] for i in rng.choice(len(cands), n, replace=False)]
        times, peaks, ooms = truth.simulate(pool, rng)
        for kind, kw in kinds:
            name = kind if not kw else f"{kind}/{kw['inference']}"
            colds, fits, preds = [], [], []
            for r in range(args.repeats):
                if kind == "time":
                    m = TimeModel(space, noise_cv=0.02, seed=r).fit(pool[:-1], times[:-1])
                    colds.append(m.last_fit_s)
                    m.fit(pool, times)
                    t0 = time.perf_counter()
                    m.predict(cands)
                else:
                    m = MemoryModel(space, truth.capacity_bytes, seed=r, **kw).fit(pool[:-1], peaks[:-1], ooms[:-1])
                    colds.append(m.last_fit_s)
                    m.fit(pool, peaks, ooms)  # warm: starts from the fit on n - 1 trials
                    t0 = time.perf_counter()
                    m.predict(cands)
                    m.p_oom(cands)
                preds.append(time.perf_counter() - t0)
                fits.append(m.last_fit_s)
                if kw and r >= 2:  # SVI is slow; 3 repeats are enough
                    break
            c, f, p = statistics.median(colds), statistics.median(fits), statistics.median(preds)
            print(f"{name:<14}{n:>9}{len(cands):>8}{int(ooms.sum()):>6}{c:>11.3f}{f:>9.3f}{p:>11.3f}{f + p:>13.3f}")


if __name__ == "__main__":
    main()
