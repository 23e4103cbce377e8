"""Pruning: stop a search trial once its measured steps so far show it slower than the incumbent by more than the
detectable effect, so that a slow setting costs a few steps, not its whole contract.

While a trial runs, the harness's clock stamps each step line (clock.py, :meth:`LineClock.step_lines`); the gap
between two consecutive step lines that arrived in different reads is one step's time, as :func:`clock.measure`
times the whole window. After ``k`` gaps of the contract's measured window (``warmup+1 ..``), with ``g_i`` their
logs (seconds, this trial's scale)::

    m      = median(g_1..g_k)                               the run's step time so far (log seconds)
    s_run  = 1.2533 * sd(g) / sqrt(k) * t_{k-1} / z        the median's sampling error, from the measured gaps
                                                            (t_{k-1}: Student's 1 - alpha quantile; 1.2533 = the
                                                            median's efficiency against the mean)
    s      = sqrt(cv^2 + sd_inc^2 + s_run^2)                cv: the doctor's run-to-run CV (this run's offset);
                                                            sd_inc: the incumbent's own figure's (cv / sqrt(runs))
    bound  = m - z * s                                      z = z_{1 - alpha}: a one-sided lower bound
    prune  when bound > log(incumbent) + log(1 + mde)       slower by more than the detectable effect

The gaps' own spread enters the bound, so a loaded machine (late lines, bursts) widens it; the median is taken
over the gaps, so one late line moves it by at most one rank (it never prunes on one late line); ``min_gaps`` gaps
are needed before any look. The same figure, ``exp(bound)``, is the pruned trial's recorded step time: a lower
bound, told to the time model as a censored observation (models/time.py), never as a time. ``alpha`` is spent
over the looks (Bonferroni: alpha / looks, a look per new gap), so the chance that a trial as fast as the incumbent
is pruned stays under ``alpha`` however many lines it prints (``scripts/bench_prune.py`` draws it: CV 1-15%).

    target = Target(incumbent_s=0.41, incumbent_sd=0.02, cv=0.03, mde=0.05, warmup_steps=2, measured_steps=8)
    judge(gaps_s, target) -> Decision | None     # gaps_s: the window's paced gaps so far, seconds, in order
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import t_quantile

MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # sd of a normal sample's median / sd of its mean, large samples (1.2533)
MIN_GAPS = 3  # gaps before the first look: two give no spread worth the name


@dataclass(frozen=True, kw_only=True)
class Target:
    """What one search trial is held against while it runs. Seconds on the trial's own (measured) scale."""

    incumbent_s: float  # the incumbent's step time, drift-corrected onto this trial's scale
    incumbent_sd: float  # sd of the log of that figure (the doctor's CV / sqrt(the incumbent's runs))
    cv: float  # the doctor's run-to-run CV: sd of one run's log step time about its setting's
    mde: float  # the doctor's minimum detectable effect (relative): slower by more than this is prunable
    warmup_steps: int  # the contract's window: steps warmup+1 .. warmup+measured are timed
    measured_steps: int
    last_step: int | None = None  # the trial's last step anything reads (the window's end or the loss check's last):
    # a look there saves nothing (the end at the last step ends it as soon) and would turn its measured time into a
    # bound and skip its loss check, so none is made (None: no such step stated)
    alpha: float = 0.05  # one-sided: the chance a trial as fast as the incumbent is pruned, over all its looks
    min_gaps: int = MIN_GAPS
    incumbent: str = ""  # which trial (for the evidence line)

    def __post_init__(self) -> None:
        for name in ("incumbent_s", "cv", "mde"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"Target.{name} must be a positive number, got {v!r}")
        if not (math.isfinite(self.incumbent_sd) and self.incumbent_sd >= 0):
            raise ValueError(f"Target.incumbent_sd must be >= 0, got {self.incumbent_sd!r}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"Target.alpha must be in (0, 0.5), got {self.alpha!r}")
        if self.min_gaps < 2:
            raise ValueError(f"Target.min_gaps must be >= 2 (a spread needs two gaps), got {self.min_gaps!r}")

    @property
    def looks(self) -> int:
        """How many looks the window allows: one per gap from ``min_gaps`` to its last (at least 1)."""
        return max(1, self.measured_steps - self.min_gaps + 1)

    @property
    def threshold_s(self) -> float:
        """The step time a trial must be shown slower than: incumbent x (1 + mde), seconds."""
        return self.incumbent_s * (1 + self.mde)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """Why a trial was stopped: its lower bound cleared the threshold. Seconds."""

    gaps: int  # gaps of the measured window it was judged on
    step: int  # the step line that brought the last of them
    median_s: float  # the median gap
    bound_s: float  # the one-sided lower bound of its step time (> threshold_s): the recorded, censored step time
    threshold_s: float  # incumbent x (1 + mde)
    spread: float  # sd of the log gaps
    z: float  # the quantile used

    def line(self, target: Target) -> str:
        """One evidence line with the arithmetic."""
        who = f" ({target.incumbent})" if target.incumbent else ""
        return (f"pruned at step {self.step}: median of {self.gaps} measured gaps {self.median_s * 1000:.1f} ms, "
                f"lower bound {self.bound_s * 1000:.1f} ms (z {self.z:.2f} x sqrt(run CV {target.cv:.1%}^2 + "
                f"incumbent {target.incumbent_sd:.1%}^2 + gaps' {self.spread:.1%} spread)) > incumbent "
                f"{target.incumbent_s * 1000:.1f} ms{who} x (1 + mde {target.mde:.1%}) = "
                f"{self.threshold_s * 1000:.1f} ms; its step time is at least the bound")


def bound(gaps_s: Sequence[float], target: Target) -> tuple[float, float, float, float]:
    """(median, lower bound, sd of the log gaps, z) of the step time from ``gaps_s`` (seconds, >= 2 of them)."""
    logs = [math.log(g) for g in gaps_s]
    k = len(logs)
    alpha = target.alpha / target.looks
    z = statistics.NormalDist().inv_cdf(1 - alpha)
    spread = statistics.stdev(logs)
    s_run = MEDIAN_EFFICIENCY * spread / math.sqrt(k) * t_quantile(1 - alpha, k - 1) / z
    s = math.sqrt(target.cv ** 2 + target.incumbent_sd ** 2 + s_run ** 2)
    m = statistics.median(logs)
    return math.exp(m), math.exp(m - z * s), spread, z


def judge(gaps_s: Sequence[float], target: Target, *, step: int = 0) -> Decision | None:
    """A Decision to stop the trial, or None to let it run. ``gaps_s``: the paced gaps of its measured window so far
    (seconds, in order); ``step``: the step line that brought the last one (for the record)."""
    if target.last_step is not None and step >= target.last_step:
        return None  # its last step line is in: nothing is left to save, and its time is a measurement
    gaps = [g for g in gaps_s if g > 0 and math.isfinite(g)]
    if len(gaps) < target.min_gaps:
        return None  # too few to judge (a trial whose window is complete may still be stopped: the steps after it,
        # which only the loss check reads, are saved)
    median, low, spread, z = bound(gaps, target)
    if low <= target.threshold_s:
        return None
    return Decision(gaps=len(gaps), step=step, median_s=median, bound_s=low, threshold_s=target.threshold_s,
                    spread=spread, z=z)


def window_gaps(lines: Sequence[tuple[int, float, object]], *, warmup_steps: int,
                measured_steps: int) -> tuple[list[float], int]:
    """The measured window's paced gaps from step lines so far and the step of the last: ``lines`` are (step,
    arrival seconds, read) of one rank, in arrival order (the last line of a step counts, as clock.py times it). A
    gap joins two consecutive steps whose lines came in different reads (lines that came together were not timed
    apart, and are left out); none when most came together (buffered output)."""
    seen: dict[int, tuple[float, object]] = {}
    for step, t, read in lines:
        seen[step] = (t, read)
    first = warmup_steps + 1 if warmup_steps > 0 else 2
    last = warmup_steps + measured_steps
    gaps, at, together = [], 0, 0
    for i in range(first, last + 1):
        if i not in seen or i - 1 not in seen:
            break
        (t1, r1), (t0, r0) = seen[i], seen[i - 1]
        at = i
        if r1 == r0:  # one read brought both (a line held back, then let go with the next): not timed apart
            together += 1
            continue
        gaps.append(t1 - t0)
    if together > len(gaps):  # mostly bursts: buffered output, not timed step by step (as clock.measure says)
        return [], at
    return gaps, at


class PruneWatch:
    """Judges one running trial from its line clock's step lines (``clock()``: the executor's live clock, None once
    the trial ended or where the executor has none, as on Slurm: no pruning there). ``check()`` per poll: a Decision
    once the trial is to be stopped (then the same one on every later call), else None."""

    def __init__(self, target: Target, clock: Callable[[], Any]) -> None:
        self.target, self._clock = target, clock
        self._seen = -1  # step lines at the last judgement (judged again only when a new one came)
        self.decision: Decision | None = None

    def check(self) -> Decision | None:
        if self.decision is not None:
            return self.decision
        clock = self._clock()
        if clock is None:
            return None
        lines = clock.step_lines()  # (stream, rank, step, arrival, read)
        if len(lines) == self._seen or not lines:
            return None
        self._seen = len(lines)
        rank = min(r for _, r, _, _, _ in lines)  # one rank's lines (every rank steps together)
        streams = [s for s, r, _, _, _ in lines if r == rank]
        stream = max(set(streams), key=streams.count)  # where its step lines are printed
        own = [(i, t, read) for s, r, i, t, read in lines if r == rank and s == stream]
        gaps, step = window_gaps(own, warmup_steps=self.target.warmup_steps,
                                 measured_steps=self.target.measured_steps)
        self.decision = judge(gaps, self.target, step=step)
        return self.decision
