"""Tuner: experience-seeded, model-guided search over a KnobSpace, with an ask/tell API.

Usage::

    from infrarsi.knobs import Knob, KnobSpace
    from infrarsi.search import Tuner, Outcome
    space = KnobSpace(knobs=[Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),
                             Knob(name="recompute", kind="categorical", domain=["none", "selective", "full"]),
                             Knob(name="seq_par", kind="bool")],
                      constraints=[lambda s: None if s["tp"] > 1 or not s["seq_par"] else "sequence parallel needs tp > 1"])
    tuner = Tuner(space, memory_capacity_bytes=80 * 2**30, seed=0)   # priors optional
    s = tuner.ask()                      # a valid Setting; ask(n) gives a list of n for parallel trials
    tuner.tell(s, Outcome(status="ok", step_time_s=1.23, peak_memory_bytes=7.1e10))
    tuner.tell(s2, Outcome(status="oom"))   # all we know: peak > capacity
    tuner.best()                          # best feasible (setting, outcome) so far

How it proposes (each proposal's reason is kept: ``tuner.why(setting)``; the design and the picks are in
:mod:`._steps`, the pairing in :mod:`._pairing`, the memory models' fits in :mod:`._memory`):

1. *Initial design*: the caller's ``initial`` settings (the baseline, the experience bank's best) first,
   then diverse settings (greedy maximin in feature space) among the most promising under the priors
   and, once anything was told, the models. The design goes on until a trial runs; past ``n_initial`` trials,
   every other one is the setting with the smallest predicted peak.
2. *Acquisition*: a global TimeModel (log step time) and a censored MemoryModel (log peak; an OOM is
   "peak > capacity") are refit on every trial. Score = expected improvement in log step time x
   P(peak < capacity x (1 - margin)), over a candidate pool (sampled valid settings, plus the
   neighbours of the best settings so far, with the moves that repair what a one-knob change breaks).
   The models are additive (their effects are what the report shows); the search ranks with one GP per
   target that adds a kernel on the knob values to those effects (:mod:`.surrogate` for step time,
   :mod:`.censored` for peak memory, which takes OOMs and runs that fit as censored observations), so the
   interactions an additive model cannot express (pipeline bubble, a peak that is a sum of weights and
   activations) are learned near the settings tried (``time_bubble`` adds the bubble's log factor as one more
   additive column, :mod:`.bubble`; off by default, measured in BENCHMARKS.md). Without a memory estimate,
   P(OOM) comes from :mod:`.structured` instead: the peak as a sum of power-law terms (weights and state, activations, a
   constant) whose powers the trials teach, censored the same way, which carries the sum far from the trials.
   The search exploits more than it explores: the EI reads the time GP's sd times ``ei_sd_scale`` (0.25), and an
   acquisition step picks among candidates within ``trust_radius`` (4) knob changes of the 5 fastest settings
   measured. Far from the trials the model's ranking of fast settings is little better than chance, and its
   picks there were the search's slowest and OOM trials (BENCHMARKS.md, ``scripts/search_diagnose.py``).
3. *Memory pricing and pairing*: a candidate that would be fast but likely does not fit is paired with
   the memory savers that make it fit: one-knob changes the memory model predicts lower the peak,
   alone or two at a time; the best paired variant joins the pool, remembering which savers it took.
4. *Local and Thompson steps*: every ``local_every``-th model-guided proposal is the best move from the
   incumbent (its neighbourhood only: the global model ranks regions well, the last few percent are
   next to the incumbent); every ``thompson_every``-th (off by default) is the fastest fitting setting under one
   posterior draw.
5. *Loss check*: a setting that ran but broke the loss referee (``numerics_drift``) is never proposed again,
   its peak is memory data like any trial's that ran, and it puts a price on the knob values it had: a
   candidate's P(pass) is the product over its values of 1 - d / (d + p + 1), d and p the trials with that value
   that drifted and that passed. A value every passing run shares (the baseline's) costs almost nothing; a value
   seen only in drifting runs halves a candidate's score per such run's worth of evidence, until a run with it
   passes. The score is multiplied by P(pass).
6. *Stopping*: ``should_stop()`` once the best expected improvement falls below the minimum detectable
   effect (the doctor's), after the initial design.
7. *Prior check*: after every refit, a time prior the trials contradict is set aside (widened to ``time_sd``):
   a prior-free fit puts it ``prior_conflict_z`` sds away, or the trials favour an open prior on its knob by a
   Bayes factor over e^``prior_conflict_log_bf`` (:mod:`.prior_check`). ``Tuner.conflicted`` says which and why.
   A confident prior is self-confirming (the search exploits it and never runs what it steers away from), so a
   *probe* step first runs the strongest such claim's alternative that no trial has tried (``prior_probe``).

Knobs outside the catalog, or without a prior, get uninformative priors (mean 0, sd 1 on the log scale), except the
values :mod:`.semantics` speaks about (``knob_semantics``): recompute and fp32 cost time, overlap flags and the grouped
MoE GEMM do not, sequence parallel and the distributed optimizer about break even (round sizes, sd 0.15-0.3).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..knobs import KnobSpace, Setting
from ..models import MemoryModel, TimeModel, is_ordered
from ..priors.prior import Prior
from .acquisition import expected_improvement, hamming
from .bubble import BubbleColumn
from .config import TunerConfig
from .derived import derived_knobs
from .outcome import Outcome
from .prior_check import evidence_conflicts, z_conflicts
from ._memory import RAN, fit_memory_gp, fit_memory_terms
from ._pairing import pairings
from ._steps import design_step, pick
from .proposal import Proposal, Scored
from .residual import Residual
from .surrogate import Surrogate
from .censored import CensoredSurrogate
from .semantics import semantic_priors
from .structured import StructuredMemory, features

_log = logging.getLogger(__name__)
RESIDUAL_MEM_SD = 0.1  # log scale: how far a knob value may move the peak beyond what the arithmetic says
# (the analytical estimate is within ~10% on every simulated layout; 0.3 priced most near-capacity settings
# of the MoE workload at P(OOM) ~ 0.4 and the search never tried them)


class Tuner:
    """Ask/tell search; see the module docstring. The caller owns each trial's lifetime."""

    def __init__(
        self,
        space: KnobSpace,
        *,
        memory_capacity_bytes: float | None = None,
        priors: Sequence[Prior] | None = None,
        seed: int = 0,
        initial: Sequence[Mapping[str, Any]] = (),
        noise_cv: float | None = None,
        config: TunerConfig | None = None,
        memory_estimate: Callable[[Mapping[str, Any]], float] | None = None,
    ) -> None:
        self.space = space
        self.capacity = memory_capacity_bytes
        self.config = config or TunerConfig()
        self._rng = random.Random(seed)
        self._pool = space.candidates(self.config.n_candidates, self._rng)
        # The models see only knobs that carry information: a knob the others determine (data parallel =
        # world / (tp * pp * cp)) would be collinear with them and smear their effects.
        self.derived = derived_knobs(space, self._pool)
        self._bubble = BubbleColumn.for_space(space, self._pool) if self.config.time_bubble else None
        model_space = KnobSpace([k for k in space.knobs if k.name not in self.derived])
        self._model_space = model_space
        # the caller's priors, then what the knobs mean for the values no one spoke about (config.knob_semantics)
        self.priors = list(priors or [])
        if self.config.knob_semantics:
            self.priors += semantic_priors(model_space, given=self.priors, mem_sd=self.config.memory_sd)
        self.time_model = TimeModel(model_space, priors=self.priors, noise_cv=noise_cv, seed=seed,
                                    main_sd=self.config.time_sd)
        # The same model with no priors: what the trials alone say, to catch priors they contradict.
        self._free_time = (TimeModel(model_space, noise_cv=noise_cv, seed=seed, main_sd=self.config.time_sd)
                           if self.priors and self.config.prior_conflict_z > 0 else None)
        self.conflicted: dict[str, str] = {}  # feature -> why its time prior was set aside
        self.noise_cv = noise_cv
        # the GPs' coordinates: each model knob's value index
        self._code_index = [(k.name, {v: i for i, v in enumerate(k.domain)}) for k in model_space.knobs]
        # ordered knobs (TP 1/2/4/8): the GPs count the steps between two values
        self._ordered = np.array([is_ordered(k) for k in model_space.knobs], dtype=bool)
        self.residual: Residual | None = None
        self.surrogate: Surrogate | None = None  # the joint time GP (config.joint)
        self.memory_gp: CensoredSurrogate | None = None  # the censored memory GP (config.memory_gp)
        self.memory_terms: StructuredMemory | None = None  # the sum of power-law terms (config.memory_structured)
        # With an analytical memory estimate, log(estimate) is an offset and the memory coefficients are
        # residuals: the priors' memory effects are already in the estimate, so they start at 0.
        # An estimate may say how far off it is (``residual_sd``, ``interaction_sd`` attributes, log scale: the
        # fake-step estimate of estimate/run.py, measured on real trials); else RESIDUAL_MEM_SD and the model's
        # own interaction prior.
        self.memory_estimate = memory_estimate
        res_sd = float(getattr(memory_estimate, "residual_sd", RESIDUAL_MEM_SD))
        inter_sd = getattr(memory_estimate, "interaction_sd", None)
        mem_priors = ([p.model_copy(update={"mem_mean": 0.0, "mem_sd": res_sd}) for p in self.priors]
                      if memory_estimate else self.priors)
        self._memory_model = (MemoryModel(model_space, memory_capacity_bytes, priors=mem_priors, seed=seed,
                                          main_sd=self.config.memory_sd,
                                          **({"interaction_sd": float(inter_sd)} if memory_estimate and inter_sd else {}))
                              if memory_capacity_bytes else None)
        self._memory_stale = False  # trials told since the additive memory model was last fitted
        self._n_memory_rows = 0  # trials that said something about memory, at the last fit_models
        self._log_est: dict[Setting, float] = {}
        self.history: list[tuple[Setting, Outcome]] = []
        self.pending: set[Setting] = set()
        self._told: set[Setting] = set()
        self._why: dict[Setting, Proposal] = {}
        self._near: dict[Setting, list[Setting]] = {}
        self._initial = [s for s in (space.complete(x) for x in initial) if space.is_valid(s)]
        self._dirty = True
        self.last_best_ei: float | None = None
        self._asks = 0
        self._probed: set[str] = set()  # knobs whose strongest prior claim a probe has tested
        self.overhead_s: list[float] = []  # seconds per ask (fits + scoring): part of every trial's cost
        self._code_rows: dict[Setting, np.ndarray] = {}  # _codes' rows
        self._enc_rows: dict[Setting, np.ndarray] = {}  # _encode's rows
        self._valid: dict[Setting, bool] = {}  # validity of settings met while pairing (the rules never change)
        self.numerics_log: list[str] = []  # fits that failed on their numerics (the previous fit was kept)

    # ----------------------------------------------------------------- tell
    def tell(self, setting: Mapping[str, Any], outcome: Outcome) -> None:
        """Record what a setting did. Any status is data; the setting is never proposed again."""
        s = self.space.complete(setting)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"tell() needs an Outcome, got {type(outcome).__name__}")
        self.history.append((s, outcome))
        self._told.add(s)
        self.pending.discard(s)
        self._dirty = True

    # ------------------------------------------------------------------ ask
    def ask(self, n: int | None = None) -> Setting | list[Setting]:
        """One valid setting not tried or pending (``n`` given: a list of up to ``n`` for parallel trials)."""
        t0 = time.perf_counter()
        k = 1 if n is None else n
        out: list[Setting] = []
        for _ in range(k):
            s = self._next()
            if s is None:
                break
            self.pending.add(s)
            out.append(s)
        self.overhead_s.append(time.perf_counter() - t0)
        if n is None:
            if not out:
                raise RuntimeError("the search space is exhausted: every valid setting was tried")
            return out[0]
        return out

    def why(self, setting: Mapping[str, Any]) -> dict[str, Any]:
        """Why ``setting`` was proposed: kind, EI, P(OOM), predicted time, and the pairing if any."""
        p = self._why.get(self.space.complete(setting))
        return p.to_dict() if p else {}

    def best(self) -> tuple[Setting, Outcome] | None:
        """The fastest setting that ran (status ok), with its outcome; None before any."""
        ok = [(s, o) for s, o in self.history if o.status == "ok"]
        return min(ok, key=lambda so: so[1].step_time_s) if ok else None

    def top(self, k: int = 3) -> list[Setting]:
        """Up to ``k`` distinct settings that ran, best first by the time model's posterior mean (less fooled
        by one lucky measurement than the raw best)."""
        ok = list(dict.fromkeys(s for s, o in self.history if o.status == "ok"))
        if not ok:
            return []
        self.fit_models()
        mean, _ = self.predict_time(ok)
        return [ok[i] for i in np.argsort(mean, kind="stable")[:k]]

    def should_stop(self) -> bool:
        """True once the tuner has proposed its initial design and the best EI is below log(1 + mde)."""
        if len(self._why) < self.config.n_initial or self.last_best_ei is None:
            return False
        return self.last_best_ei < math.log1p(self.config.mde)

    # ------------------------------------------------------------ internals
    def _taken(self) -> set[Setting]:
        return self._told | self.pending

    def fit_models(self) -> None:
        """Condition the time and memory models on everything told so far (no-op when nothing changed).

        Memory is learned from both sides: an OOM says peak > capacity, a trial that ran says peak <=
        capacity (its peak, when reported, says exactly where). A fit that fails on its own numerics keeps
        the previous posterior, is logged in ``numerics_log`` and the search goes on. Once the structured memory model
        prices P(OOM), the additive one (``memory_model``, what the report shows) is fitted when read."""
        if not self._dirty:
            return
        settings = [s for s, _ in self.history]
        times = [o.step_time_s if o.status == "ok" else math.nan for _, o in self.history]
        if any(o.status == "ok" for _, o in self.history):
            self._guarded("time model", lambda: self.time_model.fit(settings, times))
            if self.priors and (self.config.prior_conflict_z > 0 or self.config.prior_conflict_log_bf > 0):
                self._guarded("prior check", lambda: self._set_aside_conflicts(settings, times))
            self._guarded("time GP", self._fit_time_gp)
        if self._memory_model is not None:
            rows = self._memory_rows()
            self._n_memory_rows = len(rows)
            if rows:
                if self.config.memory_structured and self.memory_estimate is None:
                    self._guarded("memory terms", lambda: fit_memory_terms(self, rows))
                    # The additive model prices P(OOM) only until the structured one has fitted; after that it is
                    # what the report shows, fitted when read (its fit was ~0.9 s of a 2.5 s ask).
                    self._memory_stale = True
                    if self.memory_terms is None:
                        self._fit_additive_memory()
                else:
                    self._fit_additive_memory()
                    if self.config.memory_gp:
                        self._guarded("memory GP", lambda: fit_memory_gp(self, rows))
        self._dirty = False

    @property
    def memory_model(self) -> MemoryModel | None:
        """The additive censored memory model (effects per knob value: what the report shows), fitted on every trial
        told so far; None without a capacity."""
        if self._memory_stale:
            self._fit_additive_memory()
        return self._memory_model

    def _fit_additive_memory(self) -> None:
        self._memory_stale = False
        rows = self._memory_rows()
        if not rows:
            return
        ss = [s for s, _ in rows]
        self._guarded("memory model", lambda: self._memory_model.fit(
            ss, [o.peak_memory_bytes for _, o in rows], [o.status == "oom" for _, o in rows],
            offsets=self._mem_offsets(ss), fits=[o.status in RAN for _, o in rows]))

    def _memory_gp_rows(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The memory GP's inputs per setting: the memory model's design rows (n, p + 1), knob codes (n, K), log
        offsets (n,)."""
        x1, off = self.memory_model.design_rows(settings, self._mem_offsets(settings))
        return x1, self._codes(settings), off

    def _set_aside_conflicts(self, settings: list[Setting], times: list[float]) -> None:
        """Set aside the time priors the trials contradict (:mod:`.prior_check`: a prior-free fit
        ``prior_conflict_z`` sds away, or a Bayes factor over ``prior_conflict_log_bf`` for an open prior on the
        knob): each widens to ``time_sd`` and the time model is refit."""
        cfg = self.config
        current = self._time_priors()
        open_ = [q for q in current if q.feature not in self.conflicted]
        new: dict[str, str] = {}
        if self._free_time is not None:
            self._free_time.fit(settings, times)
            new.update(z_conflicts(self._free_time.effects(), open_, z=cfg.prior_conflict_z, widen_sd=cfg.time_sd,
                                   n=len(settings)))
        if cfg.prior_conflict_log_bf > 0:
            ran = sum(1 for t in times if math.isfinite(t))
            fitted = self.time_model.n_obs == ran  # the time model was just fitted on these trials (not kept stale)
            found = evidence_conflicts(self._time_model_with, current, settings, times, widen_sd=cfg.time_sd,
                                       log_bf=cfg.prior_conflict_log_bf,
                                       stated=self.time_model.posterior.log_evidence if fitted else None)
            new.update({f: why for f, why in found.items() if f not in new})
        if not new:
            return
        self.conflicted.update(new)
        for f, why in new.items():
            _log.info("time prior for %s set aside: %s", f, why)
        self.time_model = self._time_model_with(self._time_priors())
        self.time_model.fit(settings, times)

    def _time_priors(self) -> list[Prior]:
        """The priors the time model uses: as given, the set-aside ones widened to ``time_sd``."""
        return [q.model_copy(update={"time_sd": self.config.time_sd}) if q.feature in self.conflicted else q
                for q in self.priors]

    def _time_model_with(self, priors: list[Prior]) -> TimeModel:
        return TimeModel(self._model_space, priors=priors, noise_cv=self.noise_cv, seed=self.time_model.seed,
                         main_sd=self.config.time_sd)

    def _memory_rows(self) -> list[tuple[Setting, Outcome]]:
        """Trials that say something about memory: OOMs and every trial that ran (one whose loss trace broke the
        contract ran every step: its peak is a measurement like any other)."""
        if self.config.memory_from_ok:
            return [(s, o) for s, o in self.history if o.status == "oom" or o.status in RAN]
        return [(s, o) for s, o in self.history if o.status == "oom" or (o.status in RAN and o.peak_memory_bytes)]

    def p_pass(self, cands: Sequence[Setting]) -> np.ndarray:
        """P(each candidate passes the loss check), from the trials that ran (module docstring, 5); all ones
        until one has broken it."""
        ran = [(s, o.status == "numerics_drift") for s, o in self.history if o.status in RAN]
        if not self.config.learn_drift or not any(d for _, d in ran):
            return np.ones(len(cands))
        counts: dict[tuple[str, Any], list[int]] = {}
        names = [k.name for k in self._model_space.knobs]
        for s, drifted in ran:
            for n in names:
                counts.setdefault((n, s[n]), [0, 0])[0 if drifted else 1] += 1
        out = np.ones(len(cands))
        for i, c in enumerate(cands):
            for n in names:
                d, p = counts.get((n, c[n]), (0, 0))
                if d:
                    out[i] *= 1.0 - d / (d + p + 1.0)
        return out

    def _guarded(self, what: str, fit: Callable[[], Any]) -> None:
        try:
            fit()
        except (np.linalg.LinAlgError, FloatingPointError, ValueError) as e:
            if isinstance(e, ValueError) and "offsets" in str(e):
                raise  # a caller error, not numerics
            self._numerics(f"{what} fit failed ({type(e).__name__}: {e}); kept the previous fit")

    def _numerics(self, what: str) -> None:
        """Record a failure of the search's own numerics (``numerics_log``, and a warning): the search goes on."""
        msg = f"trial {len(self.history)}: {what}"
        self.numerics_log.append(msg)
        _log.warning(msg)

    def _fit_time_gp(self) -> None:
        """The joint time GP (``joint``), else the GP on the additive model's residuals."""
        self.residual = None
        self.surrogate = None
        if not self.config.residual:
            return
        ok = [(s, o.step_time_s) for s, o in self.history if o.status == "ok"]
        if self.config.joint:
            ss = [s for s, _ in ok]
            self.surrogate = Surrogate.fit(self._xt(ss), self._codes(ss), np.log([t for _, t in ok]),
                                           *self._time_prior(), noise_sd=self.noise_cv, ordered=self._ordered)
            return
        mean, _ = self.time_model.predict([s for s, _ in ok], noise=False)
        r = np.log([t for _, t in ok]) - mean
        self.residual = Residual.fit(self._codes([s for s, _ in ok]), r, self.noise_cv or self.time_model.sigma)

    def _codes(self, settings: Sequence[Setting]) -> np.ndarray:
        """Value index per model knob: (n, K) ints, the GPs' coordinates."""
        return _cached_rows(self._code_rows, settings, lambda ss: np.array(
            [[ix[s[name]] for name, ix in self._code_index] for s in ss],
            dtype=np.int64).reshape(len(ss), len(self._code_index)))

    def _encode(self, settings: Sequence[Setting]) -> np.ndarray:
        """``space.encode``: (n, len(space.feature_names))."""
        return _cached_rows(self._enc_rows, settings, self.space.encode)

    def _xt(self, settings: Sequence[Setting]) -> np.ndarray:
        """The time GP's additive design: the time model's with an intercept column, then the bubble column when there
        is one: (n, p + 1 [+ 1])."""
        x1 = self.time_model.design_rows(settings)[0]
        if self._bubble is None:
            return x1
        return np.hstack([x1, self._bubble.values(settings)[:, None]])

    def _time_prior(self) -> tuple[np.ndarray, np.ndarray]:
        """Prior (mean, sd) of the time GP's additive coefficients, in ``_xt``'s columns."""
        m0, s0 = self.time_model.coefficient_prior()
        if self._bubble is None:
            return m0, s0
        return np.append(m0, self.config.time_bubble_mean), np.append(s0, self.config.time_bubble_sd)

    def predict_time(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior of the mean log step time (log seconds), (mean, sd): the joint time GP's, else the additive model
        plus the residual GP."""
        if self.surrogate is not None and len(settings):
            mean, var = self.surrogate.predict(self._xt(settings), self._codes(settings))
            return mean, np.sqrt(var)
        mean, sd = self.time_model.predict(settings, noise=False)
        if self.residual is not None and len(settings):
            gm, gv = self.residual.predict(self._codes(settings))
            mean, sd = mean + gm, np.sqrt(sd * sd + gv)
        return mean, sd

    def _has_memory_data(self) -> bool:
        """Some trial said something about memory and a memory model has been fitted on it."""
        mm = self._memory_model
        return mm is not None and self._n_memory_rows > 0 and (
            self.memory_terms is not None or mm.n_obs + mm.n_censored + mm.n_fit > 0)

    def p_oom(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """P(peak > capacity x (1 - oom_margin)) per setting, as the search prices it now (zeros before any memory
        data)."""
        self.fit_models()
        return self._p_oom([self.space.complete(s) for s in settings])

    def _p_oom(self, cands: Sequence[Setting]) -> np.ndarray:
        if not self._has_memory_data():
            return np.zeros(len(cands))
        if self.memory_terms is not None and len(cands):
            return self.memory_terms.p_above(features(self._model_space, list(cands)),
                                             self._memory_model.log_capacity + math.log1p(-self.config.oom_margin))
        if self.memory_gp is not None and len(cands):
            return self.memory_gp.p_above(*self._memory_gp_rows(cands),
                                          self._memory_model.log_capacity + math.log1p(-self.config.oom_margin))
        return self.memory_model.p_oom(cands, margin=self.config.oom_margin, offsets=self._mem_offsets(cands))

    def _mem_offsets(self, settings: Sequence[Setting]) -> np.ndarray | None:
        """log(analytical peak bytes) per setting, cached; None without an estimate."""
        if self.memory_estimate is None:
            return None
        out = np.empty(len(settings))
        for i, s in enumerate(settings):
            v = self._log_est.get(s)
            if v is None:
                v = self._log_est[s] = math.log(max(self.memory_estimate(s), 1.0))
            out[i] = v
        return out

    def predict_memory(self, settings: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior predictive of log peak bytes, (mean, sd) per setting (offsets included): the memory GP's when it
        prices P(OOM) (``memory_gp``, once ``memory_gp_min_peaks`` peaks are in), else the additive model's."""
        ss = [self.space.complete(s) for s in settings]
        if self.memory_terms is not None and ss:
            mean, var = self.memory_terms.predict(features(self._model_space, ss))
            return mean, np.sqrt(var + self.memory_terms.sigma ** 2)
        if self.memory_gp is not None and ss:
            mean, var = self.memory_gp.predict(*self._memory_gp_rows(ss))
            return mean, np.sqrt(var + self.memory_gp.noise ** 2)
        return self.memory_model.predict(ss, offsets=self._mem_offsets(ss))

    def _pool_now(self, incumbent: list[Setting]) -> tuple[list[Setting], np.ndarray]:
        """The candidate pool plus the neighbours of the best settings so far (the 5 fastest measured and
        the ``incumbent``, ``top(1)``), minus what is taken."""
        taken = self._taken()
        extra: list[Setting] = []
        for s in dict.fromkeys([*self._fastest(5), *incumbent]):
            extra += self._neighbors(s)
        cands = [s for s in dict.fromkeys([*self._pool, *extra]) if s not in taken]
        return cands, self._encode(cands)

    def _fastest(self, k: int) -> list[Setting]:
        """The settings of the ``k`` fastest trials that ran, by measured step time (ties: the earlier trial)."""
        ok = sorted((o.step_time_s, i) for i, (_, o) in enumerate(self.history) if o.status == "ok")
        return [self.history[i][0] for _, i in ok[:k]]

    def _neighbors(self, s: Setting) -> list[Setting]:
        """One-knob moves with repairs (KnobSpace.neighbors), cached: the space never changes."""
        if s not in self._near:
            self._near[s] = self.space.neighbors(s, repair=True)
        return self._near[s]

    def _next(self) -> Setting | None:
        """The next proposal: the caller's seeds, then the initial design, then a model-guided step (acquisition,
        paired, local or Thompson; see the module docstring)."""
        taken = self._taken()
        for s in self._initial:  # the caller's seeds first (baseline, experience bank)
            if s not in taken:
                self._why[s] = Proposal(kind="initial")
                return s
        self.fit_models()
        incumbent = self.top(1)
        cands, x = self._pool_now(incumbent)
        if not cands:
            return None
        has_time = any(o.status == "ok" for _, o in self.history)
        if len(self.history) + len(self.pending) < self.config.n_initial or not has_time:
            return design_step(self, cands, x, taken)
        sc = self._score(cands, x, taken)
        j, kind = pick(self, sc, incumbent)
        s = sc.cands[j]
        prop = Proposal(kind=kind, ei=float(sc.ei[j]), p_oom=float(sc.p_oom[j]), predicted_s=float(np.exp(sc.mean[j])),
                        p_drift=float(1.0 - sc.p_pass[j]) if sc.p_pass[j] < 1.0 else None)
        if s in sc.paired:
            src, savers = sc.paired[s]
            prop.kind, prop.paired_from, prop.savers = "paired", src.to_dict(), savers
        self._why[s] = prop
        return s

    def _score(self, cands: list[Setting], x: np.ndarray, taken: set[Setting]) -> "Scored":
        """Every candidate's acquisition: EI x P(fit) x P(pass the loss check), the pool extended with the paired
        variants of fast candidates that probably do not fit; -inf above the P(OOM) cap (unless nothing is under
        it); halved next to a pending trial."""
        mean, sd = self.predict_time(cands)
        p_oom = self._p_oom(cands)
        best = math.log(self.best()[1].step_time_s)
        scale = self.config.ei_sd_scale
        ei = expected_improvement(mean, sd * scale, best)
        # Pairing: fast but unlikely to fit -> add variants with memory savers.
        paired = pairings(self, cands, ei, p_oom, taken)
        in_pool = set(cands)
        pc = [p for p, _ in paired if p not in in_pool]
        if pc:
            pm, ps = self.predict_time(pc)
            cands = cands + pc
            x = np.vstack([x, self._encode(pc)])
            mean, sd = np.concatenate([mean, pm]), np.concatenate([sd, ps])
            ei = np.concatenate([ei, expected_improvement(pm, ps * scale, best)])
            p_oom = np.concatenate([p_oom, self._p_oom(pc)])
        # The loss check: values of settings that broke it make a candidate less likely to pass.
        p_pass = self.p_pass(cands)
        acq = ei * (1.0 - p_oom) * p_pass
        # The stopping rule reads the whole posterior: the exploitation scale picks among candidates, it does not
        # make the search think it has less to gain.
        full = acq if scale == 1.0 else expected_improvement(mean, sd, best) * (1.0 - p_oom) * p_pass
        self.last_best_ei = float(np.max(full))
        # Safety: a candidate the memory model expects to OOM is a last resort, whatever its EI.
        fits = p_oom <= self._cap()
        if fits.any():
            acq = np.where(fits, acq, -np.inf)
        # Batch diversity: a candidate one knob away from a pending one counts half.
        for s in self.pending:
            acq = np.where(hamming(x, self._encode([s])[0]) <= 2, acq * 0.5, acq)
        return Scored(cands, acq, ei, mean, p_oom, p_pass, {p: why for p, why in paired})

    def _cap(self) -> float:
        """The P(OOM) above which a proposal is a last resort: stricter until a trial has reported its peak, while the
        additive model prices it (the structured one's intervals are already wide where no peak says more)."""
        if self._memory_model is not None and self.memory_terms is None and self.memory_model.n_obs == 0:
            return self.config.max_p_oom_without_peaks
        return self.config.max_p_oom

    def _is_valid(self, s: Setting) -> bool:
        v = self._valid.get(s)
        if v is None:
            v = self._valid[s] = self.space.is_valid(s)
        return v


def _cached_rows(cache: dict[Setting, np.ndarray], settings: Sequence[Setting],
                 build: Callable[[list[Setting]], np.ndarray]) -> np.ndarray:
    """``build(settings)`` (one row per setting), with each setting's row built once and kept in ``cache``: a
    setting's codes never change, and the same ~4,000 candidates are scored on every ask."""
    new = [s for s in dict.fromkeys(settings) if s not in cache]
    if new:
        cache.update(zip(new, build(new)))
    return np.stack([cache[s] for s in settings]) if len(settings) else build([])


def run_tuner(tuner: Tuner, objective: Callable[[Setting], Outcome], budget: int, *,
              after: Callable[[int], None] | None = None) -> list[tuple[Setting, Outcome]]:
    """Drive ``tuner`` for ``budget`` trials against ``objective`` (benchmarks and tests); ``after(n)`` is called once
    the n-th trial of this call is told."""
    for n in range(1, budget + 1):
        try:
            s = tuner.ask()
        except RuntimeError:
            break
        tuner.tell(s, objective(s))
        if after is not None:
            after(n)
    return tuner.history
