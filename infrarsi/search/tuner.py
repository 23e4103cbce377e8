"""Tuner: experience-seeded, model-guided search over a KnobSpace, with an ask/tell API.

Usage::

    from infrarsi.knobs import Knob, KnobSpace
    from infrarsi.search import Tuner, Outcome
    space = KnobSpace(knobs=[Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),          # "tp": tensor parallel
                             Knob(name="recompute", kind="categorical", domain=["none", "selective", "full"]),
                             Knob(name="seq_par", kind="bool"),
                             Knob(name="mb", kind="int", domain=[1, 2, 4], means="micro_batch_size")],
                      constraints=[lambda s: None if s["tp"] > 1 or not s["seq_par"] else "sequence parallel needs tp > 1"])
    tuner = Tuner(space, memory_capacity_bytes=80 * 2**30, seed=0)   # priors optional
    s = tuner.ask()                      # a valid Setting; ask(n) gives a list of n for parallel trials
    tuner.tell(s, Outcome(status="ok", step_time_s=1.23, peak_memory_bytes=7.1e10))
    tuner.tell(s2, Outcome(status="oom"))   # all we know: peak > capacity
    tuner.best()                          # best feasible (setting, outcome) so far

*What the knobs mean* (:mod:`.meaning`): a knob named as the catalog names it (``tensor_parallel``), as users spell it
(``tp``, ``pp``, ``mbs``, ``recompute``, ``seq_par``...) or as a framework does (``--tensor-model-parallel-size``) is
that catalog knob, and ``Knob(..., means="micro_batch_size")`` says so for any other name. What the search holds about a
catalog knob then applies to it: the step-time semantics (:mod:`.semantics`), which way it moves the peak (the memory
structure's prior, :data:`.structured.STRUCTURE`), the additive models' interaction columns. None of it is needed: a
knob with no meaning starts open and what it does to time and memory is learned from the trials, OOMs and runs that
fit included (the benchmark's "opaque" arm scores the search with no meaning at all, BENCHMARKS.md).

*The parts* (:mod:`.parts`): ``Tuner(space, time=..., memory=..., steps=...)``. The time part ranks step times
(:mod:`.time`: :class:`~.time.JointTime` by default), the memory part prices P(OOM) (:mod:`.memory`:
:class:`~.memory.StructuredPeak` without a memory estimate, :class:`~.memory.CensoredPeak` with one), the steps choose
(:mod:`.steps`: :class:`~.steps.Steps`). Each is fitted on the :class:`~.history.History` of told trials and reads the
settings through one :class:`~.encoder.Encoder`; none reads the tuner.

How it proposes (each proposal's reason is kept: ``tuner.why(setting)``; the design and the picks are in
:mod:`.steps`, the scores in :mod:`.acquisition`, the pairing in :mod:`.pairing`):

1. *Initial design*: the caller's ``initial`` settings (the baseline, the experience bank's best) first,
   then diverse settings (greedy maximin in feature space) among the most promising under the priors
   and, once anything was told, the models. The design goes on until a trial runs; past ``n_initial`` trials,
   every other one is the setting with the smallest predicted peak (the structured model's features are centred on
   their domains, so with no meaning known that is where the trials point, not the corner every power is measured
   from).
2. *Acquisition*: the time part (log step time) and the memory part (log peak; an OOM is "peak > capacity") are
   refit on every trial. Score = expected improvement in log step time x P(peak < capacity x (1 - margin)), over a
   candidate pool (sampled valid settings, plus the neighbours of the best settings so far, with the moves that
   repair what a one-knob change breaks). The additive models' effects are what the report shows; the search ranks
   with one GP per target that adds a kernel on the knob values to those effects (:mod:`.surrogate` for step time,
   :mod:`.censored` for peak memory, which takes OOMs and runs that fit as censored observations), so the
   interactions an additive model cannot express are learned near the settings tried (``JointTime(bubble=True)`` adds
   the pipeline bubble's log factor as one more additive column, :mod:`.bubble`; off by default, measured in
   BENCHMARKS.md). Without a memory estimate, P(OOM) comes from :mod:`.structured` instead: the peak as a sum of
   power-law terms (weights and state, activations, a constant) whose signs and powers the trials teach, censored the
   same way, which carries the sum far from the trials. The search exploits more than it explores: the EI reads the
   time GP's sd times ``ei_sd_scale`` (0.25), and an acquisition step picks among candidates within ``trust_radius``
   (4) knob changes of the 5 fastest settings measured (far from the trials the model's ranking of fast settings is
   little better than chance: BENCHMARKS.md, ``scripts/search_diagnose.py``).
3. *Memory pricing and pairing*: a candidate priced above the P(OOM) cap (``max_p_oom``) is a last resort; when every
   candidate is one, the likeliest to fit is proposed (feasibility first). The cap tightens when the steps' own record
   says the memory model was too sure: the P(OOM) each model-guided proposal was priced at against what happened, the
   cap times (expected OOMs + 1) / (observed + 1) when that is below 1 (as it is where no knob's meaning is known and
   few trials ran). A candidate that would be fast but likely does not fit is paired with the memory savers that make it fit:
   one-knob changes the memory model predicts lower the peak, alone or two at a time; the best paired variant joins the
   pool, remembering which savers it took.
4. *Local and Thompson steps*: every ``local_every``-th model-guided proposal is the best move from the
   incumbent (its neighbourhood only: the global model ranks regions well, the last few percent are
   next to the incumbent; ``Steps(local_by_evidence=True)`` chooses local or global by a Thompson draw from each kind's
   record of proposals that beat every trial before them instead, measured and not kept); every
   ``Steps(thompson_every=k)``-th (off by default) is the fastest fitting setting under one posterior draw.
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

Knob values without a prior get uninformative ones (mean 0, sd 1 on the log scale), except those :mod:`.semantics`
speaks about for a knob with a meaning (``knob_semantics``): recompute and fp32 cost time, overlap flags and the grouped
MoE GEMM do not, sequence parallel and the distributed optimizer about break even (round sizes, sd 0.15-0.3).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..knobs import KnobSpace, Setting
from ..models import MemoryModel, TimeModel
from ..trial.memory_estimate import MemoryEstimate
from ..trial.prior import Prior
from ..trial.proposal import Proposal
from .config import TunerConfig
from .encoder import Encoder
from .history import History
from .meaning import meanings
from .memory import NoMemory, default_memory
from .outcome import Outcome
from .parts import MemoryPart, Setup, StepsPart, TimePart
from .semantics import semantic_priors
from .steps import Context, Steps
from .time import JointTime

import logging

_log = logging.getLogger(__name__)


class Tuner:
    """Ask/tell search; see the module docstring. The caller owns each trial's lifetime.

    ``time``, ``memory``, ``steps``: the parts (:mod:`.parts`); None gives the search's own (:class:`.time.JointTime`;
    :class:`.memory.StructuredPeak` without ``memory_estimate``, :class:`.memory.CensoredPeak` with one, none without a
    capacity; :class:`.steps.Steps`). A part belongs to one tuner. ``memory_estimate``: a
    :class:`~infrarsi.trial.memory_estimate.MemoryEstimate` (what it states about its error is used), or a plain
    setting -> bytes function (it states nothing)."""

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
        memory_estimate: MemoryEstimate | Callable[[Mapping[str, Any]], float] | None = None,
        time: TimePart | None = None,
        memory: MemoryPart | None = None,
        steps: StepsPart | None = None,
    ) -> None:
        self.space = space
        self.capacity = memory_capacity_bytes
        self.config = config or TunerConfig()
        self._rng = random.Random(seed)
        self.pool: list[Setting] = space.candidates(self.config.n_candidates, self._rng)
        self.encoder = Encoder(space, self.pool)
        self.derived = self.encoder.derived
        self.meanings = meanings(space)  # {knob: the catalog knob it is}: search/meaning.py
        # the caller's priors, then what the knobs mean for the values no one spoke about (config.knob_semantics)
        self.priors = list(priors or [])
        if self.config.knob_semantics:
            self.priors += semantic_priors(self.encoder.model_space, given=self.priors, mem_sd=self.config.memory_sd,
                                           meanings=self.meanings)
        self.noise_cv = noise_cv
        self.memory_estimate = memory_estimate = MemoryEstimate.of(memory_estimate)  # a plain function states nothing
        self.numerics_log: list[str] = []  # fits that failed on their numerics (the previous fit was kept)
        has_cap = bool(memory_capacity_bytes)
        if memory is not None and not has_cap and not isinstance(memory, NoMemory):
            raise ValueError(f"memory={type(memory).__name__}(...) prices P(peak > capacity): give memory_capacity_bytes")
        self.threshold = (math.log(float(memory_capacity_bytes)) + math.log1p(-self.config.oom_margin)
                          if has_cap else None)  # log bytes: a setting "fits" below it
        self.setup = Setup(space=space, encoder=self.encoder, pool=self.pool, config=self.config, priors=self.priors,
                           meanings=self.meanings, capacity=float(memory_capacity_bytes) if has_cap else None,
                           noise_cv=noise_cv, seed=seed, memory_estimate=memory_estimate, numerics=self._numerics)
        self.time: TimePart = time if time is not None else JointTime()
        self.memory: MemoryPart = memory if memory is not None else default_memory(self.setup.capacity,
                                                                                   memory_estimate)
        self.steps: StepsPart = steps if steps is not None else Steps()
        for name, part, kind in (("time", self.time, TimePart), ("memory", self.memory, MemoryPart),
                                 ("steps", self.steps, StepsPart)):
            if not isinstance(part, kind):
                raise ValueError(f"{name}={type(part).__name__}(...) is not a {kind.__name__}: subclass "
                                 f"infrarsi.search.{kind.__name__} (its optional capabilities are no-op defaults there)")
        for part in (self.time, self.memory, self.steps):
            part.bind(self.setup)
        self.history = History()
        self.pending: set[Setting] = set()
        self._proposals: dict[Setting, Proposal] = {}
        self._near: dict[Setting, list[Setting]] = {}
        self._valid: dict[Setting, bool] = {}  # validity of settings met while pairing (the rules never change)
        self._initial = [s for s in (space.complete(x) for x in initial) if space.is_valid(s)]
        self._fitted_at = -1  # history.version at the last fit
        self.overhead_s: list[float] = []  # seconds per ask (fits + scoring): part of every trial's cost

    # ----------------------------------------------------------------- tell
    def tell(self, setting: Mapping[str, Any], outcome: Outcome) -> None:
        """Record what a setting did. Any status is data; the setting is never proposed again."""
        s = self.space.complete(setting)
        self.history.add(s, outcome)
        self.pending.discard(s)

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

    def why(self, setting: Mapping[str, Any]) -> Proposal | None:
        """Why ``setting`` was proposed (kind, EI, P(OOM), predicted time, and the pairing if any); None for a setting
        this tuner did not propose (told only: a doctor trial, one proposed before a resume)."""
        return self._proposals.get(self.space.complete(setting))

    def best(self) -> tuple[Setting, Outcome] | None:
        """The fastest setting that ran (status ok), with its outcome; None before any."""
        return self.history.best()

    def top(self, k: int = 3) -> list[Setting]:
        """Up to ``k`` distinct settings that ran, best first by the time model's posterior mean (less fooled
        by one lucky measurement than the raw best)."""
        ok = list(dict.fromkeys(s for s, _ in self.history.ok()))
        if not ok:
            return []
        self.fit_models()
        mean, _ = self.predict_time(ok)
        return [ok[i] for i in np.argsort(mean, kind="stable")[:k]]

    def should_stop(self) -> bool:
        """True once the tuner has proposed its initial design and the best EI is below log(1 + mde)."""
        if len(self._proposals) < self.config.n_initial or self.last_best_ei is None:
            return False
        return self.last_best_ei < math.log1p(self.config.mde)

    @property
    def last_best_ei(self) -> float | None:
        """The best expected improvement (log scale) at the last model-guided ask (the steps' figure)."""
        return self.steps.last_best_ei

    # ------------------------------------------------------------- the models
    def fit_models(self) -> None:
        """Condition the time and memory parts on everything told so far (no-op when nothing changed).

        Memory is learned from both sides: an OOM says peak > capacity, a trial that ran says peak <=
        capacity (its peak, when reported, says exactly where). A fit that fails on its own numerics keeps
        the previous posterior, is logged in ``numerics_log`` and the search goes on."""
        if self._fitted_at == self.history.version:
            return
        self.time.fit(self.history)
        self.memory.fit(self.history)
        self._fitted_at = self.history.version

    @property
    def time_model(self) -> TimeModel | None:
        """The additive time model (effects per knob value: what the report shows), when the time part has one."""
        return self.time.additive

    @property
    def memory_model(self) -> MemoryModel | None:
        """The additive censored memory model (effects per knob value: what the report shows), fitted on every trial
        told so far; None without a capacity."""
        return self.memory.additive

    @property
    def conflicted(self) -> dict[str, str]:
        """{feature: why} of the time priors the trials contradicted (set aside)."""
        return dict(self.time.conflicted)

    def predict_time(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior of the mean log step time (log seconds), (mean, sd), as the time part ranks."""
        return self.time.predict(settings)

    def predict_memory(self, settings: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior predictive of log peak bytes, (mean, sd) per setting (offsets included), as the memory part
        prices P(OOM)."""
        return self.memory.predict([self.space.complete(s) for s in settings])

    def p_oom(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """P(peak > capacity x (1 - oom_margin)) per setting, as the search prices it now (from the memory estimate
        alone before any memory data; zeros then without one)."""
        self.fit_models()
        return self.context().p_oom([self.space.complete(s) for s in settings])

    def p_pass(self, cands: Sequence[Setting]) -> np.ndarray:
        """P(each candidate passes the loss check), as the steps price it (all ones until a trial has broken it)."""
        return self.steps.p_pass(self.history, cands)

    # ------------------------------------------------------------ internals
    def _taken(self) -> set[Setting]:
        return set(self.history.settings) | self.pending

    def _numerics(self, what: str) -> None:
        """Record a failure of the search's own numerics (``numerics_log``, and a warning): the search goes on."""
        msg = f"trial {len(self.history)}: {what}"
        self.numerics_log.append(msg)
        _log.warning(msg)

    def context(self) -> Context:
        """This ask's :class:`~.steps.Context` for the steps (and diagnoses): the candidate pool plus the neighbours of
        the best settings so far (the 5 fastest measured and the incumbent, ``top(1)``), minus what is taken."""
        self.fit_models()
        incumbent = self.top(1)
        taken = self._taken()
        extra: list[Setting] = []
        for s in dict.fromkeys([*self.history.fastest(5), *incumbent]):
            extra += self._neighbors(s)
        cands = [s for s in dict.fromkeys([*self.pool, *extra]) if s not in taken]
        return Context(space=self.space, config=self.config, history=self.history, pending=frozenset(self.pending),
                       taken=frozenset(taken), encoder=self.encoder, time=self.time, memory=self.memory,
                       threshold=self.threshold, candidates=cands, incumbent=incumbent[0] if incumbent else None,
                       neighbors=self._neighbors, is_valid=self._is_valid, numerics=self._numerics)

    def _neighbors(self, s: Setting) -> list[Setting]:
        """One-knob moves with repairs (KnobSpace.neighbors), cached: the space never changes."""
        if s not in self._near:
            self._near[s] = self.space.neighbors(s, repair=True)
        return self._near[s]

    def _is_valid(self, s: Setting) -> bool:
        v = self._valid.get(s)
        if v is None:
            v = self._valid[s] = self.space.is_valid(s)
        return v

    def _next(self) -> Setting | None:
        """The next proposal: the caller's seeds, then what the steps propose."""
        taken = self._taken()
        for s in self._initial:  # the caller's seeds first (baseline, experience bank)
            if s not in taken:
                self._proposals[s] = Proposal(kind="initial")
                return s
        out = self.steps.propose(self.context())
        if out is None:
            return None
        s, prop = out
        if s in taken or not self._is_valid(s):
            raise RuntimeError(f"the steps ({type(self.steps).__name__}) proposed {dict(s)}, which is "
                               f"{'already taken' if s in taken else 'not valid'}: a step proposes a candidate")
        self._proposals[s] = prop
        return s


def run_tuner(tuner: Tuner, objective: Callable[[Setting], Outcome], budget: int, *,
              after: Callable[[int], None] | None = None) -> History:
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
