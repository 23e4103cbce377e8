"""MemoryModel: censored (Tobit) likelihood recovers known coefficients where naive OOM handling
does not; P(OOM) is calibrated; the fast posterior matches the Pyro model it claims to compute."""

from __future__ import annotations

import math

import time

import numpy as np
import pyro
import pytest
import torch

from infrarsi.models import MemoryModel, memory_model
from infrarsi.models._fit import tobit_neg_log_joint
from infrarsi.testing.synthetic import GIB, SyntheticTruth, ten_knob_space


def _trials(space, truth, n, seed):
    rng = np.random.default_rng(seed)
    pool = list(space.enumerate())
    settings = [pool[i] for i in rng.integers(0, len(pool), size=n)]
    _, peaks, ooms = truth.simulate(settings, rng)
    return settings, peaks, ooms


def _covered(model, coef):
    eff = {e.feature: e for e in model.effects()}
    return {f: eff[f].lo <= coef.get(f, 0.0) <= eff[f].hi for f in eff}


def test_censored_recovers_coefficients_where_drop_and_capacity_do_not(space, truth, mem_coef):
    """16 replicate data sets of 40 random trials (~40% OOM). The 90% interval of the micro-batch-8
    effect -- the effect the OOMs inform -- covers the truth nearly always when OOMs are censored;
    scoring them at capacity does not; dropping them (survivors are selected on low memory) biases
    the estimate low (its wide intervals still cover)."""
    hits = {h: 0 for h in ("censor", "drop", "capacity")}
    mb8 = {h: [] for h in hits}
    all_cov = {h: [] for h in hits}
    n_oom = 0
    for seed in range(16):
        settings, peaks, ooms = _trials(space, truth, 40, seed=seed)
        n_oom += int(ooms.sum())
        for h in hits:
            m = MemoryModel(space, truth.capacity_bytes, oom_handling=h).fit(settings, peaks, ooms)
            cov = _covered(m, mem_coef)
            hits[h] += cov["micro_batch_size=8"]
            mb8[h].append(next(e.mean for e in m.effects() if e.feature == "micro_batch_size=8"))
            all_cov[h].append(np.mean([cov[f] for f in mem_coef]))
    assert 0.25 < n_oom / (16 * 40) < 0.6  # the boundary is in play
    assert hits["censor"] >= 14 and hits["capacity"] <= 2, hits
    truth_mb8 = mem_coef["micro_batch_size=8"]
    assert abs(np.mean(mb8["censor"]) - truth_mb8) < 0.15 and np.mean(mb8["drop"]) < truth_mb8 - 0.3, mb8
    assert np.mean(all_cov["censor"]) >= 0.85 > 0.6 > np.mean(all_cov["capacity"]), all_cov


def test_censored_estimates_beat_naive_on_one_data_set(space, truth, mem_coef):
    settings, peaks, ooms = _trials(space, truth, 40, seed=3)

    def err(h):
        m = MemoryModel(space, truth.capacity_bytes, oom_handling=h).fit(settings, peaks, ooms)
        eff = {e.feature: e.mean for e in m.effects()}
        return np.mean([abs(eff[f] - v) for f, v in mem_coef.items()])

    assert err("censor") < 0.6 * min(err("drop"), err("capacity"))


