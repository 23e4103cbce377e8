"""MemoryEstimate: a per-rank peak-memory estimate of a setting (bytes), with what it states about itself.

The search's memory model takes log of it as an offset and learns the residual (search/memory.py); the run stage
skips a setting whose figure is above capacity beyond the estimate's stated error (search/skip.py); the models
record keeps each trial's figure beside its basis (search/record.py). Its optional statements are declared here
with defaults, so nothing probes for them:

    est = MemoryEstimate(peak=fn)                               # states nothing: basis "offset", no stated error
    est = MemoryEstimate(peak=fn, basis=how, residual_sd=0.05, interaction_sd=0.01)   # estimate/run.py's fake step
    est(setting) -> bytes per rank;  est.basis(setting) -> "fake step", "analytical", ...

``residual_sd`` and ``interaction_sd`` are on the log scale: how far the memory model may move a peak from the
figure, per knob value and per interaction (None: the estimate states none; the model's own priors then apply).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def _offset(setting: Mapping[str, Any]) -> str:
    return "offset"  # an estimate that does not say how it made a figure


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    peak: Callable[[Mapping[str, Any]], float]  # setting -> per-rank peak bytes
    basis: Callable[[Mapping[str, Any]], str] = _offset  # setting -> how its figure was made (the report prints it)
    residual_sd: float | None = None  # log scale: the estimate's stated error per knob value; None: none stated
    interaction_sd: float | None = None  # log scale: the same per interaction of two knobs; None: none stated

    def __call__(self, setting: Mapping[str, Any]) -> float:
        return self.peak(setting)

    @classmethod
    def of(cls, estimate: "MemoryEstimate | Callable[[Mapping[str, Any]], float] | None") -> "MemoryEstimate | None":
        """``estimate`` as a MemoryEstimate: a plain function states nothing about itself; None stays None."""
        if estimate is None or isinstance(estimate, MemoryEstimate):
            return estimate
        return cls(peak=estimate)
