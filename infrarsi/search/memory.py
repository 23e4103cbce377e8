"""The search's memory parts (:class:`~.parts.MemoryPart`): what a :class:`~.tuner.Tuner` prices P(OOM) with.

Each learns from the three kinds of memory evidence: a measured peak, an OOM (peak > capacity) and a run that reported
no peak (peak <= capacity). Each also keeps the additive censored MemoryModel (``models/memory.py``: one effect per knob
value, what the report shows), fitted when read where it does not price P(OOM) itself.

- :class:`StructuredPeak` (the default without a memory estimate): the peak as a sum of power-law terms whose powers
  the trials teach (:mod:`.structured`); the powers start at what the knobs' meanings say (:data:`.structured.STRUCTURE`,
  :data:`.structured.SAVERS`, by :mod:`.meaning`), at 0 for a knob with none;
- :class:`CensoredPeak` (the default with an estimate): log(estimate) as an offset, the additive model's residual
  effects, and once ``min_peaks`` peaks are measured one censored GP on top (:mod:`.censored`);
- :class:`AdditivePeak`: the additive censored model alone (an ablation);
- :class:`NoMemory`: no capacity given: nothing is priced (P(OOM) = 0).

    m = default_memory(capacity, estimate); m.bind(setup); m.fit(history)
    m.predict(settings)                  # log peak bytes: (mean, sd), the scatter included
    m.p_above(settings, log_threshold)   # P(log peak > threshold); 0 until ``m.ready`` (from the first ask with an
                                         # estimate: its prior; else once a memory row is told)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..knobs import Setting
from scipy.special import ndtr

from ..models import MemoryModel
from ..models.memory import SIGMA_LOC
from ..trial.memory_estimate import MemoryEstimate
from .censored import ABOVE, BELOW, OBS, CensoredSurrogate
from .config import TunerConfig
from .history import History
from .meaning import interactions
from .outcome import Outcome
from .parts import Bound, MemoryPart, guarded
from .structured import STRUCTURE_WITH_SAVERS, StructuredMemory, anchors, structure_prior

SCATTER_SD = math.exp(SIGMA_LOC)  # log scale: the memory model's prior scatter of a peak around its mean (0.1)
RESIDUAL_MEM_SD = 0.1  # log scale: how far a knob value may move the peak beyond what the arithmetic says
# (the analytical estimate is within ~10% on every simulated layout; 0.3 priced most near-capacity settings
# of the MoE workload at P(OOM) ~ 0.4 and the search never tried them)


def memory_targets(rows: Sequence[tuple[Setting, Outcome]]) -> tuple[np.ndarray, np.ndarray]:
    """Per memory row: its kind (OBS: a measured peak, ABOVE: an OOM, BELOW: ran without a peak) and its log
    peak bytes (NaN where none was measured), each (n,)."""
    kind = np.array([ABOVE if o.status.over_capacity() else OBS if o.peak_memory_bytes else BELOW for _, o in rows])
    peak = np.array([math.log(o.peak_memory_bytes) if o.status.fit_in_memory() and o.peak_memory_bytes else np.nan
                     for _, o in rows])
    return kind, peak


class _PeakBase(Bound, MemoryPart):
    """The additive censored MemoryModel (effects per knob value), fitted on every memory row when read."""

    ready = False

    def __init__(self, *, from_runs_without_peak: bool = True, prior_from_estimate: bool = True) -> None:
        """``from_runs_without_peak``: a trial that ran without reporting its peak says "peak <= capacity" (False:
        such trials say nothing about memory, an ablation). ``prior_from_estimate``: with a memory estimate, price
        from the first ask, before any memory row, by the estimate alone (:meth:`_from_estimate`; False: P(OOM) is 0
        until a trial is told, as before, an ablation)."""
        self.from_runs_without_peak = from_runs_without_peak
        self.prior_from_estimate = prior_from_estimate

    def _bound(self) -> None:
        su = self.setup
        est = su.memory_estimate
        # With an analytical memory estimate, log(estimate) is an offset and the memory coefficients are residuals: the
        # priors' memory effects are already in the estimate, so they start at 0. An estimate may say how far off it
        # is (its ``residual_sd``, ``interaction_sd``, log scale: the fake-step estimate of estimate/run.py,
        # measured on real trials); else RESIDUAL_MEM_SD and the model's own interaction prior.
        res_sd = float(est.residual_sd) if est is not None and est.residual_sd is not None else RESIDUAL_MEM_SD
        inter_sd = est.interaction_sd if est is not None else None
        priors = ([p.model_copy(update={"mem_mean": 0.0, "mem_sd": res_sd}) for p in su.priors] if est
                  else list(su.priors))
        self._model = MemoryModel(su.model_space, su.capacity, priors=priors, seed=su.seed,
                                  main_sd=su.config.memory_sd, interactions=interactions(su.model_space, su.meanings),
                                  **({"interaction_sd": float(inter_sd)} if est and inter_sd else {}))
        self.log_capacity = self._model.log_capacity
        # Before any memory row, an estimate is the prior: log peak ~ N(log estimate, res_sd^2 + scatter^2) per
        # setting, so the first asks are priced by it (without one nothing is priced until a trial is told).
        self._prior_sd = math.hypot(res_sd, SCATTER_SD)
        self.ready = est is not None and self.prior_from_estimate
        self._stale = False  # trials told since the additive model was last fitted
        self._rows: list[tuple[Setting, Outcome]] = []
        self._log_est: dict[Setting, float] = {}

    @property
    def additive(self) -> MemoryModel:
        """The additive censored memory model (effects per knob value: what the report shows), fitted on every memory
        row told so far."""
        if self._stale:
            self._fit_additive()
        return self._model

    def _fit_additive(self) -> None:
        self._stale = False
        rows = self._rows
        if not rows:
            return
        ss = [s for s, _ in rows]
        guarded(self.setup, "memory model", lambda: self._model.fit(
            ss, [o.peak_memory_bytes for _, o in rows], [o.status.over_capacity() for _, o in rows],
            offsets=self.offsets(ss), fits=[o.status.fit_in_memory() for _, o in rows]))

    def _additive_fitted(self) -> bool:
        m = self._model
        return m.n_obs + m.n_censored + m.n_fit > 0

    def offsets(self, settings: Sequence[Setting]) -> np.ndarray | None:
        """log(analytical peak bytes) per setting, cached; None without an estimate."""
        est = self.setup.memory_estimate
        if est is None:
            return None
        out = np.empty(len(settings))
        for i, s in enumerate(settings):
            v = self._log_est.get(s)
            if v is None:
                v = self._log_est[s] = math.log(max(est(s), 1.0))
            out[i] = v
        return out

    def fit(self, history: History) -> None:
        self._rows = history.memory_rows(from_runs_without_peak=self.from_runs_without_peak)
        if self._rows:
            self._fit(self._rows)
        self.ready = (bool(self._rows) and self._priced()) or self._unfitted_prior()

    def _unfitted_prior(self) -> bool:
        """Whether the estimate alone prices now: an estimate, ``prior_from_estimate``, and no model fitted yet."""
        return self.prior_from_estimate and self.setup.memory_estimate is not None and not self._priced()

    def _from_estimate(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        """The prior before any memory row: (log estimate, the estimate's error with the scatter), each (n,)."""
        off = self.offsets(settings)
        assert off is not None
        return off, np.full(len(settings), self._prior_sd)

    def _fit(self, rows: list[tuple[Setting, Outcome]]) -> None:
        self._fit_additive()

    def _priced(self) -> bool:
        """Whether a fitted model prices P(OOM) now."""
        return self._additive_fitted()

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        if self._unfitted_prior():
            return self._from_estimate(settings)
        return self._model.predict(settings, offsets=self.offsets(settings))

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray:
        if not self.ready:
            return np.zeros(len(settings))
        if self._unfitted_prior():
            mean, sd = self._from_estimate(settings)
            return ndtr((mean - threshold) / sd)
        return self._model.p_above(settings, threshold, offsets=self.offsets(settings))

    def cap(self, config: TunerConfig) -> float:
        """``max_p_oom``; ``max_p_oom_without_peaks`` while the additive model prices P(OOM) and no trial has reported
        its peak (it is then a classifier of "fit" / "did not", less sure near the boundary)."""
        return config.max_p_oom_without_peaks if self._model.n_obs == 0 else config.max_p_oom


class AdditivePeak(_PeakBase):
    """The additive censored model alone (an ablation)."""


class StructuredPeak(_PeakBase):
    """A sum of power-law terms with learned powers (:mod:`.structured`); the additive model prices P(OOM) only until
    the structured one has fitted, and is fitted when read after that (its fit was ~0.9 s of a 2.5 s ask)."""

    terms: StructuredMemory | None = None

    def __init__(self, *, structure: tuple[dict[str, float], ...] = STRUCTURE_WITH_SAVERS,
                 from_runs_without_peak: bool = True, anchored: bool = False) -> None:
        """``structure``: the powers' prior means per term, by meaning (:data:`.structured.STRUCTURE_WITH_SAVERS`;
        ``()``: every power starts at 0). ``anchored``: a knob with a meaning is measured from its first value (a size
        of 1 splits nothing, a flag off saves nothing), as before 4044059, and only a knob with none from the middle of
        its domain; off (every column centred): cold, catalog names, variants 0-15 at 20 trials, anchored was +0.042
        [+0.006, +0.085] on one seed set and -0.025 [-0.071, +0.019] on another (docs/notes/search.md), not told
        apart from noise."""
        super().__init__(from_runs_without_peak=from_runs_without_peak)
        self.structure, self.anchored = structure, anchored

    def _bound(self) -> None:
        super()._bound()
        su = self.setup
        self.prior = structure_prior(su.model_space, self.structure, meanings=su.meanings) if self.structure else None
        named = [k for k in su.meanings if k in su.model_space] if self.anchored else []
        self.anchor = anchors(su.model_space, named)  # (q,): added to the centred features; 0 for opaque knobs

    def phi(self, settings: Sequence[Setting]) -> np.ndarray:
        """The structured model's features, (n, q): :func:`.structured.features` plus :attr:`anchor`."""
        return self.setup.encoder.features(settings) + self.anchor

    def _fit(self, rows: list[tuple[Setting, Outcome]]) -> None:
        guarded(self.setup, "memory terms", lambda: self._fit_terms(rows))
        self._stale = True
        if self.terms is None:
            self._fit_additive()

    def _fit_terms(self, rows: list[tuple[Setting, Outcome]]) -> None:
        """Refit the terms from their last coefficients (kept when the fit fails)."""
        kind, peak = memory_targets(rows)
        prev = self.terms.theta if self.terms is not None else None
        fit = StructuredMemory.fit(self.phi([s for s, _ in rows]), kind, peak, self.log_capacity,
                                   start=prev, seed=len(rows), prior=self.prior)
        if fit is not None:
            self.terms = fit

    def _priced(self) -> bool:
        return self.terms is not None or self._additive_fitted()

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        if self.terms is not None and len(settings):
            mean, var = self.terms.predict(self.phi(settings))
            return mean, np.sqrt(var + self.terms.sigma ** 2)
        return super().predict(settings)

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray:
        if self.ready and self.terms is not None and len(settings):
            return self.terms.p_above(self.phi(settings), threshold)
        return super().p_above(settings, threshold)

    def cap(self, config: TunerConfig) -> float:
        return config.max_p_oom if self.terms is not None else super().cap(config)


class CensoredPeak(_PeakBase):
    """The additive model (with the estimate as offset) until ``min_peaks`` peaks are measured, then one censored GP
    (:mod:`.censored`) on top of it."""

    gp: CensoredSurrogate | None = None

    def __init__(self, *, min_peaks: int = 3, from_runs_without_peak: bool = True,
                 prior_from_estimate: bool = True) -> None:
        """``min_peaks``: measured peaks before the GP prices P(OOM): without peaks (step-time-only trials) its scale
        and rates are guesses; on the perturbed clusters in that mode the search scored 0.734 of the optimum at 30
        trials with the GP pricing from the first trial, 0.822 with 3."""
        super().__init__(from_runs_without_peak=from_runs_without_peak, prior_from_estimate=prior_from_estimate)
        self.min_peaks = min_peaks

    def _fit(self, rows: list[tuple[Setting, Outcome]]) -> None:
        self._fit_additive()
        guarded(self.setup, "memory GP", lambda: self._fit_gp(rows))

    def _fit_gp(self, rows: list[tuple[Setting, Outcome]]) -> None:
        self.gp = None
        kind, peak = memory_targets(rows)
        if (kind == OBS).sum() < self.min_peaks:
            return
        x1, codes, off = self._gp_rows([s for s, _ in rows])
        mm = self._model
        self.gp = CensoredSurrogate.fit(x1, codes, off, kind, peak, *mm.coefficient_prior(), mm.log_capacity,
                                        ordered=self.setup.encoder.ordered)

    def _gp_rows(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The GP's inputs: the additive model's design rows (n, p + 1), knob codes (n, K), log offsets (n,)."""
        x1, off = self._model.design_rows(settings, self.offsets(settings))
        return x1, self.setup.encoder.codes(settings), off

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        if self.gp is not None and len(settings):
            mean, var = self.gp.predict(*self._gp_rows(settings))
            return mean, np.sqrt(var + self.gp.noise ** 2)
        return super().predict(settings)

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray:
        if self.ready and self.gp is not None and len(settings):
            return self.gp.p_above(*self._gp_rows(settings), threshold)
        return super().p_above(settings, threshold)


class NoMemory(Bound, MemoryPart):
    """No capacity: nothing is priced."""

    ready = False
    additive = None

    def fit(self, history: History) -> None:
        pass

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(len(settings)), np.ones(len(settings))

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray:
        return np.zeros(len(settings))

    def cap(self, config: TunerConfig) -> float:
        return config.max_p_oom


def default_memory(capacity: float | None, estimate: MemoryEstimate | None) -> Bound:
    """The memory part a Tuner gets when none is given: none without a capacity; the structured model without an
    estimate; the censored GP on the estimate's residual with one."""
    if capacity is None:
        return NoMemory()
    return CensoredPeak() if estimate is not None else StructuredPeak()
