"""Residual: a Gaussian process on what the additive time model gets wrong, near the settings tried.

The TimeModel is additive in log time: each knob value has one effect, whatever the others do. Real
step time is not: the pipeline bubble couples pp, virtual stages, micro-batch and DP; context and
expert parallel share the same links. On the Mixtral-like simulated workload an additive fit on
3,000 settings still ranks a setting at 0.93 of the optimum first (rmse 0.085 in log time), so more
trials of the same model cannot find the last few percent.

The residual r_i = log t_i - mean_i of every trial that ran is modelled as a GP over settings with the
kernel ``k(a, b) = s^2 exp(-d(a, b) / l)``, d = number of knobs in which a and b differ. Where a trial
ran faster than the additive model said, its neighbours inherit part of the surprise; far from every
trial the GP adds only its prior variance s^2 (the model's known misfit). ``s`` and ``l`` are chosen
by marginal likelihood on a small grid at every fit (n <= a few hundred: milliseconds). Noise sd is
the run-to-run CV.

    gp = Residual.fit(codes_tried, residuals, noise_sd)    # codes: (n, K) int value index per knob
    mean, var = gp.predict(codes_cands)                   # (m,), (m,) log-time corrections
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..models import jittered_cholesky

SCALES = (0.01, 0.03, 0.06, 0.12)  # s: log-time misfit, 1% .. 12%
LENGTHS = (0.5, 1.0, 2.0, 4.0)  # l: knobs


@dataclass(frozen=True)
class Residual:
    codes: np.ndarray  # (n, K) knob value indices of the trials
    alpha: np.ndarray  # (n,) (K + noise I)^-1 r
    chol: np.ndarray  # (n, n) lower Cholesky factor of K + noise I
    scale: float
    length: float

    @staticmethod
    def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Knobs in which each row of a differs from each row of b: (len(a), len(b))."""
        return (a[:, None, :] != b[None, :, :]).sum(axis=2)

    @classmethod
    def fit(cls, codes: np.ndarray, r: np.ndarray, noise_sd: float) -> "Residual | None":
        """Best (s, l) by marginal likelihood; None with fewer than 3 points."""
        n = len(r)
        if n < 3:
            return None
        d = cls.distance(codes, codes)
        best: tuple[float, Residual] | None = None
        noise = max(noise_sd, 1e-3) ** 2
        for s, length in itertools.product(SCALES, LENGTHS):
            k = s * s * np.exp(-d / length) + noise * np.eye(n)
            try:
                chol, k = jittered_cholesky(k)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, r))
            log_ml = -0.5 * r @ alpha - np.log(np.diag(chol)).sum()
            if best is None or log_ml > best[0]:
                best = (log_ml, cls(codes, alpha, chol, s, length))
        return best[1] if best else None

    def predict(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of the residual at each row of ``codes``: (m,), (m,)."""
        ks = self.scale ** 2 * np.exp(-self.distance(codes, self.codes) / self.length)  # (m, n)
        mean = ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)  # (n, m)
        var = np.maximum(self.scale ** 2 - (v * v).sum(axis=0), 0.0)
        return mean, var