def test_p_oom_is_calibrated():
    space = ten_knob_space()
    truth = SyntheticTruth(
        space,
        capacity_bytes=80 * GIB,
        mem_coef={
            "micro_batch_size=2": 0.4, "micro_batch_size=4": 0.8, "micro_batch_size=8": 1.2,
            "recompute_granularity=selective": -0.25, "recompute_granularity=full": -0.6,
            "tensor_parallel=2": -0.3, "tensor_parallel=4": -0.6, "tensor_parallel=8": -0.9,
            "pipeline_parallel=2": -0.2, "pipeline_parallel=4": -0.4, "distributed_optimizer=True": -0.2,
            "log2(tensor_parallel)*sequence_parallel=True": -0.05,
        },
        mem_intercept=math.log(45 * GIB),
        mem_sigma=0.08,
    )
    cands = space.sample(7, 3000)
    ps, outcomes = [], []
    for rep in range(4):
        rng = np.random.default_rng(100 + rep)
        tr = [cands[i] for i in rng.choice(len(cands), 40, replace=False)]
        _, peaks, ooms = truth.simulate(tr, rng)
        m = MemoryModel(space, truth.capacity_bytes, seed=rep).fit(tr, peaks, ooms)
        p = m.p_oom(cands)
        sel = (p >= 0.1) & (p <= 0.3)
        chosen = [c for c, s in zip(cands, sel) if s]
        for _ in range(10):  # fresh runs of the chosen settings
            _, _, o = truth.simulate(chosen, rng)
            ps.append(p[sel])
            outcomes.append(o)
    ps, outcomes = np.concatenate(ps), np.concatenate(outcomes)
    assert len(ps) >= 1000  # 100+ distinct settings per replicate
    frac, expected = outcomes.mean(), ps.mean()
    assert 0.1 <= frac <= 0.3 and abs(frac - expected) < 0.07, (frac, expected)


def test_crash_rows_contribute_nothing_and_refit_warm_starts(space, truth):
    settings, peaks, ooms = _trials(space, truth, 30, seed=5)
    a = MemoryModel(space, truth.capacity_bytes).fit(settings, peaks, ooms)
    # two crashes unrelated to memory: no peak, not an OOM
    b = MemoryModel(space, truth.capacity_bytes).fit(
        settings + settings[:2], list(peaks) + [None, float("nan")], list(ooms) + [False, False]
    )
    np.testing.assert_allclose(a.posterior.mean(), b.posterior.mean(), atol=1e-6)
    assert a.n_censored == int(ooms.sum()) and a.n_obs == int((~ooms).sum())
    # a refit from the previous posterior lands on the same answer as a cold fit
    more, mp, mo = _trials(space, truth, 10, seed=6)
    t0 = time.perf_counter()
    a.fit(settings + more, np.concatenate([peaks, mp]), np.concatenate([ooms, mo]))
    elapsed = time.perf_counter() - t0
    c = MemoryModel(space, truth.capacity_bytes).fit(settings + more, np.concatenate([peaks, mp]), np.concatenate([ooms, mo]))
    np.testing.assert_allclose(a.posterior.mean(), c.posterior.mean(), atol=1e-5)
    assert 0 < a.last_fit_s <= elapsed  # the duration of that refit, not of an earlier one


def test_objective_is_the_pyro_model(space, truth):
    """The grid solver's density equals memory_model's log joint (LogNormal on sigma, with the
    log-Jacobian of sigma = exp(log sigma)), up to one constant."""
    settings, peaks, ooms = _trials(space, truth, 25, seed=8)
    m = MemoryModel(space, truth.capacity_bytes).fit(settings, peaks, ooms)
    kw = m.pyro_kwargs()
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(3):
        eta = m.posterior.mean() + 0.1 * rng.standard_normal(m.design.p + 1)
        ls = math.log(0.07) + 0.3 * rng.standard_normal()
        vals = {"intercept": torch.tensor(eta[0]), "beta": torch.as_tensor(eta[1:]), "sigma": torch.tensor(math.exp(ls), dtype=torch.float64)}
        tr = pyro.poutine.trace(pyro.poutine.condition(memory_model, data=vals)).get_trace(**kw)
        pyro_lp = float(tr.log_prob_sum()) + ls  # + log|d sigma / d log sigma|
        d = m._data
        f = tobit_neg_log_joint(eta[None], np.array([ls]), d["x1_ok"], d["y_ok"] - d["off_ok"], d["x1_oom"],
                                m.log_capacity - d["off_oom"], *m.coefficient_prior())[0]
        f += 0.5 * ((ls - math.log(0.1)) / 1.0) ** 2
        diffs.append(pyro_lp + f)
    assert np.ptp(diffs) < 1e-8, diffs


