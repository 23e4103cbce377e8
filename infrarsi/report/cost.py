"""The run's cost: device-seconds per phase, what pruning and skipping saved, and what they risked.

Device-seconds are wall seconds x devices of every finished trial (a cancelled one included: its devices were held).
Phases by role: ``doctor`` (the baseline's repeats, its warm-up run ``warmup`` and its seed runs
``doctor-seed-N``), ``search`` (search trials and the baseline run again between them, ``rebaseline``),
``verification`` (the A/B pairs, ``verify``); any other role is its own phase. Each phase's device-seconds are split
into start-up and steps by the harness's clock (execute/clock.py, :func:`first_step_s`): start-up is the launch to
the first step line (interpreter, imports, dataset, model build, compile, and the first step itself), steps the
rest; a trial that never printed a step line is all start-up; a trial without a clock record
(recorded before clocks, or never launched) is left out of the split, and the table says for how many. The steps'
share ends at the last step line (:func:`last_step_s`): what follows it to the trial's end is its tail (a framework's
sleep, the teardown, the interpreters' exit; with ``budget.end_at_last_step``, execute/tail_stop.py, the quiet spell
and the stop instead), its own column, and the sentences say how many trials the harness ended at their last step and
their median tail against that of the trials that ran to their own exit.

What was saved is estimated, from the run's own trials:

- a pruned trial stopped after ``n`` of the ``N`` steps its ok trials logged (the most any logged): the steps left
  would have cost at least (N - n) x its step time's lower bound x devices (a lower bound: the bound is one);
- a skipped setting was never launched: it would have cost what a launch of this run costs, the median
  device-seconds of its OOM trials, else of its search trials (an estimate).

What they risked: a pruned or skipped setting that a later trial of the same setting showed to be good -- a pruned
one that later ran faster than the bound it was stopped at, a skipped one that later ran without running out of
memory. The search never proposes a told setting again, so such a trial comes from a resumed run, the doctor or a
verification pair; "none" is the usual answer, and it says the stops were not contradicted, not that they were right.

    c = run_cost(trials)                 # Cost: phases {phase: (trials, device_s)}, saved and risked figures
    c.rows(), c.lines()                  # the report's table rows and sentences; c.to_dict() for --json
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..execute.clock import first_step_s, last_step_s, read_clock
from ..execute.tail_stop import ENDED
from ..trial import WARMUP_ROLE, Trial, TrialStatus

PHASE = {"doctor": "doctor", "warmup": "doctor", "search": "search", "rebaseline": "search", "verify": "verification"}


@dataclass(frozen=True)
class RunCost:
    phases: dict[str, tuple[int, float]]  # phase -> (finished trials, device-seconds), in first-seen order
    pruned: list[int] = field(default_factory=list)  # trial ids
    pruned_spent_s: float = 0.0  # device-seconds the pruned trials did cost
    pruned_saved_s: float = 0.0  # at least this many device-seconds their remaining steps would have cost
    skipped: list[int] = field(default_factory=list)
    skipped_saved_s: float = 0.0  # about this many: a launch each, at the run's median cost of one
    launch_basis: str = ""  # what a skipped launch was priced at
    risked: list[str] = field(default_factory=list)  # one line per stop a later trial contradicted
    startup: dict[str, tuple[int, float]] = field(default_factory=dict)  # phase -> (trials clocked, device-seconds
    # from launch to the first step line of those trials)

    clocked_s: dict[str, float] = field(default_factory=dict)  # phase -> device-seconds of its clocked trials
    tail: dict[str, tuple[int, float]] = field(default_factory=dict)  # phase -> (trials with a step line,
    # device-seconds from their last step line to their end)
    ended_tails_s: list[float] = field(default_factory=list)  # wall seconds after the last step line, per trial the
    # harness ended at its last step (execute/tail_stop.py)
    own_tails_s: list[float] = field(default_factory=list)  # ... per ok trial that ran to its own exit
    warmups_ended: int = 0  # warm-ups the harness ended after their first step line (not in ended_tails_s)

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.phases.values())

    def rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """(phase, trials, device-s, share, start-up, tail) per phase, then the total; start-up: device-seconds from
        launch to the first step line and their share of the phase's clocked trials' device-seconds; tail: from the
        last step line to the end, likewise."""
        total = self.total_s or 1.0
        out = [(p, str(n), f"{s:.1f}", f"{s / total:.1%}", self._startup(p), self._tail(p))
               for p, (n, s) in self.phases.items()]
        return out + [("total", str(sum(n for n, _ in self.phases.values())), f"{self.total_s:.1f}", "100%",
                       self._startup(None), self._tail(None))]

    def _tail(self, phase: str | None) -> str:
        keys = [phase] if phase is not None else list(self.phases)
        n = sum(self.tail.get(k, (0, 0.0))[0] for k in keys)
        if not n:
            return "no step line" if any(k in self.startup for k in keys) else "no clock"
        s = sum(self.tail[k][1] for k in keys if k in self.tail)
        clocked = sum(self.clocked_s.get(k, 0.0) for k in keys)
        return f"{s:.1f} ({s / (clocked or 1.0):.0%})"

    def _startup(self, phase: str | None) -> str:
        keys = [phase] if phase is not None else list(self.phases)
        n = sum(self.startup.get(k, (0, 0.0))[0] for k in keys)
        if not n:
            return "no clock"
        s = sum(self.startup[k][1] for k in keys if k in self.startup)
        clocked = sum(self.clocked_s.get(k, 0.0) for k in keys)
        runs = sum(self.phases[k][0] for k in keys)
        return f"{s:.1f} ({s / (clocked or 1.0):.0%})" + (f" of {n} clocked" if n < runs else "")

    def lines(self) -> list[str]:
        total = self.total_s or 1.0
        out = []
        if self.pruned:
            out.append(f"Pruning stopped {len(self.pruned)} search trial(s) ({_list(self.pruned)}) once their steps "
                       f"showed them slower than the best so far: they cost {self.pruned_spent_s:.1f} device-s and "
                       f"saved at least {self.pruned_saved_s:.1f} device-s (the steps left, at their lower bound), "
                       f"{self.pruned_saved_s / (total + self.pruned_saved_s):.1%} of what the run would have cost.")
        else:
            out.append("Pruning stopped no trial.")
        if self.skipped:
            out.append(f"Skipping left {len(self.skipped)} setting(s) ({_list(self.skipped)}) unlaunched on their "
                       f"memory estimate: about {self.skipped_saved_s:.1f} device-s saved ({self.launch_basis}).")
        else:
            out.append("Skipping left no setting unlaunched.")
        if self.ended_tails_s:
            own = (f"; {len(self.own_tails_s)} ok trial(s) that ran to their own exit: a median "
                   f"{statistics.median(self.own_tails_s):.1f} s" if self.own_tails_s else "")
            out.append(f"The harness ended {len(self.ended_tails_s)} trial(s) at their last step (budget."
                       f"end_at_last_step: every line they are measured by in, their shutdown not run): a median "
                       f"{statistics.median(self.ended_tails_s):.1f} s from the last step line to the end{own}.")
        if self.warmups_ended:
            out.append(f"The harness ended the doctor's warm-up after its first step line ({self.warmups_ended} "
                       f"run(s): what it warms was done; its figures are not data).")
        if self.pruned or self.skipped:
            out.append("What they risked (a stopped setting a later trial showed to be good): "
                       + ("; ".join(self.risked) if self.risked else "none: no later trial contradicted a stop."))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"device_s": {p: round(s, 3) for p, (_, s) in self.phases.items()},
                "total_device_s": round(self.total_s, 3),
                "pruned": {"trials": self.pruned, "spent_device_s": round(self.pruned_spent_s, 3),
                           "saved_device_s_at_least": round(self.pruned_saved_s, 3)},
                "skipped": {"trials": self.skipped, "saved_device_s_about": round(self.skipped_saved_s, 3)},
                "risked": self.risked,
                "startup_device_s": {p: round(s, 3) for p, (_, s) in self.startup.items()},
                "tail_device_s": {p: round(s, 3) for p, (_, s) in self.tail.items()},
                "ended_at_last_step": {"trials": len(self.ended_tails_s),
                                       "median_tail_s": _median(self.ended_tails_s),
                                       "own_exit_median_tail_s": _median(self.own_tails_s),
                                       "warmups_ended_at_first_step": self.warmups_ended}}


def run_cost(trials: Sequence[Trial]) -> RunCost:
    """The cost of a run's finished trials (see the module docstring)."""
    done = [t for t in trials if t.status.is_finished()]
    phases: dict[str, tuple[int, float]] = {}
    startup: dict[str, tuple[int, float]] = {}
    clocked: dict[str, float] = {}
    tail: dict[str, tuple[int, float]] = {}
    ended: list[float] = []
    own: list[float] = []
    warmups = 0
    for t in done:
        p = _phase(t.role)
        n, s = phases.get(p, (0, 0.0))
        phases[p] = (n + 1, s + t.cost.device_s)
        up = _startup_s(t)
        if up is not None:
            n, s = startup.get(p, (0, 0.0))
            startup[p] = (n + 1, s + up * t.cost.devices)
            clocked[p] = clocked.get(p, 0.0) + t.cost.device_s
        after = _tail_s(t) if up is not None else None
        if after is not None:
            n, s = tail.get(p, (0, 0.0))
            tail[p] = (n + 1, s + after * t.cost.devices)
            if any(e.startswith(ENDED) for e in t.evidence):
                if t.role == WARMUP_ROLE:  # ended after its first step line, not its last: said apart
                    warmups += 1
                else:
                    ended.append(after)
            elif t.status is TrialStatus.OK:
                own.append(after)
    pruned = [t for t in done if t.status is TrialStatus.PRUNED]
    skipped = [t for t in done if t.status is TrialStatus.SKIPPED]
    steps = max((len(t.metrics.step_times_s) for t in done if t.status is TrialStatus.OK), default=0)
    saved = sum(max(0, steps - len(t.metrics.step_times_s)) * t.metrics.step_time_s * t.cost.devices for t in pruned)
    ooms = [t.cost.device_s for t in done if t.status is TrialStatus.OOM and t.cost.device_s > 0]
    search = [t.cost.device_s for t in done if t.role == "search" and t.cost.device_s > 0]
    launch, basis = ((statistics.median(ooms), f"the median of its {len(ooms)} OOM trial(s) per launch") if ooms else
                     (statistics.median(search), f"the median of its {len(search)} search trial(s) per launch")
                     if search else (0.0, "no launch to price it by"))
    return RunCost(phases=phases, pruned=[t.id for t in pruned], pruned_spent_s=sum(t.cost.device_s for t in pruned),
                   pruned_saved_s=saved, skipped=[t.id for t in skipped], skipped_saved_s=launch * len(skipped),
                   launch_basis=basis, risked=_contradicted(done, pruned, skipped), startup=startup,
                   clocked_s=clocked, tail=tail, ended_tails_s=ended, own_tails_s=own, warmups_ended=warmups)


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _tail_s(t: Trial) -> float | None:
    """Wall seconds from ``t``'s last step line to its end, or None (no clock record, or no step line)."""
    last = last_step_s(t.path)
    return None if last is None else max(0.0, t.cost.wall_s - last)


