"""MemoryModel: Bayesian regression of log peak memory with a censored (Tobit) likelihood.

A trial that ran out of memory did not measure its peak, but it says where the boundary lies:
peak > capacity. Model (Pyro, :func:`memory_model`)::

    intercept ~ Normal(log capacity, 3)          # log bytes at the default (Normal(0, 3) with offsets)
    beta[j]   ~ Normal(prior_mean[j], prior_sd[j])   # a Prior's mem_mean/mem_sd, else Normal(0, 1);
                                                     # interaction columns Normal(0, 0.1)
    sigma     ~ LogNormal(log 0.1, 1)            # scatter of log peak around the linear model
    mu[i] = intercept + x[i] @ beta + offset[i]
    ok trial:     log_peak[i] ~ Normal(mu[i], sigma)                 # observed
    oom trial:    factor log P(peak > C) = log_ndtr((mu[i] - log C) / sigma)   # censored from below
    ok trial that reported no peak ("it fit"):
                  factor log P(peak <= C) = log_ndtr((log C - mu[i]) / sigma)  # censored from above
    other failure (crash, timeout with no peak): contributes nothing

Both censored kinds are the same factor with the row's sign flipped (x -> -x, C -> -C), so the grid/EP
fit treats them as one set of censored rows.

``oom_handling`` also offers the two naive treatments, for comparison only: ``"drop"`` (ignore OOM
trials, as Optuna/HEBO do) and ``"capacity"`` (score an OOM as peak = capacity). Both are biased.

Inference: ``inference="grid"`` (default) integrates sigma out on a grid of 32 values; given sigma,
Newton finds the mode of the coefficients (strictly convex: log Phi is concave), warm-started at the
previous posterior mean, which weights the grid point (Laplace marginal likelihood), and expectation
propagation gives the coefficients' mean and covariance (exact when nothing is censored; close to
NUTS for effects seen mostly through OOMs, where the Gaussian at the mode is far too low and narrow).
See :func:`._fit.tobit_grid`.
``"svi"`` fits an AutoMultivariateNormal guide with Pyro SVI, started at the grid posterior on the
first fit and continued from the previous guide on every refit (fewer steps).
:meth:`MemoryModel.run_nuts` samples the exact posterior (a check of the grid posterior in tests and
benchmarks; neither the search nor the report runs it).

The joint-mode Laplace approximation was tried first and rejected: with ~20 coefficients and ~40
trials it put sigma at 0.021 where NUTS gives 0.036 (true 0.05), and its 90% intervals missed the
truth for 12 of 22 coefficients; integrating sigma out on the grid matches NUTS.

Public API (what the search stage calls)::

    m = MemoryModel(space, capacity_bytes, priors=None, seed=0, *, interactions=None,
                    oom_handling="censor", inference="grid", main_sd=1.0, interaction_sd=0.1,
                    svi_steps=(300, 100))
    m.fit(settings, peaks_bytes, ooms, offsets=None, fits=None) -> m
        # row i: ooms[i] True -> censored at capacity (peak ignored; None/NaN is fine);
        # False with a peak -> observed; fits[i] True with None/NaN -> it ran, so peak <= capacity;
        # otherwise None/NaN -> no memory information (crash)
    mean_log, sd_log = m.predict(settings, offsets=None, noise=True)   # log peak bytes, shape (n,) each
    m.p_oom(settings, margin=0.0, offsets=None)   # P(peak > capacity * (1 - margin)), shape (n,)
    m.effects(nuts=False) -> list[Effect]; m.run_nuts(num_samples=300, warmup_steps=300)
    m.last_fit_s, m.n_obs, m.n_censored (OOMs), m.n_fit (ran, no peak), m.sigma,
    m.posterior (GridPosterior over [intercept, beta])
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoMultivariateNormal
from pyro.infer.autoguide.initialization import init_to_value

from ..knobs.space import KnobSpace
from ..trial.prior import Prior
from ._base import LogLinearModel, f64
from ._fit import GridPosterior, gaussian_to_grid, ndtr, one_thread, row_moments, tobit_grid

OomHandling = Literal["censor", "drop", "capacity"]
Inference = Literal["grid", "svi"]
INTERCEPT_SD = 3.0  # log bytes: a factor e^3 = 20x either way of capacity
SIGMA_LOC, SIGMA_SCALE = math.log(0.1), 1.0


def memory_model(
    x_ok: torch.Tensor,
    off_ok: torch.Tensor,
    x_oom: torch.Tensor,
    off_oom: torch.Tensor,
    log_capacity: float,
    intercept_loc: float,
    prior_mean: torch.Tensor,
    prior_sd: torch.Tensor,
    y_ok: torch.Tensor | None = None,
    x_fit: torch.Tensor | None = None,
    off_fit: torch.Tensor | None = None,
) -> None:
    """x_ok: (n_ok, p) designs of trials that measured a peak, y_ok: (n_ok,) their log peak bytes;
    x_oom: (n_oom, p) designs of OOM trials (censored at log_capacity, from below);
    x_fit: (n_fit, p) designs of trials that ran without reporting a peak (censored from above)."""
    dt = prior_mean.dtype
    intercept = pyro.sample("intercept", dist.Normal(torch.tensor(intercept_loc, dtype=dt), INTERCEPT_SD))
    beta = pyro.sample("beta", dist.Normal(prior_mean, prior_sd).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(torch.tensor(SIGMA_LOC, dtype=dt), SIGMA_SCALE))
    # (x * beta).sum(-1) rather than x @ beta: beta may carry particle dims (..., 1, p) under
    # vectorized SVI; the product broadcasts to (..., n, p) and the sum gives (..., n).
    with pyro.plate("ok_trials", x_ok.shape[0]):
        pyro.sample("log_peak", dist.Normal(intercept + (x_ok * beta).sum(-1) + off_ok, sigma), obs=y_ok)
    if x_oom.shape[0]:
        with pyro.plate("oom_trials", x_oom.shape[0]):
            z = (intercept + (x_oom * beta).sum(-1) + off_oom - log_capacity) / sigma
            pyro.factor("peak_above_capacity", torch.special.log_ndtr(z))
    if x_fit is not None and x_fit.shape[0]:
        with pyro.plate("fit_trials", x_fit.shape[0]):
            z = (log_capacity - intercept - (x_fit * beta).sum(-1) - off_fit) / sigma
            pyro.factor("peak_within_capacity", torch.special.log_ndtr(z))


class MemoryModel(LogLinearModel):
    """Posterior over log peak memory; see the module docstring for the model and the API. ``predict``,
    ``effects``, ``run_nuts``, ``sigma`` (the scatter sd) and the offsets rule are
    :class:`._base.LogLinearModel`'s."""

    target = "memory"
    unit = "log-bytes"
    intercept_sd = INTERCEPT_SD
    offsets_fixed_at_first_fit = True  # with offsets the intercept prior moves to 0 (log of actual / analytical)

    def __init__(
        self,
        space: KnobSpace,
        capacity_bytes: float,
        priors: Sequence[Prior] | None = None,
        seed: int = 0,
        *,
        interactions: Sequence[Sequence[str]] | None = None,
        oom_handling: OomHandling = "censor",
        inference: Inference = "grid",
        main_sd: float = 1.0,
        interaction_sd: float = 0.1,
        svi_steps: tuple[int, int] = (300, 100),
    ) -> None:
        if not (isinstance(capacity_bytes, (int, float)) and math.isfinite(capacity_bytes) and capacity_bytes > 0):
            raise ValueError(f"capacity_bytes must be a positive number of bytes (e.g. 80e9), got {capacity_bytes!r}")
        if oom_handling not in ("censor", "drop", "capacity"):
            raise ValueError(f"oom_handling={oom_handling!r}: use 'censor' (default), 'drop' or 'capacity'")
        if inference not in ("grid", "svi"):
            raise ValueError(f"inference={inference!r}: use 'grid' (default) or 'svi'")
        self._init_model(space, priors, interactions, seed, main_sd, interaction_sd)
        self.capacity_bytes = float(capacity_bytes)
        self.log_capacity = math.log(capacity_bytes)
        self.oom_handling: OomHandling = oom_handling
        self.inference: Inference = inference
        self.svi_steps = svi_steps
        self.n_censored = 0
        self.n_fit = 0
        self._data: dict[str, Any] | None = None
        self._svi: tuple[AutoMultivariateNormal, Any, torch.optim.Optimizer] | None = None
        self._p = self.design.p
        # Posterior over eta = [intercept, beta (p)] as a mixture over log sigma; before any data, the prior.
        self.posterior: GridPosterior = self._prior_posterior()

    def _prior_posterior(self) -> GridPosterior:
        m0, s0 = self.coefficient_prior()
        return gaussian_to_grid(
            np.concatenate([m0, [SIGMA_LOC]]), np.diag(np.concatenate([s0, [SIGMA_SCALE]]) ** 2)
        )

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        settings: Sequence[Mapping[str, Any]],
        peaks_bytes: Sequence[float | None] | np.ndarray,
        ooms: Sequence[bool] | np.ndarray,
        offsets: Sequence[float] | np.ndarray | None = None,
        fits: Sequence[bool] | np.ndarray | None = None,
    ) -> "MemoryModel":
        """Condition on all trials so far, starting from the previous fit.

        Row i: ``ooms[i]`` True -> censored (peak > capacity; ``peaks_bytes[i]`` is ignored);
        False with a positive peak -> observed; ``fits[i]`` True with None/NaN -> the setting ran,
        so its peak was at most the capacity (censored from above); otherwise None/NaN -> no memory
        information (a crash unrelated to memory), skipped. ``offsets[i]``: analytical log-bytes term.
        """
        t0 = time.perf_counter()
        settings = list(settings)
        n = len(settings)
        peaks = np.array([np.nan if v is None else float(v) for v in peaks_bytes], dtype=float)
        oom = np.array([bool(v) for v in ooms], dtype=bool)
        ran = np.zeros(n, dtype=bool) if fits is None else np.array([bool(v) for v in fits], dtype=bool)
        if peaks.shape != (n,) or oom.shape != (n,) or ran.shape != (n,):
            raise ValueError(f"peaks_bytes ({peaks.size}), ooms ({oom.size}) and fits ({ran.size}) need one value "
                             f"per setting ({n})")
        if (ran & oom).any():
            i = int(np.flatnonzero(ran & oom)[0])
            raise ValueError(f"row {i} is both an OOM and a setting that fit: set fits[{i}] = False for an OOM")
        bad = np.flatnonzero(~oom & ~np.isnan(peaks) & ~(np.isfinite(peaks) & (peaks > 0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"peaks_bytes[{i}] = {peaks[i]!r}: a peak must be a positive number of bytes (None for none)")
        off = self._check_offsets(offsets, n, fitting=True)
        x = self.design.matrix(settings)
        ok = ~oom & ~np.isnan(peaks)
        below = ran & ~oom & np.isnan(peaks)
        y_ok = np.log(peaks[ok])
        x_ok, off_ok = x[ok], off[ok]
        x_c, off_c = x[oom], off[oom]
        x_f, off_f = x[below], off[below]
        if self.oom_handling == "drop":
            x_c, off_c = x_c[:0], off_c[:0]
        elif self.oom_handling == "capacity":
            x_ok = np.vstack([x_ok, x_c])
            off_ok = np.concatenate([off_ok, off_c])
            y_ok = np.concatenate([y_ok, np.full(len(x_c), self.log_capacity)])
            x_c, off_c = x_c[:0], off_c[:0]
        self._data = dict(x_ok=x_ok, off_ok=off_ok, y_ok=y_ok, x_oom=x_c, off_oom=off_c, x_fit=x_f, off_fit=off_f)
        self._data["x1_ok"] = np.hstack([np.ones((len(x_ok), 1)), x_ok])  # intercept column first
        self._data["x1_oom"] = np.hstack([np.ones((len(x_c), 1)), x_c])
        x1_f = np.hstack([np.ones((len(x_f), 1)), x_f])
        self.n_obs, self.n_censored, self.n_fit = len(y_ok), len(x_c), len(x_f)
        self.nuts_draws = None

        # One set of censored rows: OOMs (x eta > C - off) and fits (x eta <= C - off, i.e. -x eta >= -(C - off)).
        x_cens = np.vstack([self._data["x1_oom"], -x1_f])
        c_cens = np.concatenate([self.log_capacity - off_c, -(self.log_capacity - off_f)])
        self.posterior = tobit_grid(
            self._data["x1_ok"], y_ok - off_ok, x_cens, c_cens,
            *self.coefficient_prior(), SIGMA_LOC, SIGMA_SCALE, self._start(),
        )
        if self.inference == "svi":
            self._fit_svi()
        self._fitted_once = True
        self.last_fit_s = time.perf_counter() - t0
        return self

    @property
    def intercept_loc(self) -> float:
        return 0.0 if self._uses_offsets else self.log_capacity

    def _start(self) -> np.ndarray:
        """Where Newton starts: the previous posterior mean (warm start), else the prior mean with the
        intercept at the mean observed log peak."""
        if self._fitted_once:
            return self.posterior.mean()
        m0, _ = self.coefficient_prior()
        if len(self._data["y_ok"]):
            m0[0] = float(np.mean(self._data["y_ok"] - self._data["off_ok"]))
        return m0

    def pyro_kwargs(self) -> dict[str, Any]:
        """The arguments of :func:`memory_model` for the fitted data (float64 tensors)."""
        if self._data is None:
            raise RuntimeError("no data: call fit() first")
        d = self._data
        return dict(
            x_ok=f64(d["x_ok"]), off_ok=f64(d["off_ok"]), x_oom=f64(d["x_oom"]), off_oom=f64(d["off_oom"]),
            log_capacity=self.log_capacity, intercept_loc=self.intercept_loc, **self._prior_tensors(),
            y_ok=f64(d["y_ok"]), x_fit=f64(d["x_fit"]), off_fit=f64(d["off_fit"]),
        )

    def _fit_svi(self) -> None:
        """SVI with an AutoMultivariateNormal guide whose parameters live in this instance (not in
        Pyro's global param store), so several models coexist and each refit continues from the last."""
        kwargs = self.pyro_kwargs()
        first = self._svi is None
        pyro.set_rng_seed(self.seed)
        with pyro.settings.context(module_local_params=True), one_thread():
            if first:
                guide = AutoMultivariateNormal(memory_model, init_loc_fn=init_to_value(values=self._init_values()), init_scale=0.05)
                loss_fn = Trace_ELBO(num_particles=8, vectorize_particles=True, max_plate_nesting=1)(memory_model, guide)
                loss_fn(**kwargs)  # creates the guide's parameters
                optim = torch.optim.Adam(loss_fn.parameters(), lr=0.02)
                self._svi = (guide, loss_fn, optim)
            guide, loss_fn, optim = self._svi
            steps = self.svi_steps[0] if first else self.svi_steps[1]
            for _ in range(steps):
                optim.zero_grad()
                loss = loss_fn(**kwargs)
                loss.backward()
                optim.step()
            loc = guide.loc.detach().numpy().copy()
            tril = guide.scale_tril.detach()
            scale = guide.scale.detach()
            l = (scale[:, None] * tril).numpy()
        # unconstrained coordinates in site order: intercept, beta (p), log sigma
        self.posterior = gaussian_to_grid(loc, l @ l.T)

    # ------------------------------------------------------------- P(OOM) (predict is the base class's)
    def p_oom(
        self,
        settings: Sequence[Mapping[str, Any]],
        margin: float = 0.0,
        offsets: Sequence[float] | np.ndarray | None = None,
    ) -> np.ndarray:
        """P(peak > capacity * (1 - margin)) per setting, shape (n,): the posterior predictive
        probability, summed over the sigma mixture (points with weight < 1e-4 are left out)."""
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1) (a fraction of capacity, e.g. 0.05), got {margin!r}")
        return self.p_above(settings, self.log_capacity + math.log1p(-margin), offsets)

    def p_above(
        self,
        settings: Sequence[Mapping[str, Any]],
        threshold: float,
        offsets: Sequence[float] | np.ndarray | None = None,
    ) -> np.ndarray:
        """P(log peak > threshold) per setting, shape (n,) (``p_oom`` with the threshold in log bytes)."""
        x1, off = self.design_rows(settings, offsets)
        thr = threshold
        post = self.posterior
        keep = np.flatnonzero(post.weights >= 1e-4)
        w = post.weights[keep] / post.weights[keep].sum()
        mu, quad = row_moments(x1, post.means[keep], post.covs[keep])  # (G', n) each
        var = quad + np.exp(2 * post.log_sigma[keep])[:, None]
        return w @ ndtr((mu + off[None, :] - thr) / np.sqrt(var))


    # ------------------------------------------------------------- NUTS (run_nuts is the base class's)
    def _pyro_model(self) -> Callable[..., None]:
        return memory_model

    def _has_data(self) -> bool:
        return self._data is not None