def test_bad_input_names_the_field(space):
    m = MemoryModel(space, 64 * GIB)
    with pytest.raises(ValueError, match=r"peaks_bytes\[1\]"):
        m.fit([{}, {}], [1e9, -5.0], [False, False])
    with pytest.raises(ValueError, match="one value per setting"):
        m.fit([{}, {}], [1e9], [False, False])
    with pytest.raises(ValueError, match="micro_batch_size=3"):
        m.fit([{"micro_batch_size": 3}], [1e9], [False])
    with pytest.raises(ValueError, match="capacity_bytes"):
        MemoryModel(space, 0)
    with pytest.raises(ValueError, match="oom_handling"):
        MemoryModel(space, 1e9, oom_handling="zero")
    with pytest.raises(ValueError, match="margin"):
        m.p_oom([{}], margin=1.5)


def test_svi_agrees_with_grid_and_continues_from_last_guide(space, truth, mem_coef):
    settings, peaks, ooms = _trials(space, truth, 30, seed=9)
    grid = MemoryModel(space, truth.capacity_bytes).fit(settings, peaks, ooms)
    svi = MemoryModel(space, truth.capacity_bytes, inference="svi", svi_steps=(200, 30))
    svi.fit(settings, peaks, ooms)
    guide = svi._svi[0]
    svi.fit(settings, peaks, ooms)
    assert svi._svi[0] is guide  # same guide, parameters carried over
    g = {e.feature: e for e in grid.effects()}
    s = {e.feature: e.mean for e in svi.effects()}
    # two approximations of one posterior: SVI's means lie inside the grid's 90% intervals (the
    # censored micro-batch-8 effect is skewed: a Gaussian guide's mean sits right of the mode)
    inside = [g[f].lo - 0.05 <= s[f] <= g[f].hi + 0.05 for f in mem_coef]
    assert sum(inside) >= len(inside) - 1, {f: (g[f].lo, g[f].hi, s[f]) for f in mem_coef}


@pytest.mark.slow  # NUTS: ~30-60 s on 2 shared cores
def test_grid_posterior_matches_nuts(space, truth):
    """The grid + EP posterior against exact NUTS, on data where micro-batch 8 is seen mostly
    through OOMs (its posterior is right-skewed: EP gets its mean and most of its width)."""
    settings, peaks, ooms = _trials(space, truth, 30, seed=12)
    m = MemoryModel(space, truth.capacity_bytes, interactions=[]).fit(settings, peaks, ooms)
    fast = {e.feature: e for e in m.effects()}
    m.run_nuts(num_samples=300, warmup_steps=200)
    for e in m.effects(nuts=True):
        f = fast[e.feature]
        width = f.hi - f.lo
        assert abs(e.mean - f.mean) < 0.2 * width + 0.01, (e, f)
        assert 0.7 < (e.hi - e.lo) / width < 1.4, (e, f)


def test_analytical_offsets(space, truth, mem_coef):
    settings, peaks, ooms = _trials(space, truth, 40, seed=21)
    # an analytical activation estimate that gets the micro-batch effect right: log bytes per setting
    off = np.array([math.log(48 * GIB) + mem_coef.get(f"micro_batch_size={s['micro_batch_size']}", 0.0) for s in settings])
    m = MemoryModel(space, truth.capacity_bytes).fit(settings, peaks, ooms, offsets=off)
    eff = {e.feature: e for e in m.effects()}
    for v in (2, 4, 8):  # the offset explains it: nothing left for the coefficient
        e = eff[f"micro_batch_size={v}"]
        assert e.lo < 0 < e.hi and abs(e.mean) < 0.2, e
    assert abs(eff["tensor_parallel=4"].mean - mem_coef["tensor_parallel=4"]) < 0.1
    with pytest.raises(ValueError, match="offsets"):
        m.p_oom(settings)
    p = m.p_oom(settings, offsets=off)
    assert p[ooms].mean() > 0.7 and p[~ooms].mean() < 0.3
