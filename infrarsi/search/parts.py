"""The parts a :class:`~.tuner.Tuner` is made of, as small protocols: a time model, a memory model and the steps that
choose what to run next (the shape of Optuna's samplers and of SMAC3's model / acquisition / maximizer).

    Tuner(space, time=JointTime(), memory=StructuredPeak(), steps=Steps())     # the defaults without an estimate

Each part is bound to one tuner (``bind``: the space, its :class:`~.encoder.Encoder`, the priors, the capacity...)
and then refit on the tuner's :class:`~.history.History` whenever a trial was told. A part reads what it is given,
never the tuner itself. A part's fit that fails on its numerics raises; the tuner keeps the part's previous fit
(the part assigns its new state only once a fit has succeeded), logs it and goes on.

- :class:`TimePart`: ``predict(settings) -> (mean, sd)`` of the mean log step time (log seconds); optionally
  ``sample(settings, normal)`` (one coherent posterior draw, for Thompson steps), ``additive`` (the TimeModel of
  per-value effects the report shows), ``priors`` (the time priors as it uses them now) and ``conflicted`` (the ones
  set aside, and why). :mod:`.time` has the search's.
- :class:`MemoryPart`: ``predict(settings) -> (mean, sd)`` of log peak bytes (the scatter included), ``p_above(settings,
  threshold)`` = P(log peak > threshold), ``ready`` (it prices P(OOM): once it has learned from a trial, or from the first ask when a memory estimate is its prior; before, P is 0), ``cap``
  (the P(OOM) above which a proposal is a last resort, given the config); optionally ``additive`` (the MemoryModel the
  report shows). :mod:`.memory` has the search's.
- :class:`StepsPart`: ``propose(ctx) -> (setting, Proposal) | None``, from a :class:`~.steps.Context` that holds the
  candidates, the history, the parts and the config. :mod:`.steps` has the search's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..knobs import KnobSpace, Setting
from ..priors.prior import Prior
from .config import TunerConfig
from .encoder import Encoder
from .history import History

if TYPE_CHECKING:
    from .proposal import Proposal
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
    memory_estimate: Callable[[Mapping[str, Any]], float] | None
    numerics: Callable[[str], None]

    @property
    def model_space(self) -> KnobSpace:
        return self.encoder.model_space


@runtime_checkable
class TimePart(Protocol):
    def bind(self, setup: Setup) -> None: ...

    def fit(self, history: History) -> None: ...

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]: ...


@runtime_checkable
class MemoryPart(Protocol):
    ready: bool

    def bind(self, setup: Setup) -> None: ...

    def fit(self, history: History) -> None: ...

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]: ...

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray: ...

    def cap(self, config: TunerConfig) -> float: ...


@runtime_checkable
class StepsPart(Protocol):
    def bind(self, setup: Setup) -> None: ...

    def propose(self, ctx: "Context") -> "tuple[Setting, Proposal] | None": ...


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
