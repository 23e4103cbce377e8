"""StructuredMemory: a peak that is a sum of parts is learned as one (an additive log model cannot), from
measured peaks, OOMs and runs that fit; its gradient is exact; the tuner prices P(OOM) with it when cold."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.models import MemoryModel
from infrarsi.search import CensoredPeak, Outcome, StructuredPeak, Tuner, TunerConfig, run_tuner
from infrarsi.search.censored import ABOVE, BELOW, OBS
from infrarsi.search.structured import STRUCTURE_WITH_SAVERS, StructuredMemory, _Objective, features, structure_prior

GIB = 2.0 ** 30
CAP = 80 * GIB


def _space() -> KnobSpace:
    return KnobSpace([
        Knob(name="tensor_parallel", kind="int", domain=(1, 2, 4, 8), default=1, group="parallelism"),
        Knob(name="pipeline_parallel", kind="int", domain=(1, 2, 4, 8), default=1, group="parallelism"),
        Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4, 8), default=1, group="memory"),
        Knob(name="recompute_granularity", kind="categorical", domain=("none", "selective", "full"),
             default="none", group="memory"),
        Knob(name="tp_comm_overlap", kind="bool", group="communication"),
    ])


def _peak(s) -> float:
    """Weights and optimizer state split by tp x pp, activations x micro-batch / tp cut by recompute, a fixed part."""
    act = {"none": 1.0, "selective": 0.6, "full": 0.15}[s["recompute_granularity"]]
    return (150 * GIB / (s["tensor_parallel"] * s["pipeline_parallel"])
            + 24 * GIB * s["micro_batch_size"] / s["tensor_parallel"] * act + 3 * GIB)


def _data(n: int, seed: int):
    space = _space()
    rng = np.random.default_rng(seed)
    grid = space.candidates(10_000, random.Random(0))
    idx = rng.choice(len(grid), size=n, replace=False)
    return space, [grid[i] for i in idx], grid


def test_gradient_is_exact():
    rng = np.random.default_rng(1)
    phi = rng.normal(size=(9, 4))
    kind = np.array([OBS, OBS, OBS, ABOVE, ABOVE, BELOW, BELOW, OBS, ABOVE])
    y = np.where(kind == OBS, rng.normal(25, 0.5, 9), 0.0)
    obj = _Objective(phi, kind, y, 25.0, None)
    th = rng.normal(0, 0.5, obj.size)
    th[:2] += 24.0
    th[-2] += 23.0
    th[-1] = math.log(0.2)
    _, g = obj.value_grad(th)
    for j in range(obj.size):
        e = np.zeros(obj.size)
        e[j] = 1e-6
        num = (obj.value_grad(th + e)[0] - obj.value_grad(th - e)[0]) / 2e-6
        assert abs(num - g[j]) < 1e-4 * max(1.0, abs(g[j])), (j, num, g[j])


def test_a_sum_of_parts_is_learned_where_the_additive_log_model_misses():
    space, train, grid = _data(40, 0)
    log_peak = np.log([_peak(s) for s in train])
    sm = StructuredMemory.fit(features(space, train), np.full(40, OBS), log_peak, math.log(CAP))
    truth = np.log([_peak(s) for s in grid])
    mean, var = sm.predict(features(space, grid))
    err_sm = np.median(np.abs(mean - truth))
    mm = MemoryModel(space, CAP).fit(train, [_peak(s) for s in train], [False] * 40)
    mean_add, _ = mm.predict(grid, noise=False)
    err_add = np.median(np.abs(mean_add - truth))
    assert err_sm < 0.05, err_sm
    assert err_sm < 0.5 * err_add, (err_sm, err_add)
    # the predictive sd is honest: most of the grid lies within 2 sd of the truth
    assert np.mean(np.abs(mean - truth) < 2 * np.sqrt(var + sm.sigma ** 2) + 0.02) > 0.8


def test_boundary_learned_from_ooms_and_fits_without_any_peak():
    space, train, grid = _data(40, 2)
    kind = np.array([ABOVE if _peak(s) > CAP else BELOW for s in train])
    assert 5 < (kind == ABOVE).sum() < 35  # both sides seen
    sm = StructuredMemory.fit(features(space, train), kind, np.full(40, np.nan), math.log(CAP),
                              prior=structure_prior(space))
    truth = np.log([_peak(s) for s in grid]) - math.log(CAP)
    p = sm.p_above(features(space, grid), math.log(CAP))
    far_in, far_out = truth < -0.5, truth > 0.5
    # labels alone leave the scale loose (wide intervals), but each far side is on its side
    assert np.mean(p[far_in] < 0.5) > 0.9 and np.mean(p[far_out] > 0.5) > 0.9, (p[far_in], p[far_out])
    assert np.median(p[far_in]) < 0.2 and np.median(p[far_out]) > 0.8
    # and it ranks the whole grid by memory nearly right
    assert np.corrcoef(sm.predict(features(space, grid))[0], truth)[0, 1] > 0.9


def test_structure_prior_names_only_knobs_of_the_space():
    space = _space()
    prior = structure_prior(space)
    assert prior.shape == (2, features(space, [space.default()]).shape[1])
    # columns: ln tp, ln pp, ln mb, recompute selective, recompute full, overlap
    assert prior[0].tolist() == [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
    assert prior[1].tolist() == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert not structure_prior(space, ()).any()


def test_tuner_prices_p_oom_with_the_terms_when_cold_and_learns_from_both_sides():
    space, train, grid = _data(24, 3)
    t = Tuner(space, memory_capacity_bytes=CAP, seed=0)
    for s in train:
        peak = _peak(s)
        t.tell(s, Outcome("oom") if peak > CAP else Outcome("ok", step_time_s=1.0 + 0.01 * s["micro_batch_size"]))
    t.fit_models()
    assert t.memory.terms is not None
    truth = np.array([_peak(s) for s in grid])
    p = t.p_oom(grid)
    assert np.mean(p[truth > 1.5 * CAP] > 0.5) > 0.9 and np.mean(p[truth < 0.6 * CAP] < 0.3) > 0.9
    off = Tuner(space, memory_capacity_bytes=CAP, seed=0, memory=CensoredPeak())
    for s, o in t.history:
        off.tell(s, o)
    off.fit_models()
    assert not hasattr(off.memory, "terms")


def test_the_structure_names_the_memory_savers_by_knob_and_by_value():
    space = _space()
    prior = structure_prior(space, STRUCTURE_WITH_SAVERS)
    # columns: ln tp, ln pp, ln mb, recompute selective, recompute full, overlap
    assert prior[0].tolist() == [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
    assert prior[1].tolist() == [0.0, 0.0, 1.0, -0.5, -1.0, 0.0]


def test_a_cold_search_where_almost_nothing_fits_finds_what_does():
    """2 settings of 384 fit. The design's diverse trials all OOM; then every other trial is the smallest peak
    the model predicts, and with what the memory savers mean (STRUCTURE_WITH_SAVERS) that one fits."""
    space, cap = _space(), 6 * GIB

    def run(s):
        peak = _peak(s)
        if peak > cap:
            return Outcome("oom")
        return Outcome("ok", step_time_s=1.0 / s["micro_batch_size"] + 0.1 * s["tensor_parallel"], peak_memory_bytes=peak)

    t = Tuner(space, memory_capacity_bytes=cap, seed=0, config=TunerConfig(n_candidates=400))
    statuses = [o.status for _, o in run_tuner(t, run, 12)]
    assert statuses[:4] == ["oom"] * 4  # the design ran its course with nothing that ran
    assert "ok" in statuses[4:7], statuses


def test_anchored_a_named_knob_is_measured_from_its_first_value_an_unnamed_one_from_its_domains_middle():
    """``StructuredPeak(anchored=True)``: the term sizes are stated where its features are 0: for knobs with a meaning,
    the setting with every knob at its first value (nothing split, nothing saved); for opaque knobs, the middle of the
    space. By default every knob is centred."""
    named = _space()
    first = named.complete({k.name: k.domain[0] for k in named.knobs})
    anchored = Tuner(named, memory_capacity_bytes=CAP, memory=StructuredPeak(anchored=True)).memory
    assert np.allclose(anchored.phi([first]), 0.0)
    assert not np.allclose(Tuner(named, memory_capacity_bytes=CAP).memory.phi([first]), 0.0)
    opaque = KnobSpace([Knob(name=f"k{i}", kind=k.kind, domain=k.domain, default=k.default) for i, k in
                        enumerate(named.knobs)])
    grid = [opaque.complete(dict(zip([f"k{i}" for i in range(5)], v)))
            for v in itertools.product(*[k.domain for k in opaque.knobs])]
    phi = Tuner(opaque, memory_capacity_bytes=CAP, memory=StructuredPeak(anchored=True)).memory.phi(grid)
    assert np.allclose(phi.mean(axis=0), 0.0) and not np.allclose(phi[0], 0.0)
