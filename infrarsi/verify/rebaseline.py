"""The baseline measured close in time: each search trial is compared with the latest baseline run before it.

A shared machine's speed drifts: a setting measured in a quiet minute looks faster than the baseline the doctor
measured under load, and would be crowned for the quiet. So the search runs the baseline again (role
``rebaseline``) every ``budget.rebaseline_every`` search trials, and at once when the load shifts
(execute/conditions.py ``shifted``), and tells the tuner each trial's step time on the doctor's scale:

    t_told = t_measured * (doctor's median / the latest baseline run's step time before the trial)

The scale comes from the run record alone (the latest ok ``doctor`` or ``rebaseline`` trial with a smaller id), so a
resumed run tells the tuner the same numbers. The records keep the measured times; the report shows both.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from ..execute.conditions import load, shifted
from ..trial import Trial, TrialStatus

ROLE = "rebaseline"
MIN_BETWEEN = 2  # search trials between two baseline runs a load shift asks for (a load that swings costs no more)
BASE_ROLES = ("doctor", ROLE)


def latest_baseline(t: Trial, trials: Iterable[Trial]) -> Trial | None:
    """The last ok baseline run (doctor or rebaseline) that started before ``t``."""
    best = None
    for b in trials:
        if b.role in BASE_ROLES and b.status is TrialStatus.OK and b.id < t.id and (best is None or b.id > best.id):
            best = b
    return best


def scale_of(t: Trial, trials: Iterable[Trial], reference_s: float) -> float:
    """The factor that puts ``t``'s step time on the doctor's scale (1.0 before any rebaseline run)."""
    b = latest_baseline(t, trials)
    if b is None or b.role != ROLE:
        return 1.0
    return reference_s / b.metrics.step_time_s


def rescaled(t: Trial, trials: Iterable[Trial], reference_s: float) -> Trial:
    """``t`` with its step time on the doctor's scale (an ok trial, and a pruned one's lower bound; others as they
    are)."""
    if t.status not in (TrialStatus.OK, TrialStatus.PRUNED):
        return t
    f = scale_of(t, trials, reference_s)
    if f == 1.0:
        return t
    return t.model_copy(update={"metrics": t.metrics.model_copy(update={"step_time_s": t.metrics.step_time_s * f})})


def due(trials: list[Trial], every: int) -> str | None:
    """Why the baseline should run again before the next search trial, or None: ``every`` search trials since the
    latest baseline run, or the load now shifted from the one that run saw."""
    if every <= 0:
        return None
    bases = [t for t in trials if t.role in BASE_ROLES and t.status is TrialStatus.OK]
    if not bases:
        return None
    last = max(t.id for t in bases)
    since = sum(1 for t in trials if t.role == "search" and t.id > last)
    if since >= every:
        return f"{since} search trials since the baseline last ran"
    now = load()
    if since >= MIN_BETWEEN and shifted(_load_avg(bases, last), now):
        return f"the load average moved from {_load_avg(bases, last):.1f} to {now:.1f}"
    return None


def _load_avg(bases: list[Trial], last: int) -> float | None:
    c = next((t.conditions for t in bases if t.id == last), {})
    xs = [c[k] for k in ("load_start", "load_end") if c.get(k) is not None]
    return statistics.fmean(xs) if xs else None
