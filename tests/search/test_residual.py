"""Residual GP: learns what an additive model misses near the settings tried, and stays out of the way far
from them."""

import math

import numpy as np
import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import JointTime, Outcome, ResidualTime, Tuner, TunerConfig
from infrarsi.search.residual import Residual


def test_a_surprise_spreads_to_neighbours_and_fades_with_distance():
    codes = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [0, 1, 2, 0]])
    r = np.array([-0.10, 0.0, 0.0, 0.0])  # the first setting ran 10% faster than the additive model said
    gp = Residual.fit(codes, r, noise_sd=0.01)
    mean, var = gp.predict(np.array([[0, 0, 0, 0], [0, 0, 0, 3], [3, 3, 3, 3]]))
    assert mean[0] < mean[1] < 0  # the setting itself, then a one-knob neighbour, inherit the surprise
    assert abs(mean[2]) < 0.02 and var[2] > var[0]  # far away: the prior misfit, not the surprise
    assert Residual.fit(codes[:2], r[:2], 0.01) is None  # too few points to say anything


def test_no_misfit_means_no_correction():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, size=(20, 5))
    gp = Residual.fit(codes, 0.01 * rng.standard_normal(20), noise_sd=0.01)
    mean, var = gp.predict(rng.integers(0, 3, size=(50, 5)))
    assert gp.scale <= 0.03 and np.abs(mean).max() < 0.02


@pytest.mark.parametrize("joint", [True, False])
def test_the_tuner_corrects_its_additive_model_near_a_surprise(joint):
    """Time is additive except one pair of values that is 40% faster together (neither alone is). After
    seeing the pair once, the tuner predicts that setting where it ran and moves its neighbours' predictions
    toward it; the additive model alone cannot. Both ways: one joint GP (the default) and a GP on the
    additive model's residuals."""
    space = KnobSpace([Knob(name=n, kind="int", domain=[1, 2, 3, 4]) for n in ("a", "b", "c", "d")])

    def f(s):
        t = 1.0 + 0.05 * (s["a"] + s["b"] + s["c"] + s["d"])
        return t * (0.6 if s["a"] == 4 and s["b"] == 4 else 1.0)

    t = Tuner(space, seed=0, noise_cv=0.01, time=JointTime() if joint else ResidualTime())
    pocket = space.complete({"a": 4, "b": 4, "c": 2, "d": 2})
    tried = [*(s for s in space.sample(1, 40) if not (s["a"] == 4 and s["b"] == 4))][:24] + [pocket]
    for s in tried:
        t.tell(s, Outcome("ok", step_time_s=f(s)))
    t.fit_models()
    near = [s for s in space.neighbors(pocket) if s["a"] == 4 and s["b"] == 4]
    both, _ = t.predict_time(near)
    additive, _ = t.time_model.predict(near, noise=False)
    truth = np.log([f(s) for s in near])
    gp = t.time.surrogate if joint else t.time.residual
    assert gp is not None and gp.scale >= 0.03  # it measured the misfit
    assert (both < additive).all() and (both > truth).all()  # toward the truth, not past it
    at, _ = t.predict_time([pocket])
    add_at, _ = t.time_model.predict([pocket], noise=False)
    assert abs(at[0] - math.log(f(pocket))) < 0.03 < abs(add_at[0] - math.log(f(pocket)))
    assert t.top(1) == [pocket]
