"""TimeModel: recovers known effects, its closed-form posterior is the Pyro model's, offsets and
noise are handled, and refit + prediction is fast."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyro
import pytest
import torch

from infrarsi.models import TimeModel, time_model


def _ok_trials(space, truth, n, seed):
    truth = dataclasses.replace(truth, capacity_bytes=1e15)  # no OOMs: every trial has a step time
    rng = np.random.default_rng(seed)
    pool = list(space.enumerate())
    settings = [pool[i] for i in rng.integers(0, len(pool), size=n)]
    times, _, _ = truth.simulate(settings, rng)
    return settings, times  # NaN where the trial ran out of memory


def test_recovers_time_effects(space, truth, time_coef):
    settings, times = _ok_trials(space, truth, 50, seed=1)
    m = TimeModel(space, noise_cv=0.02).fit(settings, times)
    assert m.n_obs == 50
    eff = {e.feature: e for e in m.effects()}
    for f, v in time_coef.items():
        assert abs(eff[f].mean - v) < 0.1, (f, eff[f])
    covered = [eff[f].lo <= time_coef.get(f, 0.0) <= eff[f].hi for f in eff]
    assert sum(covered) >= 0.8 * len(covered)
    assert 0.01 < m.sigma < 0.04  # true scatter 0.02
    mean, sd = m.predict(settings)
    ok = np.isfinite(times)
    assert np.abs(mean[ok] - np.log(times[ok])).mean() < 0.05
    assert (sd > 0).all()


def test_closed_form_is_the_pyro_models_posterior(space, truth):
    """At each noise level of the grid, the conjugate posterior mean maximises time_model's log joint
    over (intercept, beta): the Pyro gradient there is zero."""
    settings, times = _ok_trials(space, truth, 30, seed=2)
    m = TimeModel(space).fit(settings, times)
    post = m.posterior
    kw = m.pyro_kwargs()
    for g in np.argsort(post.weights)[-3:]:
        b0 = torch.tensor(post.means[g, 0], dtype=torch.float64, requires_grad=True)
        beta = torch.tensor(post.means[g, 1:], dtype=torch.float64, requires_grad=True)
        sigma = torch.tensor(math.exp(post.log_sigma[g]), dtype=torch.float64)
        tr = pyro.poutine.trace(
            pyro.poutine.condition(time_model, data={"intercept": b0, "beta": beta, "sigma": sigma})
        ).get_trace(**kw)
        grads = torch.autograd.grad(tr.log_prob_sum(), [b0, beta])
        assert max(float(t.abs().max()) for t in grads) < 1e-6


@pytest.mark.slow  # NUTS: ~1-2 min on 2 shared cores
def test_interval_matches_nuts(space, truth):
    settings, times = _ok_trials(space, truth, 30, seed=4)
    m = TimeModel(space, noise_cv=0.02, interactions=[]).fit(settings, times)
    fast = {e.feature: e for e in m.effects()}
    m.run_nuts(num_samples=150, warmup_steps=150)
    for e in m.effects(nuts=True):
        f = fast[e.feature]
        assert abs(e.mean - f.mean) < 0.25 * (f.hi - f.lo) + 0.005, (e, f)


def test_noise_prior_and_offsets(space, truth):
    settings, times = _ok_trials(space, truth, 40, seed=3)
    # an analytical offset that explains the micro-batch effect exactly: its coefficient goes to ~0
    off = np.array([{1: 0.0, 2: -0.15, 4: -0.25, 8: -0.3}[s["micro_batch_size"]] for s in settings])
    m = TimeModel(space, noise_cv=0.02).fit(settings, times, offsets=off)
    eff = {e.feature: e.mean for e in m.effects()}
    assert abs(eff["micro_batch_size=8"]) < 0.05
    with pytest.raises(ValueError, match="offsets"):
        m.predict(settings)
    mean_off, _ = m.predict(settings, offsets=off)
    plain = TimeModel(space, noise_cv=0.02).fit(settings, times)
    np.testing.assert_allclose(mean_off, plain.predict(settings)[0], atol=0.03)
    with pytest.raises(ValueError, match="noise_cv"):
        TimeModel(space, noise_cv=-1)
    nan_row = TimeModel(space).fit(settings[:3], [1.0, float("nan"), 2.0])
    assert nan_row.n_obs == 2  # NaN: the trial produced no step time (OOM, crash)
    with pytest.raises(ValueError, match=r"step_times_s\[0\]"):
        TimeModel(space).fit([{}], [0.0])
    with pytest.raises(ValueError, match="one per setting"):
        TimeModel(space).fit([{}, {}], [1.0])


def test_sample_draws_are_coherent(space, truth):
    settings, times = _ok_trials(space, truth, 40, seed=5)
    m = TimeModel(space, noise_cv=0.02).fit(settings, times)
    cands = list(space.enumerate())
    draws = m.sample(cands, 400)
    assert draws.shape == (400, len(cands))
    mean, sd = m.predict(cands, noise=False)
    np.testing.assert_allclose(draws.mean(0), mean, atol=0.02)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.25, atol=0.005)


def test_a_pruned_trial_is_a_lower_bound_not_a_time(space, truth):
    """A pruned trial says only "its step time is above L": told as a censored row (lower_bounds_s), it raises the
    prediction of settings like it towards L where the trials alone put them below; a bound below what the trials say
    moves nothing; it counts as censored, not as an observation; a bad bound is refused naming the field."""
    settings, times = _ok_trials(space, truth, 12, seed=3)
    target = [s for s in space.enumerate() if s not in settings][0]
    free = TimeModel(space, noise_cv=0.02).fit(settings, times)
    (m0,), _ = free.predict([target], noise=False)
    nan = [math.nan] * len(settings)
    high = float(np.exp(m0 + 0.5))  # 65% above what the trials say
    told = TimeModel(space, noise_cv=0.02).fit([*settings, target], [*times, math.nan],
                                               lower_bounds_s=[*nan, high])
    (m1,), _ = told.predict([target], noise=False)
    assert told.n_obs == 12 and told.n_censored == 1
    assert m1 > m0 + 0.3  # most of the way to the bound (the setting shares its effects with the trials')
    low = float(np.exp(m0 - 0.5))
    loose = TimeModel(space, noise_cv=0.02).fit([*settings, target], [*times, math.nan], lower_bounds_s=[*nan, low])
    (m2,), _ = loose.predict([target], noise=False)
    assert abs(m2 - m0) < 0.05
    as_time = TimeModel(space, noise_cv=0.02).fit([*settings, target], [*times, high])
    assert as_time.n_obs == 13 and as_time.n_censored == 0
    with pytest.raises(ValueError, match=r"^lower_bounds_s\[12\] = -1\.0: a lower bound must be a positive number"):
        TimeModel(space, noise_cv=0.02).fit([*settings, target], [*times, math.nan], lower_bounds_s=[*nan, -1.0])
