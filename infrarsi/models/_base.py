"""What :class:`~.time.TimeModel` and :class:`~.memory.MemoryModel` share.

Both are linear models on the log scale (log seconds, log bytes) over a :class:`._design.Design`'s
columns plus an intercept, with an optional analytical log term per setting (the offset) and a
posterior over ``[intercept, beta]`` that is a mixture over the log noise sd (:class:`._fit.GridPosterior`).
Each subclass keeps its own Pyro model, likelihood and ``fit``; this class holds the predictive mean and sd,
the offsets rule, the effects, the posterior noise sd and NUTS on the subclass's Pyro model.

It also states what :func:`.revision.effects_of` reads of a model: ``design``, ``posterior``,
``nuts_draws`` and ``target``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from ..knobs.space import KnobSpace
from ..trial.prior import Prior
from ._design import Design
from ._fit import GridPosterior, row_moments, run_nuts
from .revision import Effect, effects_of


class LogLinearModel:
    """Shared part of the time and memory models; see the module docstring."""

    target: ClassVar[Literal["time", "memory"]]
    unit: ClassVar[str]  # what an offset is in, for messages: "log-seconds", "log-bytes"
    intercept_sd: ClassVar[float]  # prior sd of the intercept (log scale); its mean is ``intercept_loc``
    # Whether the offsets choice (with or without) is fixed at the first fit: the memory model's
    # intercept prior and its warm start depend on it; the time model refits from the prior each time.
    offsets_fixed_at_first_fit: ClassVar[bool] = False
    posterior: GridPosterior

    def _init_model(self, space: KnobSpace, priors: Sequence[Prior] | None,
                    interactions: Sequence[Sequence[str]] | None, seed: int, main_sd: float,
                    interaction_sd: float) -> None:
        self.design = Design(space, target=self.target, priors=priors, interactions=interactions, main_sd=main_sd,
                             interaction_sd=interaction_sd)
        self.seed = seed
        self._uses_offsets = False
        self._fitted_once = False
        self.n_obs = 0
        self.last_fit_s = 0.0
        self.nuts_draws: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------- subclass hooks
    def _pyro_model(self) -> Callable[..., None]:
        """The Pyro model :meth:`run_nuts` samples (called with :meth:`pyro_kwargs`)."""
        raise NotImplementedError

    def _has_data(self) -> bool:
        raise NotImplementedError

    def pyro_kwargs(self) -> dict[str, Any]:
        raise NotImplementedError

    # ------------------------------------------------------------- predict
    def predict(
        self,
        settings: Sequence[Mapping[str, Any]],
        offsets: Sequence[float] | np.ndarray | None = None,
        *,
        noise: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior predictive of the log target (log seconds of step time, log bytes of peak memory):
        (mean, sd), each shape (n,). ``noise=False`` leaves out sigma, the run-to-run noise of step time or
        the scatter of peak memory around the linear model (uncertainty about the mean only)."""
        x1, off = self.design_rows(settings, offsets)
        post = self.posterior
        mu, quad = row_moments(x1, post.mean()[None], post.cov()[None])
        mean, var = mu[0] + off, quad[0]
        if noise:
            var = var + post.e_sigma2()
        return mean, np.sqrt(np.maximum(var, 0.0))

    def coefficient_prior(self) -> tuple[np.ndarray, np.ndarray]:
        """Prior (mean, sd) of [intercept, beta], each shape (p + 1,), on the log scale."""
        m0 = np.concatenate([[self.intercept_loc], self.design.prior_mean])
        s0 = np.concatenate([[self.intercept_sd], self.design.prior_sd])
        return m0, s0

    def design_rows(self, settings: Sequence[Mapping[str, Any]], offsets: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(x1, offsets): the design with an intercept column first, (n, p + 1), and the log offsets, (n,)
        (zeros without offsets; a model fit with offsets needs them here too)."""
        settings = list(settings)
        off = self._check_offsets(offsets, len(settings), fitting=False)
        return np.hstack([np.ones((len(settings), 1)), self.design.matrix(settings)]), off

    @property
    def sigma(self) -> float:
        """Posterior mean of sigma, the sd of the log target around the linear model (log scale): the
        run-to-run noise of step time, the scatter of peak memory."""
        return float(self.posterior.weights @ np.exp(self.posterior.log_sigma))

    # ------------------------------------------------------------- effects
    def effects(self, *, nuts: bool = False) -> list[Effect]:
        """Posterior of every column (main effects, then interactions): mean and central 90% interval."""
        return effects_of(self, nuts=nuts)

    def run_nuts(self, num_samples: int = 300, warmup_steps: int = 300, *,
                 jit_compile: bool = True) -> dict[str, np.ndarray]:
        """Sample the model's Pyro model on the fitted data with NUTS (exact; seconds to minutes), starting
        at the current posterior mean. Kept in ``nuts_draws``; used by ``effects(nuts=True)``."""
        if not self._has_data():
            raise RuntimeError("run_nuts() needs data: call fit() first")
        self.nuts_draws = run_nuts(self._pyro_model(), self.pyro_kwargs(), self._init_values(), num_samples=num_samples,
                                   warmup_steps=warmup_steps, seed=self.seed, jit_compile=jit_compile)
        return self.nuts_draws

    def _init_values(self) -> dict[str, torch.Tensor]:
        """The current posterior mean as values of the Pyro model's latent sites."""
        m = self.posterior.mean()
        return {
            "intercept": torch.tensor(m[0], dtype=torch.float64),
            "beta": torch.as_tensor(m[1:]),
            "sigma": torch.tensor(self.sigma, dtype=torch.float64),
        }

    def _prior_tensors(self) -> dict[str, torch.Tensor]:
        """The columns' prior mean and sd as the Pyro model's ``prior_mean``/``prior_sd`` (float64)."""
        return dict(prior_mean=f64(self.design.prior_mean), prior_sd=f64(self.design.prior_sd))

    # -------------------------------------------------------------- offsets
    def _check_offsets(self, offsets: Any, n: int, *, fitting: bool) -> np.ndarray:
        """The offsets as an (n,) array (zeros for None), held to one rule: a model fit with offsets
        predicts with them, one fit without predicts without."""
        name = type(self).__name__
        fixed = self.offsets_fixed_at_first_fit and self._fitted_once
        if offsets is None:
            if not fitting and self._uses_offsets:
                raise ValueError(f"this {name} was fit with offsets: pass offsets= for these settings too")
            if fitting:
                if fixed and self._uses_offsets:
                    raise ValueError(f"this {name} was fit with offsets before: keep passing offsets=")
                self._uses_offsets = False
            return np.zeros(n)
        off = as_float_array(offsets, "offsets", n)
        if not np.isfinite(off).all():
            raise ValueError(f"offsets[{int(np.flatnonzero(~np.isfinite(off))[0])}] is not finite; offsets are "
                             f"{self.unit} terms")
        if fitting:
            if fixed and not self._uses_offsets:
                raise ValueError(f"this {name} was fit without offsets before: build a new model to add them")
            if not fixed:
                self._uses_offsets = True
        elif not self._uses_offsets:
            raise ValueError(f"this {name} was fit without offsets: predict without offsets= (or refit with them)")
        return off


def f64(a: Any) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)


def as_float_array(values: Any, name: str, n: int) -> np.ndarray:
    """One float per setting (None -> NaN), shape (n,), or a ValueError naming ``name``."""
    arr = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    if arr.shape != (n,):
        raise ValueError(f"{name} has {arr.size} values for {n} settings; give one per setting")
    return arr
