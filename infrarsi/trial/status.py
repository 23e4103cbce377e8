"""TrialStatus: what became of one launch of one setting -- the one vocabulary of a trial's state.

The executor records it (:class:`~infrarsi.trial.record.Trial`), the search is told it
(:class:`~infrarsi.search.Outcome`), the report and the bank read it back. It is a ``StrEnum``: a member equals
and hashes as its value (``TrialStatus.OK == "ok"``) and prints as it, so records on disk (JSON, sqlite) keep the
plain strings they always held. Code asks a member what it means (``ran()``, ``is_memory_evidence()``) or
compares members (``status is TrialStatus.OOM``); strings are turned into members once, at the edge, by
:meth:`TrialStatus.parse`. This module imports nothing from infrarsi, so every layer may import it.

    TrialStatus.parse("oom", field="Outcome.status")  # -> TrialStatus.OOM
    TrialStatus.parse("ko", field="Outcome.status")   # ValueError: Outcome.status='ko': use one of running, ok, ...
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum


class TrialStatus(StrEnum):
    RUNNING = "running"  # launched, not finished (in-flight record)
    OK = "ok"  # ran every step; its step time (and peak, when measured) are data
    OOM = "oom"  # out of memory: a censored memory observation, peak > capacity
    TIMEOUT = "timeout"
    CRASH = "crash"
    CONTRACT_VIOLATION = "contract_violation"  # the setting would change the task; never launched
    NUMERICS_DRIFT = "numerics_drift"  # ran every step, but its loss trace breaks the contract's tolerance
    INVALID = "invalid"  # violates a knob-space constraint or the framework's own validation
    CANCELLED = "cancelled"
    # Stopped by the harness to save device time (neither a failure of the setting nor a measurement of it):
    PRUNED = "pruned"  # stopped after some measured steps: slower than the incumbent; step_time_s is a lower bound
    SKIPPED = "skipped"  # never launched: the memory estimate puts its peak above capacity beyond the estimate's error

    def is_finished(self) -> bool:
        """Every status but ``running``."""
        return self is not TrialStatus.RUNNING

    def is_failure(self) -> bool:
        """Finished and not ``ok`` (``numerics_drift`` included: it ran, but its result breaks the contract); a trial
        the harness stopped to save time (``pruned``, ``skipped``: :meth:`saved`) is no failure."""
        return self not in (TrialStatus.OK, TrialStatus.RUNNING) and not self.saved()

    def saved(self) -> bool:
        """Stopped by the harness to save device time: ``pruned`` (slower than the incumbent, a lower bound on its
        step time) or ``skipped`` (estimated not to fit, never launched). Never promoted, never verified."""
        return self in (TrialStatus.PRUNED, TrialStatus.SKIPPED)

    def over_capacity(self) -> bool:
        """Says peak > capacity: an OOM (measured), or a setting skipped on its memory estimate (estimated)."""
        return self in (TrialStatus.OOM, TrialStatus.SKIPPED)

    def ran(self) -> bool:
        """Ran every step (``ok``, ``numerics_drift``): its peak memory, when reported, is an observation."""
        return self in (TrialStatus.OK, TrialStatus.NUMERICS_DRIFT)

    def fit_in_memory(self) -> bool:
        """Ran without running out of memory: every step (:meth:`ran`), or past its warm-up until it was pruned (a
        step's peak is reached in its first optimizer steps): peak <= capacity, its peak, when reported, the peak."""
        return self.ran() or self is TrialStatus.PRUNED

    def is_memory_evidence(self) -> bool:
        """Says something about peak memory: it ran, or ran until pruned (peak <= capacity, or the peak itself) or ran
        out (> capacity), or
        its estimate put it above capacity beyond the estimate's error (``skipped``: censored like an OOM)."""
        return self.over_capacity() or self.fit_in_memory()

    def step_time_error(self, step_time_s: float | None, *, field: str = "step_time_s") -> str | None:
        """What is wrong with ``step_time_s`` (seconds or None) for a trial of this status, or None: ``ok`` needs a
        finite step time > 0 (a run without one is a crash); ``pruned`` one too (its lower bound); ``oom`` and
        ``skipped`` have none (all they say is peak > capacity)."""
        t = step_time_s
        if self is TrialStatus.OK and (t is None or not math.isfinite(t) or t <= 0):
            return f"an ok trial needs a finite {field} > 0, got {t!r}; report a run without a step time as crash"
        if self is TrialStatus.PRUNED and (t is None or not math.isfinite(t) or t <= 0):
            return f"a pruned trial needs a finite {field} > 0 (the lower bound it was stopped at), got {t!r}"
        if self in (TrialStatus.OOM, TrialStatus.SKIPPED) and t is not None:
            return f"an {self.value} trial has no {field} (got {t!r}): it says only that peak > capacity"
        return None

    @classmethod
    def parse(cls, value: object, *, field: str = "status",
              allowed: Iterable[TrialStatus] | None = None) -> TrialStatus:
        """``value`` (a member or its string) as a member of ``allowed`` (default: all); else a one-line ValueError
        that names ``field`` and the values it takes."""
        ok = tuple(cls) if allowed is None else tuple(allowed)
        try:
            status = cls(value)
        except (ValueError, TypeError):
            status = None
        if status not in ok:
            shown = value.value if isinstance(value, TrialStatus) else value
            raise ValueError(f"{field}={shown!r}: use one of {', '.join(s.value for s in ok)}")
        return status


FINISHED: tuple[TrialStatus, ...] = tuple(s for s in TrialStatus if s.is_finished())  # what a finished trial may say
