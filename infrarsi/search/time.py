"""The search's step-time parts (:class:`~.parts.TimePart`): what a :class:`~.tuner.Tuner` ranks candidates with.

Each holds the additive TimeModel (``models/time.py``: one effect per knob value, with the priors; what the report
shows) and checks those priors against the trials (:mod:`.prior_check`: a prior the trials contradict is set aside,
widened to ``TunerConfig.time_sd``). They differ in what they rank with:

- :class:`JointTime` (the default): one GP, the additive effects plus a kernel on the knob values with a rate per
  knob, fitted together (:mod:`.surrogate`); ``bubble=True`` adds the pipeline bubble's log factor as one more
  additive column (:mod:`.bubble`; off: measured in BENCHMARKS.md);
- :class:`ResidualTime`: the additive model plus a GP on its residuals (:mod:`.residual`; an ablation: the residuals
  of ~40 columns fitted on 30 trials are ~0, and the GP learns nothing);
- :class:`AdditiveTime`: the additive model alone (an ablation).

    t = JointTime(); t.bind(setup); t.fit(history)
    mean, sd = t.predict(settings)        # log seconds: (n,), (n,)
    t.additive, t.priors, t.conflicted    # the report's model, the priors as used now, the ones set aside and why
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from ..knobs import Setting
from ..models import TimeModel, mills_ratio
from ..trial.prior import Prior
from ..trial.status import TrialStatus
from .bubble import BubbleColumn
from .history import History
from .meaning import interactions
from .parts import Bound, TimePart, guarded
from .prior_check import evidence_conflicts, z_conflicts
from .residual import Residual
from .surrogate import Surrogate

_log = logging.getLogger(__name__)


class _AdditiveBase(Bound, TimePart):
    """The additive TimeModel with the priors, and the prior check; subclasses add what they rank with.
    ``interactions``: the model's interaction columns for the knobs that mean them (False: none, an ablation)."""

    use_interactions = True

    def __init__(self, *, interactions: bool = True) -> None:
        self.use_interactions = interactions

    def _bound(self) -> None:
        su, cfg = self.setup, self.setup.config
        self.given: list[Prior] = list(su.priors)
        self._inter = interactions(su.model_space, su.meanings) if self.use_interactions else []
        self.additive = self._model(self.given)
        # the same model with no priors: what the trials alone say, to catch priors they contradict
        self._free = (TimeModel(su.model_space, noise_cv=su.noise_cv, seed=su.seed, main_sd=cfg.time_sd,
                                interactions=self._inter)
                      if self.given and cfg.prior_conflict_z > 0 else None)
        self.conflicted: dict[str, str] = {}  # feature -> why its time prior was set aside
        self._lower: list[float] = []  # per told trial, a pruned one's lower bound (seconds), else NaN

    def _model(self, priors: list[Prior]) -> TimeModel:
        su = self.setup
        return TimeModel(su.model_space, priors=priors, noise_cv=su.noise_cv, seed=su.seed,
                         main_sd=su.config.time_sd, interactions=self._inter)

    @property
    def priors(self) -> list[Prior]:
        """The priors the time model uses: as given, the set-aside ones widened to ``time_sd``."""
        sd = self.setup.config.time_sd
        return [q.model_copy(update={"time_sd": sd}) if q.feature in self.conflicted else q for q in self.given]

    def fit(self, history: History) -> None:
        """Condition on every trial that ran (a no-op before one has); then the prior check, then the GP."""
        if not history.ok():
            return
        settings = history.settings
        times = [o.step_time_s if o.status is TrialStatus.OK else math.nan for _, o in history]
        # a pruned trial's step time is a lower bound: a censored observation (models/time.py), not a time
        lower = [o.step_time_s if o.status is TrialStatus.PRUNED else math.nan for _, o in history]
        self._lower = lower
        cfg = self.setup.config
        guarded(self.setup, "time model", lambda: self.additive.fit(settings, times, lower_bounds_s=lower))
        if self.given and (cfg.prior_conflict_z > 0 or cfg.prior_conflict_log_bf > 0):
            guarded(self.setup, "prior check", lambda: self._set_aside_conflicts(settings, times))
        guarded(self.setup, "time GP", lambda: self._fit_gp(history))

    def _fit_gp(self, history: History) -> None:
        """What the part ranks with besides the additive model (none here)."""

    def ranked_rows(self, history: History) -> tuple[list[Setting], np.ndarray]:
        """The rows a GP ranks with: every ok trial at its log step time, and every pruned trial at its expected log
        step time given that it exceeds its lower bound L under the censored additive model's predictive N(m, s^2):
        E[y | y > log L] = m + s * phi(a) / Phi(a), a = (m - log L) / s (never below log L). A GP takes Gaussian
        observations only; the additive model holds the bound itself."""
        ok = history.ok()
        ss, ys = [s for s, _ in ok], list(np.log([o.step_time_s for _, o in ok]))
        pruned = history.lower_bounds()
        if pruned:
            ps = [s for s, _ in pruned]
            low = np.log([o.step_time_s for _, o in pruned])
            m, sd = self.additive.predict(ps, noise=True)
            sd = np.maximum(sd, 1e-6)
            ys += list(np.maximum(low, m + sd * mills_ratio((m - low) / sd)))
            ss += ps
        return ss, np.asarray(ys, dtype=float)

    def _set_aside_conflicts(self, settings: list[Setting], times: list[float]) -> None:
        """Set aside the time priors the trials contradict (:mod:`.prior_check`: a prior-free fit
        ``prior_conflict_z`` sds away, or a Bayes factor over ``prior_conflict_log_bf`` for an open prior on the
        knob): each widens to ``time_sd`` and the time model is refit."""
        cfg = self.setup.config
        current = self.priors
        open_ = [q for q in current if q.feature not in self.conflicted]
        new: dict[str, str] = {}
        if self._free is not None:
            self._free.fit(settings, times)
            new.update(z_conflicts(self._free.effects(), open_, z=cfg.prior_conflict_z, widen_sd=cfg.time_sd,
                                   n=len(settings)))
        if cfg.prior_conflict_log_bf > 0:
            ran = sum(1 for t in times if math.isfinite(t))
            fitted = self.additive.n_obs == ran  # the time model was just fitted on these trials (not kept stale)
            found = evidence_conflicts(self._model, current, settings, times, widen_sd=cfg.time_sd,
                                       log_bf=cfg.prior_conflict_log_bf,
                                       stated=self.additive.posterior.log_evidence if fitted else None)
            new.update({f: why for f, why in found.items() if f not in new})
        if not new:
            return
        self.conflicted.update(new)
        for f, why in new.items():
            _log.info("time prior for %s set aside: %s", f, why)
        self.additive = self._model(self.priors)
        self.additive.fit(settings, times, lower_bounds_s=self._lower)

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior of the mean log step time (log seconds): (mean, sd)."""
        return self.additive.predict(settings, noise=False)

    def sample(self, settings: Sequence[Setting]) -> np.ndarray:
        """One coherent posterior draw of the mean log step time over ``settings``, (n,)."""
        return self.additive.sample(settings, 1)[0]


class AdditiveTime(_AdditiveBase):
    """The additive model alone (an ablation)."""


class ResidualTime(_AdditiveBase):
    """The additive model plus a GP on its residuals near the trials (:mod:`.residual`)."""

    residual: Residual | None = None

    def _fit_gp(self, history: History) -> None:
        self.residual = None
        ss, ys = self.ranked_rows(history)
        mean, _ = self.additive.predict(ss, noise=False)
        self.residual = Residual.fit(self.setup.encoder.codes(ss), ys - mean,
                                     self.setup.noise_cv or self.additive.sigma)

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        mean, sd = self.additive.predict(settings, noise=False)
        if self.residual is not None and len(settings):
            gm, gv = self.residual.predict(self.setup.encoder.codes(settings))
            mean, sd = mean + gm, np.sqrt(sd * sd + gv)
        return mean, sd

    def sample(self, settings: Sequence[Setting]) -> np.ndarray:
        draw = self.additive.sample(settings, 1)[0]
        if self.residual is not None:
            gm, gv = self.residual.predict(self.setup.encoder.codes(settings))
            draw = draw + gm + np.sqrt(gv) * self.additive.standard_normal(len(settings))
        return draw


class JointTime(_AdditiveBase):
    """One GP: the additive effects plus a kernel on the knob values (:mod:`.surrogate`); see the module docstring."""

    surrogate: Surrogate | None = None

    def __init__(self, *, bubble: bool = False, bubble_mean: float = 1.0, bubble_sd: float = 0.5,
                 interactions: bool = True) -> None:
        """``bubble``: add the pipeline bubble's column (``bubble_mean``: its coefficient's prior mean, 1 the textbook
        1F1B schedule; ``bubble_sd`` its sd); only in a space with a knob that means pipeline parallel."""
        super().__init__(interactions=interactions)
        self.bubble, self.bubble_mean, self.bubble_sd = bubble, bubble_mean, bubble_sd

    def _bound(self) -> None:
        super()._bound()
        su = self.setup
        self.column = BubbleColumn.for_space(su.space, su.pool, su.meanings) if self.bubble else None

    def _fit_gp(self, history: History) -> None:
        self.surrogate = None
        ss, ys = self.ranked_rows(history)
        self.surrogate = Surrogate.fit(self.design(ss), self.setup.encoder.codes(ss), ys, *self.coefficient_prior(),
                                       noise_sd=self.setup.noise_cv, ordered=self.setup.encoder.ordered)

    def design(self, settings: Sequence[Setting]) -> np.ndarray:
        """The GP's additive design: the time model's with an intercept column, then the bubble column when there is
        one: (n, p + 1 [+ 1])."""
        x1 = self.additive.design_rows(settings)[0]
        if self.column is None:
            return x1
        return np.hstack([x1, self.column.values(settings)[:, None]])

    def coefficient_prior(self) -> tuple[np.ndarray, np.ndarray]:
        """Prior (mean, sd) of the GP's additive coefficients, in ``design``'s columns."""
        m0, s0 = self.additive.coefficient_prior()
        if self.column is None:
            return m0, s0
        return np.append(m0, self.bubble_mean), np.append(s0, self.bubble_sd)

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        if self.surrogate is not None and len(settings):
            mean, var = self.surrogate.predict(self.design(settings), self.setup.encoder.codes(settings))
            return mean, np.sqrt(var)
        return self.additive.predict(settings, noise=False)

    def sample(self, settings: Sequence[Setting]) -> np.ndarray:
        if self.surrogate is not None:
            return self.surrogate.sample(self.design(settings), self.setup.encoder.codes(settings),
                                         self.additive.standard_normal)
        return self.additive.sample(settings, 1)[0]

