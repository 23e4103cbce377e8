"""Surrogate: one Gaussian process for log step time -- the TimeModel's additive effects plus a kernel on the
knob values that learns how much each knob's value changes the rest.

Why one model and not a GP on the additive model's residuals: with 15 knobs the additive design has ~40
columns, so after 30 trials it fits the trials almost exactly and their residuals say nothing (a residual
GP fitted on them collapses to a scale of ~0.001). Here the additive part and the kernel part explain the
trials *together*, and the marginal likelihood decides how much of what is seen is "this knob value is
this much faster everywhere" and how much is "settings like this one are faster".

Model, for the log step times y (n,) of the trials that ran::

    y = X beta + g + eps       X: (n, p + 1) design with an intercept column (models/_design.py)
    beta ~ Normal(m0, diag(s0^2))                    the TimeModel's priors (a Prior's time_mean/time_sd)
    g ~ GP(0, s^2 exp(-sum_j w_j d_j(a, b)))         d_j: 0/1 for an unordered knob, steps for an ordered one
    eps ~ Normal(0, noise^2)                         the doctor's CV when known, else a hyperparameter

so y ~ Normal(X m0, X S0 X^T + K + noise^2 I). The hyperparameters (s, a rate w_j per knob, noise) are the
MAP of the marginal likelihood with a Normal prior on each log rate: a grid for (s, one common rate,
noise), then Adam steps on every rate (automatic relevance determination: TP and PP, whose values change
everything else, get high rates; an overlap flag a low one).

    sur = Surrogate.fit(x, codes, y, m0, s0, noise_sd=None, ordered=mask)   # x: (n, p+1), codes: (n, K)
    mean, var = sur.predict(x_cands, codes_cands)       # (m,), (m,) posterior of the mean log step time
    draw = sur.sample(x_cands, codes_cands, normal)     # (m,) one draw: a coherent beta + the kernel part;
                                                        # normal(k): k standard normal draws (a seeded stream)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..models import jittered_cholesky

SCALES = (0.02, 0.05, 0.1, 0.2, 0.4)  # s: what the additive effects miss, in log time (2% .. 50%)
LENGTHS = (0.5, 1.0, 2.0, 4.0)  # 1 / common rate, in knobs
NOISES = (0.005, 0.01, 0.02, 0.05, 0.1)  # noise sd (log time) when no run-to-run CV is known
ARD_STEPS = 60  # Adam steps on (log s, log w)
ARD_LR = 0.1
ARD_PRIOR_SD = 1.0  # sd of each log rate around the grid's common log rate


def deltas(a: np.ndarray, b: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """Per-knob distances d_j between the rows of a and b (value indices): (len(a), len(b), K) floats."""
    diff = np.abs(a[:, None, :] - b[None, :, :]).astype(float)
    return np.where(ordered[None, None, :], diff, (diff > 0).astype(float))


def kernel(a: np.ndarray, b: np.ndarray, scale: float, rates: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """The kernel part of the prior covariance, s^2 exp(-sum_j w_j d_j(a, b)): (len(a), len(b))."""
    return scale ** 2 * np.exp(-(deltas(a, b, ordered) @ rates))


def linear(xa: np.ndarray, xb: np.ndarray, s0: np.ndarray) -> np.ndarray:
    """The additive part of the prior covariance, X_a diag(s0^2) X_b^T: (len(xa), len(xb))."""
    return (xa * s0 ** 2) @ xb.T


@dataclass(frozen=True)
class Surrogate:
    x: np.ndarray  # (n, p1) design of the trials, intercept first
    codes: np.ndarray  # (n, K) value index per knob
    m0: np.ndarray  # (p1,) prior mean of beta
    s0: np.ndarray  # (p1,) prior sd of beta
    y: np.ndarray  # (n,) log step times
    chol: np.ndarray  # (n, n) Cholesky of C = X S0 X^T + K + noise^2 I
    alpha: np.ndarray  # (n,) C^-1 (y - X m0)
    scale: float
    rates: np.ndarray  # (K,)
    noise: float  # sd
    ordered: np.ndarray  # (K,) bool

    @classmethod
    def fit(cls, x: np.ndarray, codes: np.ndarray, y: np.ndarray, m0: np.ndarray, s0: np.ndarray, *,
            noise_sd: float | None = None, ordered: np.ndarray | None = None, ard: bool = True) -> "Surrogate | None":
        """See the module docstring; None with fewer than 3 trials or when nothing factors."""
        n, kk = codes.shape
        if n < 3:
            return None
        ordered = np.zeros(kk, dtype=bool) if ordered is None else np.asarray(ordered, dtype=bool)
        d = deltas(codes, codes, ordered)
        lin = linear(x, x, s0)
        r = y - x @ m0
        noises = NOISES if noise_sd is None else (max(noise_sd, 1e-3),)
        best: tuple[float, float, np.ndarray, float] | None = None
        for s, length, ns in itertools.product(SCALES, LENGTHS, noises):
            w = np.full(kk, 1.0 / length)
            out = _lml(lin, d, r, s, w, ns)
            if out is not None and (best is None or out[0] > best[0]):
                best = (out[0], s, w, ns)
        if best is None:
            return None
        _, s, w, ns = best
        if ard and kk:
            s, w, ns = _ard(lin, d, r, s, w, ns, learn_noise=noise_sd is None)
        out = _lml(lin, d, r, s, w, ns)
        if out is None:
            return None
        _, alpha, chol, _ = out
        return cls(x, codes, m0, s0, y, chol, alpha, float(s), w, float(ns), ordered)

    def _cross(self, x: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m, n) covariances of candidates with trials: total, and the kernel part alone."""
        kg = kernel(codes, self.codes, self.scale, self.rates, self.ordered)
        return linear(x, self.x, self.s0) + kg, kg

    def predict(self, x: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of the mean log step time at each candidate: (m,), (m,)."""
        ks, _ = self._cross(x, codes)
        mean = x @ self.m0 + ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)  # (n, m)
        prior = (x * x) @ (self.s0 ** 2) + self.scale ** 2
        return mean, np.maximum(prior - (v * v).sum(axis=0), 1e-12)

    def sample(self, x: np.ndarray, codes: np.ndarray, normal: Callable[[int], np.ndarray]) -> np.ndarray:
        """One posterior draw at every candidate, (m,): a coherent draw of beta (all candidates share it), plus
        the kernel part given it (its mean coherent, its own uncertainty drawn per candidate)."""
        n = len(self.y)
        kg_tt = kernel(self.codes, self.codes, self.scale, self.rates, self.ordered)
        cg_chol, _ = jittered_cholesky(kg_tt + self.noise ** 2 * np.eye(n))
        solve = lambda b: np.linalg.solve(cg_chol.T, np.linalg.solve(cg_chol, b))  # noqa: E731  Cg^-1 b
        prec = np.diag(1.0 / self.s0 ** 2) + self.x.T @ solve(self.x)
        pc, _ = jittered_cholesky(prec)
        rhs = self.m0 / self.s0 ** 2 + self.x.T @ solve(self.y)
        mean_b = np.linalg.solve(pc.T, np.linalg.solve(pc, rhs))
        beta = mean_b + np.linalg.solve(pc.T, normal(len(mean_b)))  # cov = prec^-1
        kg = kernel(codes, self.codes, self.scale, self.rates, self.ordered)
        gm = kg @ solve(self.y - self.x @ beta)
        v = np.linalg.solve(cg_chol, kg.T)
        gv = np.maximum(self.scale ** 2 - (v * v).sum(axis=0), 0.0)
        return x @ beta + gm + np.sqrt(gv) * normal(len(gm))


def _lml(lin: np.ndarray, d: np.ndarray, r: np.ndarray, s: float, w: np.ndarray, noise: float):
    """(log marginal likelihood, alpha, chol, K_kernel) of r = y - X m0, or None when C does not factor."""
    kf = s * s * np.exp(-(d @ w))
    c = lin + kf + noise * noise * np.eye(len(r))
    try:
        chol, _ = jittered_cholesky(c)
    except np.linalg.LinAlgError:
        return None
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
    return -0.5 * r @ alpha - np.log(np.diag(chol)).sum(), alpha, chol, kf


def _ard(lin, d, r, s, w, noise, *, learn_noise: bool) -> tuple[float, np.ndarray, float]:
    """MAP (log s, log w, log noise) by Adam from the grid's point; keeps the best point met."""
    theta = np.concatenate([[math.log(s), math.log(noise)], np.log(w)])
    mu = theta[2:].copy()
    m1, m2 = np.zeros_like(theta), np.zeros_like(theta)
    best_val, best = -math.inf, theta.copy()
    n = len(r)
    for t in range(1, ARD_STEPS + 1):
        st, nt, wt = math.exp(theta[0]), math.exp(theta[1]), np.exp(theta[2:])
        out = _lml(lin, d, r, st, wt, nt)
        if out is None:
            break
        lml, alpha, chol, kf = out
        val = lml - 0.5 * (((theta[2:] - mu) / ARD_PRIOR_SD) ** 2).sum()
        if val > best_val:
            best_val, best = val, theta.copy()
        kinv = np.linalg.solve(chol.T, np.linalg.solve(chol, np.eye(n)))
        a = np.outer(alpha, alpha) - kinv  # d lml / dC = a / 2
        g = np.empty_like(theta)
        g[0] = (a * kf).sum()  # dC/dlog s = 2 kf
        g[1] = (np.trace(a) * nt * nt) if learn_noise else 0.0  # dC/dlog noise = 2 noise^2 I
        g[2:] = -0.5 * wt * np.einsum("ij,ijk->k", a * kf, d) - (theta[2:] - mu) / ARD_PRIOR_SD ** 2
        g[1] = max(g[1], -1e6) if learn_noise else 0.0
        m1 = 0.9 * m1 + 0.1 * g
        m2 = 0.999 * m2 + 0.001 * g * g
        theta = theta + ARD_LR * (m1 / (1 - 0.9 ** t)) / (np.sqrt(m2 / (1 - 0.999 ** t)) + 1e-8)
        theta[1] = max(theta[1], math.log(1e-3))
    return math.exp(best[0]), np.exp(best[2:]), math.exp(best[1])
