"""TimeModel: Bayesian regression of log steady-state step time on a setting's features.

Model (Pyro, :func:`time_model`)::

    intercept ~ Normal(0, 10)                            # log seconds at the default setting (minus offset)
    beta[j]   ~ Normal(prior_mean[j], prior_sd[j])       # a Prior's time_mean/time_sd, else Normal(0, 1);
                                                         # interaction columns Normal(0, 0.1)
    sigma     ~ LogNormal(log(noise_cv), 0.75)           # run-to-run noise from the doctor (CV ~ sd of log)
                                                         # LogNormal(log 0.05, 1.5) when no CV is known
    log_step_time[i] ~ Normal(intercept + x[i] @ beta + offset[i], sigma)
    pruned trial (stopped when its steps were slower than the incumbent's; execute/prune.py):
                  factor log P(log t > log L_i) = log_ndtr((mu[i] - log L_i) / sigma)   # censored from below at
                                                                                        # its lower bound L_i

``x`` is the design of :mod:`._design`: the KnobSpace's one-hot features plus interaction columns.
``offset`` is an optional analytical term per setting (e.g. log(model FLOPs / peak FLOP/s)).

Inference is exact and fast: given sigma the model is a conjugate Gaussian linear model, so the
posterior is a mixture of Gaussians over a grid of sigma values weighted by the marginal likelihood
(:func:`._fit.conjugate_grid`). With lower bounds (pruned trials) it is the censored (Tobit) grid of the memory
model (:func:`._fit.tobit_grid`): Newton per sigma, expectation propagation for the moments. There is nothing to warm-start; a refit on 50 trials takes
milliseconds. :meth:`TimeModel.run_nuts` samples the same Pyro model with NUTS (a check of the grid posterior in tests
and benchmarks; neither the search nor the report runs it).

Public API (what the search stage calls)::

    m = TimeModel(space, priors=None, noise_cv=None, interactions=None, seed=0, *,
                  main_sd=1.0, interaction_sd=0.1)
    m.fit(settings, step_times_s, offsets=None, lower_bounds_s=None) -> m
        # step_times_s[i] in seconds; NaN/None = the trial produced no step time (OOM, crash): skipped
        # lower_bounds_s[i] in seconds where step_times_s[i] is NaN: the step time is above it (a pruned trial)
    mean_log, sd_log = m.predict(settings, offsets=None, noise=True)   # posterior predictive of
        # log step time (log seconds), shape (n,) each; noise=False: uncertainty of the mean only
    draws = m.sample(settings, n, offsets=None, noise=False)  # (n, len(settings)) joint draws (Thompson)
    m.effects(nuts=False) -> list[Effect]; m.run_nuts(num_samples=300, warmup_steps=300)
    m.last_fit_s, m.n_obs, m.sigma, m.posterior (GridPosterior over [intercept, beta])

``interactions=None`` uses :data:`._design.DEFAULT_INTERACTIONS` whose knobs all exist in the
space; pass a list of knob-name tuples to choose, or ``[]`` for none. When ``fit`` got offsets,
``predict``/``sample`` need them too (and not otherwise): a clear error says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch

from ..knobs.space import KnobSpace
from ..trial.prior import Prior
from ._base import LogLinearModel, as_float_array, f64
from ._fit import GridPosterior, conjugate_grid, one_thread, tobit_grid

INTERCEPT_SD = 10.0  # log seconds: a flat prior in practice (e^-10 s .. e^10 s within 1 sd)
NOISE_SCALE_WITH_CV = 0.75  # sd of log sigma around log(noise_cv): the model's misfit adds to the noise
NOISE_LOC_DEFAULT, NOISE_SCALE_DEFAULT = math.log(0.05), 1.5


def time_model(
    x: torch.Tensor,
    offsets: torch.Tensor,
    prior_mean: torch.Tensor,
    prior_sd: torch.Tensor,
    sigma_loc: float,
    sigma_scale: float,
    y: torch.Tensor | None = None,
) -> None:
    """x: (n, p) design, offsets: (n,), y: (n,) log step time in log seconds (None to simulate)."""
    intercept = pyro.sample("intercept", dist.Normal(torch.tensor(0.0, dtype=x.dtype), INTERCEPT_SD))
    beta = pyro.sample("beta", dist.Normal(prior_mean, prior_sd).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(torch.tensor(sigma_loc, dtype=x.dtype), sigma_scale))
    mu = intercept + x @ beta + offsets
    with pyro.plate("trials", x.shape[0]):
        pyro.sample("log_step_time", dist.Normal(mu, sigma), obs=y)


class TimeModel(LogLinearModel):
    """Posterior over log step time; see the module docstring for the model and the API. ``predict``,
    ``effects``, ``run_nuts``, ``sigma`` (the noise sd) and the offsets rule are :class:`._base.LogLinearModel`'s."""

    target = "time"
    unit = "log-seconds"
    intercept_sd = INTERCEPT_SD
    intercept_loc = 0.0  # log seconds at the default setting: the flat INTERCEPT_SD carries it

    def __init__(
        self,
        space: KnobSpace,
        priors: Sequence[Prior] | None = None,
        noise_cv: float | None = None,
        interactions: Sequence[Sequence[str]] | None = None,
        seed: int = 0,
        *,
        main_sd: float = 1.0,
        interaction_sd: float = 0.1,
    ) -> None:
        self._init_model(space, priors, interactions, seed, main_sd, interaction_sd)
        if noise_cv is None:
            self.sigma_loc, self.sigma_scale = NOISE_LOC_DEFAULT, NOISE_SCALE_DEFAULT
        else:
            if not (isinstance(noise_cv, (int, float)) and math.isfinite(noise_cv) and noise_cv > 0):
                raise ValueError(f"noise_cv must be a positive number (the doctor's CV, e.g. 0.02), got {noise_cv!r}")
            self.sigma_loc, self.sigma_scale = math.log(noise_cv), NOISE_SCALE_WITH_CV
        self._rng = np.random.default_rng(seed)
        self._x: np.ndarray | None = None
        self._y: np.ndarray | None = None
        self._off: np.ndarray | None = None
        self.n_censored = 0  # pruned trials told as lower bounds at the last fit
        self.posterior: GridPosterior = self._solve(np.zeros((0, self.design.p)), np.zeros(0))

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        settings: Sequence[Mapping[str, Any]],
        step_times_s: Sequence[float] | np.ndarray,
        offsets: Sequence[float] | np.ndarray | None = None,
        lower_bounds_s: Sequence[float] | np.ndarray | None = None,
    ) -> "TimeModel":
        """Condition on all trials so far (the posterior is recomputed exactly from the prior).

        ``step_times_s[i]``: steady-state step time of ``settings[i]`` in seconds; NaN/None for a
        trial that produced none (OOM, crash): skipped. ``offsets[i]``: analytical log-time term.
        ``lower_bounds_s[i]``: for a trial with no step time, seconds its step time is known to exceed (a pruned
        trial: a censored observation, not a time); NaN/None: nothing known.
        """
        t0 = time.perf_counter()
        settings = list(settings)
        y_s = as_float_array(step_times_s, "step_times_s", len(settings))
        off = self._check_offsets(offsets, len(settings), fitting=True)
        keep = ~np.isnan(y_s)
        bad = np.flatnonzero(keep & ~(np.isfinite(y_s) & (y_s > 0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"step_times_s[{i}] = {y_s[i]!r}: a step time must be a positive number of seconds (NaN for none)")
        low = (np.full(len(settings), np.nan) if lower_bounds_s is None
               else as_float_array(lower_bounds_s, "lower_bounds_s", len(settings)))
        cens = ~keep & ~np.isnan(low)
        bad = np.flatnonzero(cens & ~(np.isfinite(low) & (low > 0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"lower_bounds_s[{i}] = {float(low[i])!r}: a lower bound must be a positive number of seconds")
        design = self.design.matrix(settings)
        x = design[keep]
        y = np.log(y_s[keep])
        self._x, self._y, self._off = x, y, off[keep]
        if cens.any():  # pruned trials: log t > log L, censored from below (the memory model's Tobit grid)
            x1 = np.hstack([np.ones((x.shape[0], 1)), x])
            xc = np.hstack([np.ones((int(cens.sum()), 1)), design[cens]])
            self.posterior = tobit_grid(x1, y - off[keep], xc, np.log(low[cens]) - off[cens],
                                        *self.coefficient_prior(), self.sigma_loc, self.sigma_scale,
                                        self.posterior.mean())
        else:
            self.posterior = self._solve(x, y - off[keep])
        self.n_obs = int(keep.sum())
        self.n_censored = int(cens.sum())
        self.nuts_draws = None
        self._fitted_once = True
        self.last_fit_s = time.perf_counter() - t0
        return self

    def _solve(self, x: np.ndarray, y: np.ndarray) -> GridPosterior:
        x1 = np.hstack([np.ones((x.shape[0], 1)), x])
        return conjugate_grid(x1, y, *self.coefficient_prior(), self.sigma_loc, self.sigma_scale)

    # ------------------------------------------------------------- draws (predict is the base class's)
    def sample(
        self,
        settings: Sequence[Mapping[str, Any]],
        n: int,
        offsets: Sequence[float] | np.ndarray | None = None,
        *,
        noise: bool = False,
    ) -> np.ndarray:
        """``n`` joint posterior draws of log step time for every setting: shape (n, len(settings)).
        Each row is one coherent draw of the coefficients (for Thompson sampling)."""
        x1, off = self.design_rows(settings, offsets)
        theta, sigma = self.posterior.sample(n, self._rng)
        with one_thread():
            out = (torch.as_tensor(theta) @ torch.as_tensor(x1).T).numpy() + off[None, :]
        if noise:
            out = out + sigma[:, None] * self._rng.standard_normal(out.shape)
        return out

    def standard_normal(self, n: int) -> np.ndarray:
        """n standard normal draws from the model's own seeded stream, the one :meth:`sample` uses: a caller
        that extends a draw (the tuner's residual GP) stays reproducible from the seed."""
        return self._rng.standard_normal(n)

    # ------------------------------------------------------------- NUTS (run_nuts is the base class's)
    def _pyro_model(self) -> Callable[..., None]:
        return time_model

    def _has_data(self) -> bool:
        return self._x is not None

    def pyro_kwargs(self) -> dict[str, Any]:
        """The arguments of :func:`time_model` for the fitted data (float64 tensors)."""
        assert self._x is not None and self._y is not None and self._off is not None
        return dict(x=f64(self._x), offsets=f64(self._off), **self._prior_tensors(), sigma_loc=self.sigma_loc,
                    sigma_scale=self.sigma_scale, y=f64(self._y))
