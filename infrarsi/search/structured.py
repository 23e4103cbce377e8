"""StructuredMemory: peak memory as a sum of power-law terms whose coefficients the trials teach, with OOMs and
runs that fit as censored observations.

Why: a training step's peak is a *sum* -- weights and optimizer state (divided by the model-parallel sizes,
by data parallel when the optimizer is sharded), activations (multiplied by the micro-batch, divided by
tensor/context parallel and by recompute) and a fixed part. The additive log model multiplies parts that
really add, so after 30 cold trials it priced the fastest settings of the perturbed clusters +32% above
their true peak; the censored GP (censored.py) corrects it only near the trials. Here the *form* is the
sum, and nothing about any framework's constants is assumed: which knob scales which term, and by what
power, is learned.

Model, for a setting with features phi (n, q): ln(value) of each knob whose values are positive numbers
(a power law: tp=2 -> 4 is the same step as 4 -> 8), 0/1 of a bool knob, one-hot of a categorical knob's
non-first values, each centred on its knob's domain (:func:`features`)::

    peak = sum_t exp(a_t + phi . b_t) + exp(c)             t = 1..TERMS power-law terms, and a constant
    log peak_i = ln(peak(phi_i)) + eps_i,  eps ~ Normal(0, sigma^2)
    measured:      Normal(log peak_i; mu_i, sigma)
    OOM:           P(log peak > log C) = Phi((mu_i - log C) / sigma)
    ran, no peak:  P(log peak <= log C) = Phi((log C - mu_i) / sigma)
    priors:  a_t, c ~ Normal(log C - 1, 3) (a term at the middle of the space)    b_t ~ Normal(structure_prior, 0.5)
             sigma = 0.05 + e^t, t ~ Normal(log 0.1, 0.5)  (a floor: the model's misfit, not the allocator's noise)

Fit: the MAP by BFGS from several starts (the previous MAP, and starts that give each term a different
share: the terms are exchangeable, so the posterior has TERMS! equal modes and starts pick one), then a
Laplace approximation (the Hessian by central differences of the exact gradient) gives the coefficients'
covariance; the predictive variance of mu at a candidate is J H^-1 J^T with J = d mu / d theta.

    sm = StructuredMemory.fit(phi, kind, log_peak, log_capacity, start=previous_map)   # None if it fails
    mean, var = sm.predict(phi_cands)                        # latent mu: (m,), (m,)
    sm.p_above(phi_cands, threshold)                         # P(log peak > threshold), noise included: (m,)
    sm.theta                                                 # the MAP, a start for the next fit
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from ..knobs import KnobSpace, Setting
from ..models import log_ndtr, mills_ratio, ndtr
from .censored import ABOVE, BELOW, OBS

TERMS = 2  # power-law terms besides the constant (weights/state, activations): the default of fit(terms=)
INTERCEPT_SD, SLOPE_SD = 3.0, 0.5
SIGMA_LOC, SIGMA_SCALE, SIGMA_MIN = math.log(0.1), 0.5, 0.05
STARTS = 2
# What the knobs mean, as a prior on the powers (sd SLOPE_SD around it), not a formula: the first term holds
# what the model-parallel sizes split (weights, gradients, optimizer state: one rank holds 1/tp x 1/pp of
# them), the second what a micro-batch's tokens make (activations: linear in the micro-batch, one rank holds
# 1/cp of the sequence). Every other power starts at 0. Only the powers of knobs in the space count, by what they
# mean (search/meaning.py): a knob with no meaning starts at 0 everywhere, and its signs and powers are learned.
STRUCTURE: tuple[dict[str, float], ...] = (
    {"tensor_parallel": -1.0, "pipeline_parallel": -1.0},
    {"micro_batch_size": 1.0, "context_parallel": -1.0},
)
# What the memory savers mean, on the same terms (the power of a bool knob or of a categorical value, "knob=value",
# is a log factor on its term): the distributed optimizer shards the optimizer state (term 1); recompute keeps fewer
# activations, full recompute far fewer, and sequence parallel splits more of them across the tensor-parallel group
# (term 2). Without them, a cold search on a cluster where 9 in 10 valid settings OOM learned from its OOMs only that
# everything is big (bench_search.py --set memory_savers=false: StructuredPeak(structure=STRUCTURE)).
SAVERS: tuple[dict[str, float], ...] = (
    {"distributed_optimizer": -0.5},
    {"recompute_granularity=full": -1.0, "recompute_granularity=selective": -0.5, "sequence_parallel": -0.5},
)
STRUCTURE_WITH_SAVERS = tuple({**a, **b} for a, b in zip(STRUCTURE, SAVERS))


def _columns(space: KnobSpace) -> list[tuple[str, str, Any]]:
    """One entry per feature column, in order: (knob, how, level); how is "bool" (0/1), "log" (ln value, a knob of
    positive numbers) or "onehot" (level: the categorical value the column marks; the first value has none)."""
    cols: list[tuple[str, str, Any]] = []
    for k in space.knobs:
        if k.kind == "bool":
            cols.append((k.name, "bool", None))
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in k.domain):
            cols.append((k.name, "log", None))
        else:
            cols.extend((k.name, "onehot", level) for level in k.domain[1:])
    return cols


def structure_prior(space: KnobSpace, structure: tuple[dict[str, float], ...] = STRUCTURE, *,
                    terms: int = TERMS, meanings: Mapping[str, str] | None = None) -> np.ndarray:
    """Prior means of the powers b, (terms, q) in ``features``' column order: ``structure``'s powers for the columns
    it names (a knob of positive numbers or a bool knob by its meaning, a categorical value as "meaning=value"), 0
    elsewhere (``structure=()``: all 0, exchangeable terms). ``meanings``: {knob name: catalog name}
    (search/meaning.py); default: each knob means its own name."""
    cols = _columns(space)
    out = np.zeros((terms, len(cols)))
    mean = (lambda n: n) if meanings is None else (lambda n: meanings.get(n, ""))  # noqa: E731
    for t, powers in enumerate(structure[:terms]):
        out[t] = [powers.get(mean(name) if how != "onehot" else f"{mean(name)}={level}", 0.0)
                  for name, how, level in cols]
    return out


def features(space: KnobSpace, settings: list[Setting]) -> np.ndarray:
    """phi per setting, (n, q): ln(value) for a knob of positive numbers, 0/1 for a bool, one-hot otherwise, each
    centred on its knob's domain (minus the column's mean over the domain's values). Centred, a power of 0 is "no
    effect" around the middle of the space rather than "no effect, measured from every knob at its first value": with
    uncentred columns and the same prior, a model that had seen only OOMs predicted its smallest peak at the corner
    where every numeric knob is 1 (ln 1 = 0, where the powers do not reach), whatever the knobs are. A knob with a
    meaning is measured from its first value again (:func:`anchors`, :class:`.memory.StructuredPeak`)."""
    cols = _columns(space)
    out = np.zeros((len(settings), len(cols)))
    for j, (name, how, level) in enumerate(cols):
        vals = [s[name] for s in settings]
        if how == "bool":
            out[:, j] = [1.0 if v else 0.0 for v in vals]
        elif how == "log":
            out[:, j] = np.log(np.array(vals, dtype=float))
        else:
            out[:, j] = [1.0 if v == level else 0.0 for v in vals]
    return out - centres(space)


def centres(space: KnobSpace) -> np.ndarray:
    """(q,): each column's mean over its knob's domain (what :func:`features` subtracts)."""
    out = []
    for name, how, _ in _columns(space):
        dom = space[name].domain
        out.append(0.5 if how == "bool" else float(np.mean(np.log(np.array(dom, dtype=float)))) if how == "log"
                   else 1.0 / len(dom))
    return np.array(out)


def anchors(space: KnobSpace, knobs: Collection[str]) -> np.ndarray:
    """(q,): :func:`centres` for the columns of ``knobs``, 0 elsewhere. Added to :func:`features`, those columns are
    measured from their knob's first value (ln 1 = 0 for a size, off for a flag) again."""
    return np.where([name in knobs for name, _, _ in _columns(space)], centres(space), 0.0)


