"""Predicted vs observed: the tuner's own fitted models, as the run stage saved them.

the search record's ``models.fitted`` block (written by :func:`infrarsi.search.record.models_record` at the end of
the search) holds, per setting the tuner was told, its posterior predictive of log step time and log peak
memory and P(OOM). Nothing is refit here: the plot shows how well the tuner's models explain the trials
they saw (in-sample), and the search record's ``predicted_s`` (made before each trial ran) shows how well it
predicted them. Intervals are central 90% posterior predictive intervals: exp(mean +- 1.645 sd), log scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..knobs import Setting
from ..trial.prior import Z90
from ..trial.status import TrialStatus
from .load import RunData


@dataclass(frozen=True)
class TimeRow:
    trial: int
    observed_s: float
    mean_s: float
    lo_s: float
    hi_s: float
    proposed_s: float | None  # the tuner's prediction before the trial ran (the search record), if any


@dataclass(frozen=True)
class MemoryRow:
    trial: int
    status: TrialStatus  # ok | oom
    observed_bytes: float | None  # None for an OOM: all it says is peak > capacity
    mean_bytes: float
    lo_bytes: float
    hi_bytes: float
    p_oom: float


@dataclass(frozen=True)
class Fit:
    time: list[TimeRow]
    memory: list[MemoryRow]
    capacity_bytes: float
    skipped: list[int] = field(default_factory=list)  # ok/oom trials the tuner was never told (no saved prediction)


def saved_fit(data: RunData) -> Fit | None:
    """The tuner's fit from the search record; None when the run saved none (not searched yet, or written by a
    version that did not save it: rerun `infrarsi run`)."""
    models = data.search.models
    fitted = models.fitted if models is not None else None
    if fitted is None:
        return None
    tf, mf = fitted.time, fitted.memory  # the models' own block (search/record.py)
    proposals = data.search.proposals
    cap = float(models.capacity_bytes or data.contract.hardware.memory_capacity_bytes)
    time_rows, mem_rows, skipped = [], [], []
    for t in data.trials:
        if t.status not in (TrialStatus.OK, TrialStatus.OOM) or t.role not in ("doctor", "search"):
            continue
        key = Setting(t.setting).key()
        if key not in tf and key not in mf:
            skipped.append(t.id)
            continue
        if t.status is TrialStatus.OK and key in tf and t.metrics.step_time_s:
            m, s = tf[key]
            proposed = proposals.get(str(t.id))
            time_rows.append(TimeRow(t.id, t.metrics.step_time_s, math.exp(m), math.exp(m - Z90 * s),
                                     math.exp(m + Z90 * s), proposed.predicted_s if proposed else None))
        if key in mf and (t.status is TrialStatus.OOM or t.metrics.peak_memory_bytes):
            m, s, p = mf[key]
            mem_rows.append(MemoryRow(t.id, t.status,
                                      t.metrics.peak_memory_bytes if t.status is TrialStatus.OK else None,
                                      math.exp(m), math.exp(m - Z90 * s), math.exp(m + Z90 * s), float(p)))
    if not time_rows:
        return None
    return Fit(time=time_rows, memory=mem_rows, capacity_bytes=cap, skipped=skipped)
