"""CensoredSurrogate: one Gaussian process for log peak memory that learns from all three kinds of trial --
a measured peak, an OOM (peak > capacity) and a run that reported no peak (peak <= capacity).

Why: the MemoryModel is additive in log bytes, but a peak is a *sum* (weights and optimizer state, which
TP/PP/EP and the distributed optimizer divide; activations, which the micro-batch multiplies and
recompute divides; a fixed part). An additive log model multiplies effects that really add, so it
prices the fast settings near capacity (little recompute, a larger micro-batch) far too high: on the
perturbed clusters after 30 cold trials it put the 20 fastest settings at +32% (median, +0.28 in log bytes) above
their true peak with a predictive sd of 0.56, and 88% of them above the P(OOM) cap, while their true headroom was
25% (``scripts/bench_search.py --memory-check --budgets 30 --set joint=false memory_gp=false``). A kernel on the
knob values lets settings like the ones that fit be believed to fit; it is a partial cure: with it 70% are still
above the cap (``--memory-check --budgets 30``), because the fastest settings sit far from every trial, where the
GP returns to the additive mean.

Model, in log bytes, for the n memory-informative trials::

    f = offset + X beta + g      X: (n, p + 1) the MemoryModel's design, intercept first
    beta ~ Normal(m0, diag(s0^2))            the MemoryModel's priors (its intercept at log capacity)
    g ~ GP(0, s^2 exp(-sum_j w_j d_j))       d_j as in surrogate.py (steps for ordered knobs)
    measured:  log_peak = f + eps, eps ~ Normal(0, noise^2)
    OOM:       factor P(f + eps > log C) = Phi((f - log C) / noise)
    ran, no peak: factor P(f + eps <= log C) = Phi((log C - f) / noise)

Hyperparameters (s, rates, noise) are fitted as in surrogate.py on the measured rows (>= 3 of them),
else defaults (``DEFAULT_SCALE`` etc.: step-time-only trials give no scale to fit). The censored
factors enter by expectation propagation (Rasmussen & Williams, Algorithms 3.5-3.6, with the probit
shifted by the capacity and signed by the side): Gaussian sites, damped parallel sweeps.

    cs = CensoredSurrogate.fit(x, codes, offsets, kind, log_peak, m0, s0, log_capacity, ordered=mask)
    mean, var = cs.predict(x_cands, codes_cands, offsets_cands)    # latent f: (m,), (m,)
    cs.p_above(x_cands, codes_cands, offsets_cands, threshold)     # P(peak > threshold), (m,)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models import jittered_cholesky, mills_ratio, ndtr
from .surrogate import Surrogate, kernel, linear

OBS, ABOVE, BELOW = 0, 1, -1  # kind per row: measured peak, OOM, ran without a peak
DEFAULT_SCALE, DEFAULT_RATE, DEFAULT_NOISE = 0.2, 0.5, 0.05  # without 3 measured peaks
EP_SWEEPS, EP_DAMPING = 20, 0.5


@dataclass(frozen=True)
class CensoredSurrogate:
    x: np.ndarray  # (n, p1)
    codes: np.ndarray  # (n, K)
    s0: np.ndarray  # (p1,)
    scale: float
    rates: np.ndarray  # (K,)
    noise: float
    ordered: np.ndarray
    chol_b: np.ndarray  # (n, n) Cholesky of B = I + S^1/2 K S^1/2
    sq: np.ndarray  # (n,) S^1/2: sqrt of the site precisions
    weights: np.ndarray  # (n,) nu - z (Rasmussen & Williams 3.6): mean* = k*^T weights
    m0: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, codes: np.ndarray, offsets: np.ndarray, kind: np.ndarray, log_peak: np.ndarray,
            m0: np.ndarray, s0: np.ndarray, log_capacity: float, *, ordered: np.ndarray | None = None,
            ) -> "CensoredSurrogate | None":
        n, kk = codes.shape
        if n == 0:
            return None
        ordered = np.zeros(kk, dtype=bool) if ordered is None else np.asarray(ordered, dtype=bool)
        kind = np.asarray(kind)
        obs = kind == OBS
        prior_mean = offsets + x @ m0
        if obs.sum() >= 3:
            hyp = Surrogate.fit(x[obs], codes[obs], log_peak[obs] - offsets[obs], m0, s0, ordered=ordered)
        else:
            hyp = None
        scale, rates, noise = ((hyp.scale, hyp.rates, hyp.noise) if hyp is not None
                               else (DEFAULT_SCALE, np.full(kk, DEFAULT_RATE), DEFAULT_NOISE))
        noise = max(noise, 0.01)
        kmat = linear(x, x, s0) + kernel(codes, codes, scale, rates, ordered)
        # sites in the centred variable h = f - prior_mean: precision tau, precision x mean nu
        tau = np.where(obs, 1.0 / noise ** 2, 0.0)
        nu = np.where(obs, (np.nan_to_num(log_peak) - prior_mean) / noise ** 2, 0.0)
        cens = np.flatnonzero(~obs)
        c = log_capacity - prior_mean  # the boundary in h
        for _ in range(EP_SWEEPS if cens.size else 0):
            mu, var = _posterior(kmat, tau, nu)
            t_cav = 1.0 / var[cens] - tau[cens]
            t_cav = np.maximum(t_cav, 1e-10)
            n_cav = mu[cens] / var[cens] - nu[cens]
            m_cav, v_cav = n_cav / t_cav, 1.0 / t_cav
            z = kind[cens].astype(float)
            denom = np.sqrt(noise ** 2 + v_cav)
            zh = z * (m_cav - c[cens]) / denom
            ratio = mills_ratio(zh)
            m_hat = m_cav + z * v_cav * ratio / denom
            v_hat = v_cav - v_cav ** 2 * ratio * (zh + ratio) / (noise ** 2 + v_cav)
            v_hat = np.maximum(v_hat, 1e-10)
            t_new = np.maximum(1.0 / v_hat - t_cav, 1e-10)
            n_new = m_hat / v_hat - n_cav
            tau[cens] = EP_DAMPING * t_new + (1 - EP_DAMPING) * tau[cens]
            nu[cens] = EP_DAMPING * n_new + (1 - EP_DAMPING) * nu[cens]
        sq = np.sqrt(tau)
        b = np.eye(n) + sq[:, None] * kmat * sq[None, :]
        chol_b, _ = jittered_cholesky(b)
        zz = sq * np.linalg.solve(chol_b.T, np.linalg.solve(chol_b, sq * (kmat @ nu)))
        return cls(x, codes, s0, float(scale), rates, float(noise), ordered, chol_b, sq, nu - zz, m0)

    def predict(self, x: np.ndarray, codes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of the latent log peak f at each candidate: (m,), (m,)."""
        ks = linear(x, self.x, self.s0) + kernel(codes, self.codes, self.scale, self.rates, self.ordered)
        mean = offsets + x @ self.m0 + ks @ self.weights
        v = np.linalg.solve(self.chol_b, (self.sq[:, None] * ks.T))
        prior = (x * x) @ (self.s0 ** 2) + self.scale ** 2
        return mean, np.maximum(prior - (v * v).sum(axis=0), 1e-12)

    def p_above(self, x: np.ndarray, codes: np.ndarray, offsets: np.ndarray, threshold: float) -> np.ndarray:
        """P(log peak > threshold) per candidate, the noise included: (m,)."""
        mean, var = self.predict(x, codes, offsets)
        return ndtr((mean - threshold) / np.sqrt(var + self.noise ** 2))


def _posterior(kmat: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Marginal mean and variance of h under the prior K and Gaussian sites (tau, nu)."""
    n = len(tau)
    sq = np.sqrt(tau)
    b = np.eye(n) + sq[:, None] * kmat * sq[None, :]
    chol, _ = jittered_cholesky(b)
    v = np.linalg.solve(chol, sq[:, None] * kmat)  # (n, n)
    sigma = kmat - v.T @ v
    return sigma @ nu, np.maximum(np.diag(sigma), 1e-12)

