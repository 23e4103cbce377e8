"""Outcome: what the caller of :class:`~infrarsi.search.Tuner` observed for one setting.

Failures are data, not exceptions: ``Outcome(status="oom")`` says peak > capacity and nothing else;
``crash``/``timeout``/``invalid`` say nothing about time or memory but the setting is not proposed again;
``numerics_drift`` (it ran, its loss trace broke the contract) may carry its peak, and its knob values make the
tuner less keen on settings that share them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STATUSES = ("ok", "oom", "timeout", "crash", "contract_violation", "numerics_drift", "invalid", "cancelled")


@dataclass(frozen=True, kw_only=False)
class Outcome:
    status: str
    step_time_s: float | None = None  # steady-state step time, seconds (ok only)
    peak_memory_bytes: float | None = None  # capacity-governed peak (ok; optional)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Outcome.status={self.status!r}: use one of {', '.join(STATUSES)}")
        if self.status == "ok":
            t = self.step_time_s
            if t is None or not math.isfinite(t) or t <= 0:
                raise ValueError(f"Outcome(status='ok') needs a finite step_time_s > 0, got {t!r}; "
                                 f"report a run without a step time as status='crash'")
        elif self.status == "oom" and self.step_time_s is not None:
            raise ValueError("Outcome(status='oom') has no step_time_s: an OOM says only that peak > capacity")
        p = self.peak_memory_bytes
        if p is not None and (not math.isfinite(p) or p <= 0):
            raise ValueError(f"Outcome.peak_memory_bytes must be a positive number of bytes or None, got {p!r}")
