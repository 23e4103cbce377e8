"""Predicted vs observed: the time and memory models refit on every trial on disk.

The models are the run's own (TimeModel, MemoryModel over the adapter's knob space, with the priors
search.json recorded); the fit is in-sample, so the plot shows how well the model explains the trials,
and ``search.json``'s ``predicted_s`` (made before each trial ran) shows how well it predicted them.
Intervals are central 90% posterior predictive intervals: exp(mean +- 1.645 sd) on the log scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..adapters import get_adapter
from ..execute.trial import Trial, TrialStatus
from ..models import MemoryModel, TimeModel
from ..priors.prior import Z90, Prior
from .load import RunData


@dataclass(frozen=True)
class TimeRow:
    trial: int
    observed_s: float
    mean_s: float
    lo_s: float
    hi_s: float
    proposed_s: float | None  # the tuner's prediction before the trial ran (search.json), if any


@dataclass(frozen=True)
class MemoryRow:
    trial: int
    status: str  # ok | oom
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
    skipped: list[int] = field(default_factory=list)  # trials the knob space cannot encode


def priors_of(data: RunData) -> list[Prior]:
    out = []
    for p in data.search.get("priors", []) or []:
        try:
            out.append(Prior.model_validate(p))
        except ValueError:
            continue  # a prior written by another version: the fit runs without it
    return out


def refit(data: RunData) -> Fit | None:
    """None when there is nothing to fit (no ok trial) or the adapter cannot build the space."""
    try:
        space = get_adapter(data.contract.workload.adapter).knob_space(data.contract)
    except Exception:  # e.g. a Megatron launch script that is not on this machine
        return None
    cap = float(data.contract.hardware.memory_capacity_bytes)
    pool: list[Trial] = []
    skipped = []
    for t in data.trials:
        if t.status not in (TrialStatus.OK, TrialStatus.OOM):
            continue
        if all(t.setting.get(k.name, k.default) in k.domain for k in space.knobs):
            pool.append(t)
        else:  # a value the space no longer has (e.g. a kernel dropped after failing verification)
            skipped.append(t.id)
    ok = [t for t in pool if t.status is TrialStatus.OK]
    if not ok:
        return None
    priors = priors_of(data)
    cv = max(data.noise.cv, 1e-3) if data.noise else None  # the run's own noise prior, as the tuner had it
    tm = TimeModel(space, priors=priors, noise_cv=cv).fit([t.setting for t in ok], [t.metrics.step_time_s for t in ok])
    mean, sd = tm.predict([t.setting for t in ok])
    proposals = data.search.get("proposals", {}) or {}
    time_rows = [TimeRow(t.id, t.metrics.step_time_s, math.exp(m), math.exp(m - Z90 * s), math.exp(m + Z90 * s),
                         (proposals.get(str(t.id)) or {}).get("predicted_s"))
                 for t, m, s in zip(ok, mean, sd)]
    mem_pool = [t for t in pool if t.status is TrialStatus.OOM or t.metrics.peak_memory_bytes]
    mem_rows: list[MemoryRow] = []
    if mem_pool:
        mm = MemoryModel(space, cap, priors=priors).fit(
            [t.setting for t in mem_pool],
            [t.metrics.peak_memory_bytes if t.status is TrialStatus.OK else None for t in mem_pool],
            [t.status is TrialStatus.OOM for t in mem_pool])
        mmean, msd = mm.predict([t.setting for t in mem_pool])
        poom = mm.p_oom([t.setting for t in mem_pool])
        mem_rows = [MemoryRow(t.id, t.status.value,
                              t.metrics.peak_memory_bytes if t.status is TrialStatus.OK else None,
                              math.exp(m), math.exp(m - Z90 * s), math.exp(m + Z90 * s), float(p))
                    for t, m, s, p in zip(mem_pool, mmean, msd, poom)]
    return Fit(time=time_rows, memory=mem_rows, capacity_bytes=cap, skipped=skipped)