def _phase(role: str) -> str:
    """The phase of a trial's role (the doctor's seed runs, ``doctor-seed-N``, are the doctor's)."""
    return PHASE.get(role) or ("doctor" if role.startswith("doctor-") else role)


def _startup_s(t: Trial) -> float | None:
    """Wall seconds from ``t``'s launch to its first step line (all of its wall time when it printed none), or None
    without a clock record."""
    if not t.path or t.cost.wall_s <= 0:
        return None
    first = first_step_s(t.path)
    if first is None:
        return t.cost.wall_s if read_clock(t.path) is not None else None
    return min(first, t.cost.wall_s)


def _contradicted(done: list[Trial], pruned: list[Trial], skipped: list[Trial]) -> list[str]:
    out = []
    for p in pruned:
        for t in done:
            if (t.id > p.id and t.setting == p.setting and t.status is TrialStatus.OK
                    and t.metrics.step_time_s < p.metrics.step_time_s):
                out.append(f"trial {p.id} was pruned at >= {p.metrics.step_time_s:.4g} s/step, trial {t.id} ({t.role}) "
                           f"ran it at {t.metrics.step_time_s:.4g} s/step")
                break
    for k in skipped:
        for t in done:
            if t.id > k.id and t.setting == k.setting and t.status.ran():
                out.append(f"trial {k.id} was skipped as over capacity, trial {t.id} ({t.role}) ran it"
                           + (f" at a peak of {t.metrics.peak_memory_bytes / 2**20:.0f} MiB"
                              if t.metrics.peak_memory_bytes else ""))
                break
    return out


def _list(ids: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return f"trials {shown}" + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
