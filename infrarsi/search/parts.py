"""The parts a :class:`~.tuner.Tuner` is made of, as small protocols: a time model, a memory model and the steps that
choose what to run next (the shape of Optuna's samplers and of SMAC3's model / acquisition / maximizer).

    Tuner(space, time=JointTime(), memory=StructuredPeak(), steps=Steps())     # the defaults without an estimate

Each part is bound to one tuner (``bind``: the space, its :class:`~.encoder.Encoder`, the priors, the capacity...)
and then refit on the tuner's :class:`~.history.History` whenever a trial was told. A part reads what it is given,
never the tuner itself. A part's fit that fails on its numerics raises; the tuner keeps the part's previous fit
(the part assigns its new state only once a fit has succeeded), logs it and goes on.

- :class:`TimePart`: ``predict(settings) -> (mean, sd)`` of the mean log step time (log seconds); its optional
  capabilities, declared with no-op defaults (a part that lacks one inherits "none"): ``sample(settings)`` (one
  coherent posterior draw, for Thompson steps; None: it cannot draw), ``additive`` (the TimeModel of per-value effects
  the report shows), ``priors`` (the time priors as it uses them now) and ``conflicted`` (the ones set aside, and
  why). :mod:`.time` has the search's.
- :class:`MemoryPart`: ``predict(settings) -> (mean, sd)`` of log peak bytes (the scatter included), ``p_above(settings,
  threshold)`` = P(log peak > threshold), ``ready`` (it prices P(OOM): once it has learned from a trial, or from the first ask when a memory estimate is its prior; before, P is 0), ``cap``
  (the P(OOM) above which a proposal is a last resort, given the config); optionally ``additive`` (the MemoryModel the
  report shows; None by default). :mod:`.memory` has the search's.
- :class:`StepsPart`: ``propose(ctx) -> (setting, Proposal) | None``, from a :class:`~.steps.Context` that holds the
  candidates, the history, the parts and the config; optionally ``last_best_ei`` (the stopping rule's input; None
  by default) and ``p_pass(history, cands)`` (P(each passes the loss check); all ones by default). :mod:`.steps` has
  the search's.

A part subclasses its protocol (each of the search's does) to inherit the defaults; the tuner and the steps ask a part
for a capability, never probe it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..knobs import KnobSpace, Setting
from ..trial.memory_estimate import MemoryEstimate
from ..trial.prior import Prior
from .config import TunerConfig
from .encoder import Encoder
from .history import History

if TYPE_CHECKING:
    from ..models import MemoryModel, TimeModel
    from ..trial.proposal import Proposal
    from .steps import Context

NUMERICS = (np.linalg.LinAlgError, FloatingPointError, ValueError)  # what a fit's own numerics may raise


@dataclass(frozen=True)
class Setup:
    """What a part is bound with: the tuner's space, its encoder and candidate pool, config, priors (the caller's and the semantic
    ones), the knobs' meanings (:mod:`.meaning`), the memory capacity (None: no memory model), the run-to-run noise CV
    (None: unknown), the seed, the analytical memory estimate (None: none), and where numerics failures are logged."""

    space: KnobSpace
    encoder: Encoder
    pool: Sequence[Setting]
    config: TunerConfig
    priors: Sequence[Prior]
    meanings: Mapping[str, str]
    capacity: float | None
    noise_cv: float | None
    seed: int
    memory_estimate: MemoryEstimate | None
    numerics: Callable[[str], None]

    @property
    def model_space(self) -> KnobSpace:
        return self.encoder.model_space


@runtime_checkable
class TimePart(Protocol):
    def bind(self, setup: Setup) -> None: ...

    def fit(self, history: History) -> None: ...

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]: ...

    additive: "TimeModel | None" = None
    """The additive TimeModel (effects per knob value: what the report shows); None: the part has none."""
    priors: Sequence[Prior] = ()
    """The time priors as the part uses them now (empty: it uses none)."""
    conflicted: Mapping[str, str] = MappingProxyType({})
    """{feature: why} of the time priors the trials contradicted (set aside)."""

    def sample(self, settings: Sequence[Setting]) -> np.ndarray | None:
        """One coherent posterior draw of log step time over ``settings``; None: this part cannot draw (the steps
        then propose by EI)."""
        return None


@runtime_checkable
class MemoryPart(Protocol):
    ready: bool

    def bind(self, setup: Setup) -> None: ...

    def fit(self, history: History) -> None: ...

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]: ...

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray: ...

    def cap(self, config: TunerConfig) -> float: ...

    additive: "MemoryModel | None" = None
    """The additive censored MemoryModel (effects per knob value: what the report shows); None: the part has none."""


@runtime_checkable
class StepsPart(Protocol):
    def bind(self, setup: Setup) -> None: ...

    def propose(self, ctx: "Context") -> "tuple[Setting, Proposal] | None": ...

    last_best_ei: float | None = None
    """The best expected improvement (log scale) at the last model-guided ask; None: none yet (or never computed)."""

    def p_pass(self, history: History, cands: Sequence[Setting]) -> np.ndarray:
        """P(each candidate passes the loss check), as the steps price it: all ones by default."""
        return np.ones(len(cands))


def guarded(setup: Setup, what: str, fit: Callable[[], Any]) -> bool:
    """Run ``fit``; on a numerics failure log it (the part keeps its previous fit) and return False."""
    try:
        fit()
        return True
    except NUMERICS as e:
        if isinstance(e, ValueError) and "offsets" in str(e):
            raise  # a caller error, not numerics
        setup.numerics(f"{what} fit failed ({type(e).__name__}: {e}); kept the previous fit")
        return False


class Bound:
    """Mixin: ``bind`` once (a part holds one tuner's state); ``self.setup`` afterwards."""

    setup: Setup

    def bind(self, setup: Setup) -> None:
        if getattr(self, "setup", None) is not None:
            raise ValueError(f"this {type(self).__name__} is already part of a Tuner; give each Tuner its own")
        self.setup = setup
        self._bound()

    def _bound(self) -> None:
        """Build what the part needs from ``self.setup`` (models, priors)."""