@dataclass(frozen=True)
class StructuredMemory:
    theta: np.ndarray  # [a (T), b (T * q), c, t]: sigma = SIGMA_MIN + e^t
    cov: np.ndarray  # Laplace covariance of theta[:-1] (sigma's uncertainty is left out)
    q: int
    terms: int  # T, the power-law terms besides the constant

    @property
    def sigma(self) -> float:
        return _sigma(self.theta[-1])

    @classmethod
    def fit(cls, phi: np.ndarray, kind: np.ndarray, log_peak: np.ndarray, log_capacity: float, *,
            start: np.ndarray | None = None, seed: int = 0, prior: np.ndarray | None = None,
            terms: int = TERMS) -> "StructuredMemory | None":
        n, q = phi.shape
        kind = np.asarray(kind)
        if n == 0:
            return None
        y = np.where(kind == OBS, np.nan_to_num(log_peak), 0.0)
        obj = _Objective(phi, kind, y, log_capacity, prior, terms)
        rng = np.random.default_rng(seed)
        starts = [start] if start is not None and len(start) == obj.size else []
        for i in range(STARTS):
            th = np.zeros(obj.size)
            share = rng.dirichlet(np.ones(terms + 1))
            th[:terms] = log_capacity - 0.5 + np.log(share[:terms])
            th[terms:terms + terms * q] = obj.loc[terms:terms + terms * q] + rng.normal(0.0, 0.3, terms * q)
            th[-2] = log_capacity - 0.5 + math.log(share[-1])
            th[-1] = SIGMA_LOC
            starts.append(th)
        best = None
        for th in starts:
            try:
                res = minimize(obj.value_grad, th, jac=True, method="BFGS", options={"maxiter": 1000})
            except (FloatingPointError, ValueError):
                continue
            if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (best is None or res.fun < best.fun):
                best = res
        if best is None:
            return None
        theta = best.x
        cov = _laplace(obj, theta)
        return cls(theta, cov, q, terms)

    def _mu_jac(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """mu (m,) and d mu / d theta[:-1] (m, size - 1)."""
        eta = _eta(self.theta, phi, self.terms)  # (m, T + 1)
        mu = _logsumexp(eta)
        r = np.exp(eta - mu[:, None])  # each term's share of the peak
        m, tt = len(phi), self.terms
        jac = np.concatenate([r[:, :tt], (r[:, :tt, None] * phi[:, None, :]).reshape(m, -1), r[:, tt:]], axis=1)
        return mu, jac

    def predict(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of the latent log peak mu at each candidate: (m,), (m,)."""
        mu, jac = self._mu_jac(phi)
        return mu, np.maximum(np.einsum("ij,jk,ik->i", jac, self.cov, jac), 1e-12)

    def p_above(self, phi: np.ndarray, threshold: float) -> np.ndarray:
        """P(log peak > threshold) per candidate, the noise included: (m,)."""
        mean, var = self.predict(phi)
        return ndtr((mean - threshold) / np.sqrt(var + self.sigma ** 2))


def _sigma(t: float) -> float:
    """The scatter sd from its coordinate: SIGMA_MIN + e^t (smooth, so the optimizer meets no kink at the floor)."""
    return SIGMA_MIN + math.exp(t)


def _eta(theta: np.ndarray, phi: np.ndarray, terms: int) -> np.ndarray:
    """Log of each term per row, (n, T + 1): the power-law terms, then the constant."""
    q = phi.shape[1]
    a = theta[:terms]
    b = theta[terms:terms + terms * q].reshape(terms, q)
    c = theta[-2]
    return np.concatenate([a[None, :] + phi @ b.T, np.full((len(phi), 1), c)], axis=1)


def _logsumexp(eta: np.ndarray) -> np.ndarray:
    top = eta.max(axis=1)
    return top + np.log(np.exp(eta - top[:, None]).sum(axis=1))


class _Objective:
    """Negative log posterior of theta and its gradient."""

    def __init__(self, phi: np.ndarray, kind: np.ndarray, y: np.ndarray, log_capacity: float,
                 prior: np.ndarray | None, terms: int = TERMS) -> None:
        self.phi, self.kind, self.y, self.lc, self.terms = phi, kind, y, log_capacity, terms
        self.q = phi.shape[1]
        self.size = terms + terms * self.q + 2
        self.obs = kind == OBS
        self.sign = np.where(kind == ABOVE, 1.0, np.where(kind == BELOW, -1.0, 0.0))
        self.loc = np.full(self.size, 0.0)
        self.loc[:terms] = self.loc[-2] = log_capacity - 1.0
        if prior is not None:
            self.loc[terms:terms + terms * self.q] = np.asarray(prior, dtype=float).ravel()
        self.sd = np.full(self.size, SLOPE_SD)
        self.sd[:terms] = self.sd[-2] = INTERCEPT_SD

    def value_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        s = _sigma(theta[-1])
        log_s = math.log(s)
        tt = self.terms
        eta = _eta(theta, self.phi, tt)
        mu = _logsumexp(eta)
        r = np.exp(eta - mu[:, None])
        # d loglik / d mu and d loglik / d log sigma, per row
        z = (self.y - mu) / s
        u = self.sign * (mu - self.lc) / s
        lam = mills_ratio(u)
        ll = np.where(self.obs, -0.5 * z * z - log_s, np.where(self.sign != 0, log_ndtr(u), 0.0))
        d_mu = np.where(self.obs, z / s, self.sign * lam / s)
        d_ls = np.where(self.obs, z * z - 1.0, np.where(self.sign != 0, -lam * u, 0.0))
        g = np.empty(self.size)
        g[:tt] = r[:, :tt].T @ d_mu
        g[tt:tt + tt * self.q] = ((r[:, :tt] * d_mu[:, None]).T @ self.phi).ravel()
        g[-2] = r[:, tt] @ d_mu
        g[-1] = d_ls.sum() * (s - SIGMA_MIN) / s  # d log s / d t
        # priors (sigma's on log sigma)
        dev = (theta - self.loc) / self.sd
        dev[-1] = (theta[-1] - SIGMA_LOC) / SIGMA_SCALE
        lp = -0.5 * (dev * dev).sum()
        g_prior = -dev / np.where(np.arange(self.size) == self.size - 1, SIGMA_SCALE, self.sd)
        return -(ll.sum() + lp), -(g + g_prior)


def _laplace(obj: _Objective, theta: np.ndarray) -> np.ndarray:
    """Covariance of theta[:-1] at the MAP: the inverse of the negative log posterior's Hessian (central
    differences of the exact gradient), its eigenvalues floored so it is positive definite."""
    k = obj.size - 1
    h = np.empty((k, k))
    for j in range(k):
        e = np.zeros(obj.size)
        e[j] = 1e-4
        h[j] = (obj.value_grad(theta + e)[1][:k] - obj.value_grad(theta - e)[1][:k]) / 2e-4
    h = 0.5 * (h + h.T)
    w, v = np.linalg.eigh(h)
    w = np.maximum(w, 1.0 / INTERCEPT_SD ** 2)
    return (v / w) @ v.T
