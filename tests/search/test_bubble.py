"""BubbleColumn: the pipeline bubble's log factor per setting, and the time GP that reads it ranks a landscape whose
step time is the 1F1B schedule's better than one without it."""

from __future__ import annotations

import math
import random

import numpy as np

from infrarsi.knobs import Knob, KnobSpace, Setting
from infrarsi.search import JointTime, Outcome, ResidualTime, Tuner, TunerConfig
from infrarsi.search.bubble import BubbleColumn

WORLD, GLOBAL_BATCH = 16, 64


def _space() -> KnobSpace:
    def world(s):
        n = s["tensor_parallel"] * s["pipeline_parallel"] * s["data_parallel"]
        return None if n == WORLD else f"tp * pp * dp = {n}, not {WORLD}"

    def batch(s):
        n = s["micro_batch_size"] * s["data_parallel"]
        return None if GLOBAL_BATCH % n == 0 else f"micro-batch x dp = {n} does not divide {GLOBAL_BATCH}"

    def vp_needs_pp(s):
        return None if s["virtual_pipeline"] == 1 or s["pipeline_parallel"] > 1 else "virtual pipeline needs pp > 1"

    return KnobSpace([
        Knob(name="tensor_parallel", kind="int", domain=(1, 2, 4), default=1),
        Knob(name="pipeline_parallel", kind="int", domain=(1, 2, 4, 8), default=1),
        Knob(name="virtual_pipeline", kind="int", domain=(1, 2, 4), default=1),
        Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4, 8), default=1),
        Knob(name="overlap_grad_reduce", kind="bool"),
        Knob(name="data_parallel", kind="int", domain=(1, 2, 4, 8, 16), default=16),
    ], [world, batch, vp_needs_pp])


def _step_time(s: Setting) -> float:
    """Compute split over the world, thinner GEMMs at high TP, then the 1F1B bubble on top."""
    tp, pp, vp, mbs, dp = (s[k] for k in ("tensor_parallel", "pipeline_parallel", "virtual_pipeline",
                                          "micro_batch_size", "data_parallel"))
    m = GLOBAL_BATCH / (mbs * dp)
    compute = 1.0 * (1 + 0.08 * math.log2(tp)) * (1 + 0.25 / mbs) * (0.97 if s["overlap_grad_reduce"] else 1.0)
    return compute * (1 + (pp - 1) / (vp * m))


def test_values_are_the_log_bubble_factor():
    space = _space()
    pool = space.candidates(2000, random.Random(0))
    col = BubbleColumn.for_space(space, pool)
    assert col is not None and col.samples_per_step == GLOBAL_BATCH  # mbs x dp = 64 is allowed: one micro-batch
    s = space.complete({"tensor_parallel": 1, "pipeline_parallel": 4, "virtual_pipeline": 2, "micro_batch_size": 2,
                        "data_parallel": 4})
    flat = s.replace(pipeline_parallel=1, virtual_pipeline=1, data_parallel=16)
    # 4 stages, 2 virtual each, 64 / (2 * 4) = 8 micro-batches: bubble 3 / 16 of the work
    assert np.allclose(col.values([s, flat]), [math.log1p(3 / 16), 0.0])
    deeper = s.replace(micro_batch_size=8)  # 2 micro-batches: 3 / 4
    assert col.values([deeper])[0] == math.log1p(3 / 4)


def test_no_column_without_a_pipeline_knob():
    space = KnobSpace([Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4), default=1)])
    assert BubbleColumn.for_space(space, space.candidates(10, random.Random(0))) is None
    t = Tuner(space, seed=0, time=JointTime(bubble=True))
    assert t.time.column is None
    assert Tuner(_space(), seed=0).time.column is None  # off by default (JointTime(bubble=False))
    assert Tuner(_space(), seed=0, time=JointTime(bubble=True)).time.column is not None


def _rank_error(bubble: bool, seed: int) -> float:
    """Mean |predicted - true| log step time over the settings no trial ran, after 12 random trials."""
    space = _space()
    t = Tuner(space, seed=seed, time=JointTime(bubble=bubble))
    rng = random.Random(seed)
    pool = space.candidates(5000, rng)
    told = rng.sample(pool, 12)
    for s in told:
        t.tell(s, Outcome(status="ok", step_time_s=_step_time(s)))
    t.fit_models()
    seen = set(told)
    rest = [s for s in pool if s not in seen]
    mean, _ = t.predict_time(rest)
    return float(np.mean(np.abs(mean - np.log([_step_time(s) for s in rest]))))


def test_the_bubble_column_predicts_settings_no_trial_ran():
    """On a 1F1B landscape the GP with the column is nearer the truth away from the trials, on most seeds."""
    with_col = [_rank_error(True, seed) for seed in range(5)]
    without = [_rank_error(False, seed) for seed in range(5)]
    assert sum(a < b for a, b in zip(with_col, without)) >= 4, (with_col, without)
    assert np.mean(with_col) < 0.7 * np.mean(without), (with_col, without)
