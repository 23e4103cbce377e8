"""Outcome: what the caller of :class:`~infrarsi.search.Tuner` observed for one setting.

Failures are data, not exceptions: ``Outcome(status="oom")`` says peak > capacity and nothing else;
``crash``/``timeout``/``invalid`` say nothing about time or memory but the setting is not proposed again;
``numerics_drift`` (it ran, its loss trace broke the contract) may carry its peak, and its knob values make the
tuner less keen on settings that share them. ``status`` is a :class:`~infrarsi.trial.status.TrialStatus` (the executor's
vocabulary); its string (``"ok"``, ``"oom"``, ...) is accepted and turned into the member here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..trial.status import FINISHED, TrialStatus


@dataclass(frozen=True, kw_only=False)
class Outcome:
    status: TrialStatus  # a finished status; its string is accepted ("ok", "oom", ...)
    step_time_s: float | None = None  # steady-state step time, seconds (ok only)
    peak_memory_bytes: float | None = None  # capacity-governed peak (ok; optional)

    def __post_init__(self) -> None:
        status = TrialStatus.parse(self.status, field="Outcome.status", allowed=FINISHED)
        object.__setattr__(self, "status", status)  # frozen: the member replaces the string once, here
        if why := status.step_time_error(self.step_time_s):
            raise ValueError(f"Outcome(status={status.value!r}): {why}")
        p = self.peak_memory_bytes
        if p is not None and (not math.isfinite(p) or p <= 0):
            raise ValueError(f"Outcome.peak_memory_bytes must be a positive number of bytes or None, got {p!r}")
