"""Trial records (defined in the types floor, :mod:`infrarsi.trial.record`)."""

from __future__ import annotations

from ..trial.record import Cost, Metrics, Trial, TrialStatus

__all__ = ["Cost", "Metrics", "Trial", "TrialStatus"]
