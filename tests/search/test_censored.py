"""CensoredSurrogate: the censored memory GP's expectation propagation is exact where it must be, and it learns
the boundary from both sides (OOMs above, runs that fit below) and from measured peaks."""

from __future__ import annotations

import math

import numpy as np

from infrarsi.models import ndtr
from infrarsi.search.censored import ABOVE, BELOW, DEFAULT_NOISE, DEFAULT_SCALE, OBS, CensoredSurrogate


def _one_point(kind: int, c: float):
    x = np.ones((1, 1))
    codes = np.zeros((1, 1), dtype=np.int64)
    return CensoredSurrogate.fit(x, codes, np.zeros(1), np.array([kind]), np.array([np.nan]), np.zeros(1),
                                 np.ones(1), c)


def test_one_censored_trial_gives_the_exact_truncated_normal_mean():
    # prior f ~ N(0, 1 + s^2); an OOM at capacity c says f + eps > c: the posterior mean of f is
    # v0 phi(z) / (Phi(z) sqrt(v0 + noise^2)), z = (0 - c) / sqrt(v0 + noise^2), and EP matches moments exactly
    v0, n2 = 1.0 + DEFAULT_SCALE ** 2, DEFAULT_NOISE ** 2
    for kind, c in ((ABOVE, 0.5), (ABOVE, -1.0), (BELOW, 0.3), (BELOW, -0.8)):
        cs = _one_point(kind, c)
        mean, var = cs.predict(np.ones((1, 1)), np.zeros((1, 1), dtype=np.int64), np.zeros(1))
        z = kind * (0.0 - c) / math.sqrt(v0 + n2)
        ratio = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) / float(ndtr(np.array([z]))[0])
        want_mean = kind * v0 * ratio / math.sqrt(v0 + n2)
        want_var = v0 - v0 ** 2 * ratio * (z + ratio) / (v0 + n2)
        assert abs(mean[0] - want_mean) < 1e-6, (kind, c, mean[0], want_mean)
        assert abs(var[0] - want_var) < 1e-6, (kind, c, var[0], want_var)
        # the side is right: an OOM moves the belief up, a run that fit moves it down
        assert (mean[0] > 0) == (kind == ABOVE)


def test_boundary_learned_from_ooms_and_fits_without_any_peak():
    # one knob, micro-batch index 0..7; peak grows with it; capacity between index 4 and 5 (no peaks reported)
    codes = np.arange(8)[:, None]
    x = np.hstack([np.ones((8, 1)), np.zeros((8, 0))])
    kind = np.where(np.arange(8) >= 5, ABOVE, BELOW)
    cs = CensoredSurrogate.fit(x[[0, 2, 3, 6, 7]], codes[[0, 2, 3, 6, 7]], np.zeros(5), kind[[0, 2, 3, 6, 7]],
                               np.full(5, np.nan), np.zeros(1), np.ones(1), 0.0, ordered=np.array([True]))
    p = cs.p_above(x, codes, np.zeros(8), 0.0)
    assert np.all(p[[0, 2, 3]] < 0.2) and np.all(p[[6, 7]] > 0.8), p  # each side where it was seen
    assert p[1] < 0.5 < p[5], p  # untried: on the side of its neighbours


def test_measured_peaks_pin_the_prediction_and_an_oom_sits_above_capacity():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(12, 3))
    truth = 0.3 * codes[:, 0] - 0.2 * codes[:, 1]  # log peak minus log capacity
    kind = np.where(truth > 0.4, ABOVE, OBS)
    peak = np.where(kind == OBS, truth, np.nan)
    x = np.ones((12, 1))
    cs = CensoredSurrogate.fit(x, codes, np.zeros(12), kind, peak, np.zeros(1), np.ones(1), 0.4,
                               ordered=np.ones(3, dtype=bool))
    mean, _ = cs.predict(x, codes, np.zeros(12))
    obs = kind == OBS
    assert np.max(np.abs(mean[obs] - truth[obs])) < 0.05
    assert np.all(mean[~obs] > 0.3), mean[~obs]
