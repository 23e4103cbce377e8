"""The end-to-end check: a trial's per-step figure must agree with how long the harness saw its process run, from
the launch to its exit.

The line clock (clock.py) times the measured window by the arrivals of its step lines. A trial that computes every
step before it prints its first step line, then lets the lines go at a forged pace, looks to that clock like a
trial with a long start-up. What it cannot shape is how long it ran: its steps times its per-step figure, plus its
time outside the steps (start-up, the warm-up's extra, shutdown), is its wall time (the harness's, launch to exit;
Slurm's elapsed time for a job). So the time a trial spent outside its steps is held against the baseline's, measured
on the baseline's own trials::

    outside = wall - steps x step           (steps: the last step the harness saw a line of)
    agrees  when outside <= allowance + startup + max(SLACK_S, SLACK_FRACTION x allowance)
    else    scored by (wall - allowance - startup) / steps    (the end-to-end bound)

where ``allowance`` is the baseline's outside time: in the search the largest of the doctor's (and re-baseline)
trials (``Runner.Config.outside_allowance_s``), in an A/B pair the pair's own baseline run, back to back with the
candidate on the same machine (:func:`pair_times`; the verification and the audit both score a pair by it); and
``startup`` is the contract's ``invariants.timing.startup_allowance_s`` (0 unless the user sets it): the extra
start-up a setting may spend (``torch.compile``, autotuning) without being charged for it per step. The bound is
never faster than the truth while the trial's own start-up is at least the baseline's plus ``startup``; a setting
that starts slower still is scored by it, the rest of its start-up included, as its whole run costs. A trial that
hides time outside its steps gains at most (startup + the slack) / steps per step. No measurement tells a start-up
from steps computed before their lines (docs/isolation.md): ``startup`` is trusted, up to the limit the user
locked. Nothing here makes a trial invalid: load slows a start-up, it does not forge one.

With ``budget.end_at_last_step`` (tail_stop.py) the harness ends every trial, the baseline's and the search's and the
pair's alike, a quiet spell after its last step line, so ``outside`` is its start-up plus that spell and the stop
on both sides of each comparison: the allowance is measured as the trial is. Were the baseline's left to run its
shutdown and a candidate's cut, the allowance would hold the baseline's shutdown (seconds) that the candidate no
longer spends, and a candidate could hide that much computation before its first line unseen; the other way round, a
candidate would be charged for a shutdown the baseline never paid. The runner applies the option to every role.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..trial import Trial, TrialStatus

# What a loaded machine adds to a start-up beside the baseline's (the baseline measured earlier, or just before in
# its pair): importing torch on 2 cores beside a CPU burner took ~1.5x its quiet time. A trial can hide this much.
SLACK_S = 1.0
SLACK_FRACTION = 0.5


def outside_s(t: Trial) -> float | None:
    """Seconds the trial ran outside its steps (wall - steps x step time), or None (not ok, or not clocked)."""
    m = t.metrics
    if t.status is not TrialStatus.OK or not m.step_time_s or not m.steps_run or not t.cost.wall_s:
        return None
    return t.cost.wall_s - m.steps_run * m.step_time_s


def allowance_s(baseline: Iterable[Trial]) -> float | None:
    """The baseline's time outside its steps: the largest over its ok, clocked trials (None without one)."""
    xs = [x for x in map(outside_s, baseline) if x is not None]
    return max(0.0, max(xs)) if xs else None


def bound(*, wall_s: float, steps: int | None, step_s: float | None, allowance: float | None,
          startup: float) -> tuple[float, str] | None:
    """(the end-to-end bound, one evidence line with the arithmetic) when the trial's figure disagrees with its wall
    time beyond the baseline's ``allowance``, the contract's ``startup`` and the slack, or None when it agrees (or
    cannot be checked). Seconds; ``startup``: the contract's invariants.timing.startup_allowance_s."""
    if allowance is None or not steps or not step_s or wall_s <= 0:
        return None
    outside = wall_s - steps * step_s
    slack = max(SLACK_S, SLACK_FRACTION * allowance)
    if outside <= allowance + startup + slack:
        return None
    b = max(step_s, (wall_s - allowance - startup) / steps)  # > step_s here; never faster than the lines
    free = f"the baseline's {allowance:.3f} s" + (f" + the contract's startup_allowance_s {startup:g} s"
                                                    if startup else "")
    less = f"{allowance:.3f}" + (f" - {startup:g}" if startup else "")
    return b, (f"end to end: the process ran {wall_s:.3f} s for {steps} steps of {step_s * 1000:.1f} ms "
               f"({steps * step_s:.3f} s), {outside:.3f} s outside its steps against {free} (+ {slack:.3f} s slack): "
               f"scored by ({wall_s:.3f} - {less}) s / {steps} = {b * 1000:.1f} ms per step (its steps ran before "
               f"its lines, or it started slower than the baseline by more than the contract allows)")


def pair_times(a: Trial, b: Trial, *, startup: float) -> tuple[float, float, str]:
    """(baseline's step time, candidate's step time, evidence or "") of an ok A/B pair: the candidate is held to the
    time its own baseline run spent outside its steps, back to back on the same machine, plus the contract's
    ``startup`` (invariants.timing.startup_allowance_s; :func:`bound`)."""
    ta, tb = a.metrics.step_time_s, b.metrics.step_time_s
    own = outside_s(a)
    out = bound(wall_s=b.cost.wall_s, steps=b.metrics.steps_run, step_s=tb,
                allowance=None if own is None else max(0.0, own), startup=startup)
    if out is None:
        return ta, tb, ""
    return ta, out[0], f"trials {a.id}/{b.id}: {out[1]}"


def extra_startup_s(a: Trial, b: Trial) -> float | None:
    """Seconds the candidate ``b`` of an A/B pair spent outside its steps beyond its baseline run ``a`` (its extra
    start-up; negative when it started faster), or None when either is not clocked."""
    oa, ob = outside_s(a), outside_s(b)
    return None if oa is None or ob is None else ob - oa
