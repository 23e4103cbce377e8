"""From how a launch ended (LaunchEnd) and what its log says (the adapter's ParsedRun) to a trial status.

Precedence, first match wins; every branch leaves evidence lines:

1. cancelled by a user                       -> cancelled
2. past its time limit (ours or Slurm's)     -> timeout   (partial metrics kept, step time dropped)
3. the executor saw a memory kill           -> oom       (no step time: peak > capacity is all we know): Slurm's
                                                          OUT_OF_MEMORY, the trial's memory cgroup's oom_kill
4. the adapter's verdict on the log          -> ok / oom / crash / invalid / ...
   - the parser itself failing is a crash, with the last log lines as evidence
   - "ok" from a process that exited non-zero or by a signal is a crash, unless the harness ended it once every
     line it is measured by had come (``end.ended``, execute/tail_stop.py): how it ended is then the harness's
     doing, not the trial's, and is not recorded as its exit status
5. an ok trial whose loss trace leaves the baseline's tolerance -> numerics_drift

A signal that ended the process (or, under torchrun, the first failed worker) is kept in Trial.signal.
"""

from __future__ import annotations

import math
import signal as _signal
from collections.abc import Sequence

from ..trial.parsed import ParsedRun
from .executor import LaunchEnd
from .torchrun import root_cause
from ..trial import Metrics, TrialStatus


class Verdict(ParsedRun):
    """The adapter's reading of a trial (:class:`ParsedRun`) plus how its process ended."""

    signal: int | None = None
    exit_code: int | None = None


def signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def last_lines(text: str, n: int = 5) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return lines[-n:]


def classify(end: LaunchEnd, parsed: ParsedRun | None, *, stdout: str = "", stderr: str = "",
             parse_error: str | None = None) -> Verdict:
    """The trial's status, metrics and evidence. ``parsed`` is None when the parser raised
    (``parse_error`` then says what it raised)."""
    sig = None if end.ended else end.signal
    evidence = list(end.evidence)
    if sig is None and not end.ended:
        rc = root_cause(stderr) or root_cause(stdout)
        if rc is not None and rc[1] < 0:
            sig = -rc[1]
            evidence.append(f"torchrun: rank {rc[0]} ended by signal {sig} ({signal_name(sig)})")
    common = {"signal": sig, "exit_code": None if end.ended else end.returncode}
    metrics = parsed.metrics if parsed is not None else Metrics()

    if end.cancelled:
        return Verdict(status=TrialStatus.CANCELLED, metrics=_partial(metrics), evidence=evidence,
                       reason="cancelled before it finished", **common)
    if end.timed_out:
        return Verdict(status=TrialStatus.TIMEOUT, metrics=_partial(metrics), evidence=evidence + last_lines(stdout, 2),
                       reason=timeout_reason(end), **common)
    if end.oom:
        return Verdict(status=TrialStatus.OOM, metrics=_partial(metrics), evidence=evidence,
                       reason=next((e for e in evidence if "memory limit" in e),
                                   "killed by the scheduler for exceeding its memory")[:300], **common)
    if end.lost:
        why = "the scheduler held every launch of it" if end.relaunch else "the executor lost track of the launch"
        return Verdict(status=TrialStatus.CRASH, evidence=evidence, reason=why, **common)
    if parsed is None:
        return Verdict(status=TrialStatus.CRASH, evidence=evidence + [f"parser failed: {parse_error}"]
                       + last_lines(stderr, 3) + last_lines(stdout, 3),
                       reason="its output could not be parsed", **common)
    evidence += parsed.evidence
    status, reason = parsed.status, parsed.reason
    ended_badly = not end.ended and (sig is not None or end.returncode not in (0, None))
    if status is TrialStatus.OK and ended_badly and not parsed.exit_explained:
        how = f"signal {sig} ({signal_name(sig)})" if sig is not None else f"exit status {end.returncode}"
        return Verdict(status=TrialStatus.CRASH, metrics=_partial(metrics),
                       evidence=evidence + last_lines(stderr, 3),
                       reason=f"printed a result but ended with {how}", **common)
    if status is TrialStatus.OOM:
        metrics = _partial(metrics)
    if status is not TrialStatus.OK and not reason:
        reason = (f"ended by signal {sig} ({signal_name(sig)})" if sig is not None
                  else f"{status.value} (exit status {end.returncode})")
    if status.is_failure() and not parsed.evidence:
        evidence += last_lines(stderr, 3) or last_lines(stdout, 3)
    return Verdict(status=status, metrics=metrics, evidence=evidence, reason=reason, **common)


def timeout_reason(end: LaunchEnd) -> str:
    """Both numbers: the limit it ran under, and when it was killed (the limit plus the kill grace)."""
    if end.time_limit_s is None:
        return f"still running after its time limit (killed after {end.wall_s:.0f} s)"
    over = max(0.0, end.wall_s - end.time_limit_s)
    grace = (f", {over:.0f} s of it the grace between SIGTERM and SIGKILL (up to {end.kill_grace_s:g} s)"
             if end.kill_grace_s else "")
    return f"past its time limit of {end.time_limit_s:g} s: killed after {end.wall_s:.0f} s{grace}"


def _partial(m: Metrics) -> Metrics:
    """Metrics of a trial that did not finish: everything it logged, but no steady-state step time."""
    return m.model_copy(update={"step_time_s": None, "tokens_per_s": None, "mfu": None, "tflops_per_device": None})


def loss_drift(losses: Sequence[float], reference: Sequence[float], *, compare_steps: int, rtol: float) -> tuple[float, list[str]]:
    """Compare the first ``compare_steps`` losses with the reference trace.

    Returns (max relative difference, violation lines). Relative difference per step:
    |loss - ref| / max(|ref|, 1e-12). A trace shorter than ``compare_steps`` (or non-finite) is a
    violation: the contract's comparison cannot be made."""
    n = compare_steps
    bad: list[str] = []
    if len(reference) < n:
        return math.inf, [f"reference loss trace has {len(reference)} steps, the contract compares {n}"]
    if len(losses) < n:
        return math.inf, [f"loss trace has {len(losses)} steps, the contract compares {n}"]
    worst = 0.0
    for i in range(n):
        a, b = float(losses[i]), float(reference[i])
        if not math.isfinite(a):
            bad.append(f"step {i + 1}: loss {a} is not finite")
            worst = math.inf
            continue
        rel = abs(a - b) / max(abs(b), 1e-12)
        worst = max(worst, rel)
        if rel > rtol:
            bad.append(f"step {i + 1}: loss {a:.6g} vs baseline {b:.6g} (rel diff {rel:.3g} > rtol {rtol:g})")
    return worst, bad


def apply_loss_check(v: Verdict, reference: Sequence[float] | None, *, compare_steps: int, rtol: float) -> Verdict:
    """An ok verdict whose loss trace leaves the tolerance becomes numerics_drift (metrics kept)."""
    if v.status is not TrialStatus.OK or reference is None:
        return v
    worst, bad = loss_drift(v.metrics.losses, reference, compare_steps=compare_steps, rtol=rtol)
    if not bad:
        return v
    return v.model_copy(update={"status": TrialStatus.NUMERICS_DRIFT, "evidence": v.evidence + bad[:5],
                                "reason": f"loss differs from the baseline by up to {worst:.3g} (rtol {rtol:g})"})
