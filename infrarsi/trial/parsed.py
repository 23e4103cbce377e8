"""What an adapter read from a finished trial's output (:class:`ParsedRun`): the status, the metrics and the log
lines that decided it. Imports nothing from infrarsi but the floor."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .record import Metrics
from .status import TrialStatus

__all__ = ["ParsedRun"]


class ParsedRun(BaseModel):
    """What an adapter read from a finished trial's output."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: TrialStatus
    metrics: Metrics = Metrics()
    evidence: list[str] = []
    reason: str = ""
    exit_explained: str = ""
    """With status ok: why the process's abnormal end (a signal, an exit status) came after a complete run and
    is not a failure, in the adapter's own words; empty otherwise, and such an end makes the trial a crash."""
