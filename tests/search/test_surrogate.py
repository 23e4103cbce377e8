"""Surrogate: one GP of additive effects plus a per-knob kernel learns an interaction the additive model cannot
express, and tells the knobs that matter from those that do not."""

from __future__ import annotations

import random

import numpy as np

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.models import TimeModel
from infrarsi.search.surrogate import Surrogate

SPACE = KnobSpace([
    Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),
    Knob(name="pp", kind="int", domain=[1, 2, 4, 8]),
    Knob(name="flag_a", kind="bool"),
    Knob(name="flag_b", kind="bool"),
    Knob(name="flag_c", kind="bool"),
])


def _truth(s) -> float:
    # log step time: tp and pp interact (a layout table no additive model holds); the flags do nothing
    i, j = [1, 2, 4, 8].index(s["tp"]), [1, 2, 4, 8].index(s["pp"])
    return 0.3 * abs(i - j) - 0.05 * (i + j)


def _codes(settings):
    return np.array([[k.domain.index(s[k.name]) for k in SPACE.knobs] for s in settings])


def test_joint_gp_predicts_an_interaction_better_than_the_additive_model_and_ranks_knobs():
    pool = SPACE.candidates(200, random.Random(0))
    rng = random.Random(1)
    train = rng.sample(pool, 40)
    test = [s for s in pool if s not in train]
    y = np.array([_truth(s) for s in train]) + np.random.default_rng(0).normal(0, 0.01, len(train))
    tm = TimeModel(SPACE, interactions=[], noise_cv=0.01).fit(train, np.exp(y))
    x = lambda ss: np.hstack([np.ones((len(ss), 1)), tm.design.matrix(ss)])  # noqa: E731
    m0 = np.concatenate([[0.0], tm.design.prior_mean])
    s0 = np.concatenate([[10.0], tm.design.prior_sd])
    sur = Surrogate.fit(x(train), _codes(train), y, m0, s0, ordered=np.array([True, True, False, False, False]))
    truth = np.array([_truth(s) for s in test])
    add_mean, _ = tm.predict(test, noise=False)
    gp_mean, gp_var = sur.predict(x(test), _codes(test))
    rmse_add = float(np.sqrt(np.mean((add_mean - truth) ** 2)))
    rmse_gp = float(np.sqrt(np.mean((gp_mean - truth) ** 2)))
    assert rmse_gp < 0.6 * rmse_add, (rmse_gp, rmse_add)
    # tp and pp carry the interaction: their rates are above every flag's
    assert min(sur.rates[:2]) > max(sur.rates[2:]), sur.rates
    # a draw is a plausible posterior function: near the mean where the GP is sure
    draw = sur.sample(x(test), _codes(test), np.random.default_rng(3).standard_normal)
    assert np.mean(np.abs(draw - gp_mean) < 4 * np.sqrt(gp_var) + 0.05) > 0.95
