"""torchtitan's log dialect: step lines, their timestamps, and failures from real error text.

A step line (``components/metrics.py``; colours stripped; ``[rankN]:`` appears when torchrun tees)::

    [rank0]:[titan] 2026-12-01 10:45:37,499 - root - INFO - step:  2  loss:  8.07814  grad_norm:  0.5827
        memory:  1.78GiB(7.57%)  tps: 2,451  tflops: 0.11  mfu: 0.03%

Every rank prints its own line for every step. There is no step-time field:

- ``tps`` is tokens per second per device over the time since the previous line, i.e. this rank's
  tokens / (dt x non-data-parallel degree). Over any layout that is global tokens / (dt x world size), so
  ``dt = tokens per step / (tps x world)``. It is measured with ``perf_counter`` inside the process and
  rounded to whole tokens, so it is the step time used when tokens per step are known.
- Otherwise dt is the gap between consecutive step lines' timestamps (millisecond resolution).

Per step the slowest rank decides (lowest tps): ranks synchronise every step. ``memory`` is the peak of the
capacity-governed figure (max reserved; on the CPU launcher, the peak data segment that RLIMIT_DATA caps);
a trial's peak is the highest any rank printed. Under pipeline parallelism only the last stage computes the
loss: the other stages print ``-1`` per gradient-accumulation step (``loss: -2.00000`` with two), a placeholder,
so a step's loss is taken from a line with a non-negative loss (a cross-entropy never is negative).
``mfu`` assumes the peak of an accelerator (torchtitan falls back to an A100's 312 TFLOP/s); on a CPU it
means nothing and is dropped.

Failures are read from the text of the ranks and of torchrun itself: an allocator error on any rank is
``oom`` (torchrun then reports ``ChildFailedError``); a rank killed by SIGKILL with no other cause is
``oom`` too (the kernel's OOM killer); gloo, rendezvous and socket errors are ``crash`` with their line as
the cause; torchtitan's own config checks are ``invalid``.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from datetime import datetime

from ...trial import Metrics, TrialStatus
from ..megatron import log as megatron_log
from ..base import ParsedRun

GiB = 2**30

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RANK = re.compile(r"^\[(?:rank|default)(\d+)\]:")
_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")
_STEP = re.compile(
    r"(?<!validate )step:\s*(\d+)\s+loss:\s*(\S+)\s+(?:grad_norm:\s*(\S+)\s+)?memory:\s*([\d.]+)GiB\(([\d.]+)%\)\s+"
    r"tps:\s*([\d,]+)\s+tflops:\s*([\d,.]+)\s+mfu:\s*([\d.]+%|N/A)")



@dataclass(frozen=True)
class StepLine:
    """One rank's line for one step."""

    step: int
    loss: float
    memory_gib: float
    memory_pct: float
    tps: float  # tokens per second per device
    tflops: float
    mfu_pct: float | None
    grad_norm: float | None = None
    rank: int | None = None  # from a "[rankN]:" prefix, when torchrun tees
    time_s: float | None = None  # the line's timestamp, unix seconds (local time of the node)


@dataclass(frozen=True)
class StepLog:
    """One step, over all ranks' lines: the slowest rank's tps, the highest memory, the loss."""

    step: int
    loss: float | None  # None when only pipeline placeholders were printed
    memory_gib: float
    memory_pct: float
    tps: float
    tflops: float
    mfu_pct: float | None
    grad_norm: float | None = None
    time_s: float | None = None  # the first line's timestamp
    ranks: int = 1  # lines seen for this step


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def parse_lines(text: str) -> list[StepLine]:
    """Every training-step line, in the order printed (validation lines are skipped)."""
    out: list[StepLine] = []
    for raw in _ANSI.sub("", text).splitlines():
        m = _STEP.search(raw)
        if not m:
            continue
        r = _RANK.match(raw)
        t = _TIME.search(raw)
        ts = None
        if t:
            ts = datetime.strptime(t.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(t.group(2)) / 1000.0
        mfu = m.group(8)
        out.append(StepLine(step=int(m.group(1)), loss=_float(m.group(2)),
                            grad_norm=_float(m.group(3)) if m.group(3) else None,
                            memory_gib=float(m.group(4)), memory_pct=float(m.group(5)),
                            tps=float(m.group(6).replace(",", "")), tflops=float(m.group(7).replace(",", "")),
                            mfu_pct=None if mfu == "N/A" else float(mfu.rstrip("%")),
                            rank=int(r.group(1)) if r else None, time_s=ts))
    return out


def parse_torchtitan_log(text: str) -> list[StepLog]:
    """One :class:`StepLog` per step, in step order, merging every rank's line for it."""
    by_step: dict[int, list[StepLine]] = {}
    for ln in parse_lines(text):
        by_step.setdefault(ln.step, []).append(ln)
    out = []
    for step in sorted(by_step):
        lines = by_step[step]
        real = [ln for ln in lines if not ln.loss < 0]  # PP placeholders are negative
        first = (real or lines)[0]
        slow = min(lines, key=lambda ln: ln.tps)
        top = max(lines, key=lambda ln: ln.memory_gib)
        times = [ln.time_s for ln in lines if ln.time_s is not None]
        out.append(StepLog(step=step, loss=first.loss if real else None, grad_norm=first.grad_norm,
                           memory_gib=top.memory_gib, memory_pct=top.memory_pct, tps=slow.tps, tflops=slow.tflops,
                           mfu_pct=slow.mfu_pct, time_s=min(times) if times else None, ranks=len(lines)))
    return out


def step_times_s(steps: list[StepLog], *, world_size: int | None, tokens_per_step: int | None) -> dict[int, float]:
    """step -> seconds. From tps when tokens per step and the world size are known; else from the gaps
    between consecutive steps' timestamps (the first step then has none)."""
    if tokens_per_step and world_size:
        return {st.step: tokens_per_step / (st.tps * world_size) for st in steps if st.tps > 0}
    out: dict[int, float] = {}
    for prev, cur in zip(steps, steps[1:]):
        if prev.time_s is not None and cur.time_s is not None and cur.step == prev.step + 1:
            out[cur.step] = cur.time_s - prev.time_s
    return out


def to_metrics(steps: list[StepLog], *, warmup_steps: int, measured_steps: int, world_size: int | None,
               tokens_per_step: int | None, cpu: bool = False) -> Metrics:
    """Metrics over the contract's window: steps warmup+1 .. warmup+measured (1-based). The step time is
    None unless every step of the window was printed. ``cpu``: torchtitan's MFU (an accelerator's peak) is
    dropped."""
    times = step_times_s(steps, world_size=world_size, tokens_per_step=tokens_per_step)
    window = list(range(warmup_steps + 1, warmup_steps + measured_steps + 1))
    w_times = [times.get(i) for i in window]
    step_time = statistics.median(w_times) if w_times and all(t is not None for t in w_times) else None
    in_window = [st for st in steps if st.step in window]
    mfus = [st.mfu_pct for st in in_window if st.mfu_pct is not None]
    return Metrics(
        step_time_s=step_time,
        step_times_s=[times[k] for k in sorted(times)],
        tokens_per_s=(tokens_per_step / step_time) if (step_time and tokens_per_step) else None,
        mfu=None if cpu or not mfus else statistics.median(mfus) / 100,
        tflops_per_device=statistics.median([st.tflops for st in in_window]) if in_window else None,
        peak_memory_bytes=max(st.memory_gib for st in steps) * GiB if steps else None,
        losses=[st.loss for st in steps if st.loss is not None],
    )


# --------------------------------------------------------------------------- failures
# (status, reason, pattern), checked in order after the allocator errors. Patterns are real error texts.
_FAILURES: list[tuple[TrialStatus, str, re.Pattern[str]]] = [
    (TrialStatus.INVALID, "config error", re.compile(
        r"Invalid field names|Unrecognized (?:options|arguments)|Invalid parallel dims|"
        r"ValueError: .*(?:must be|is not supported|requires|should be|do not support|not divisible)|"
        r"AssertionError: .*(?:must be|divisible|should be|not supported)|"
        r"Set --training\.disable_cuda_graphs")),
    (TrialStatus.NUMERICS_DRIFT, "NaN or inf loss", re.compile(r"step:\s*\d+\s+loss:\s*(?:nan|inf|-inf)\b", re.I)),
    (TrialStatus.CRASH, "compile error", re.compile(
        r"torch\._dynamo\.exc\.\w+|BackendCompilerFailed|InductorError|CompilationError|CppCompileError")),
    (TrialStatus.CRASH, "rendezvous error", re.compile(
        r"RendezvousError|RendezvousTimeoutError|RendezvousClosedError|DistNetworkError|"
        r"address already in use|EADDRINUSE|The server socket has failed to listen")),
    (TrialStatus.CRASH, "gloo error", re.compile(
        r"gloo/transport|\[enforce fail at .*gloo|Gloo connectFullMesh failed|DistBackendError|"
        r"Connection reset by peer|Connection closed by peer|Broken pipe|Timed out waiting .* for (?:recv|send)")),
]
_EXC = re.compile(r"^(?:\[(?:rank|default)\d+\]:)?\s*((?:[\w.]+\.)?\w*(?:Error|Exception)\b:?.*)$")
_SIGKILL = re.compile(r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b")
_CHILD = "ChildFailedError"


def cause_line(text: str) -> str | None:
    """The first exception line a rank printed (not torchrun's own ChildFailedError wrapper)."""
    for ln in _ANSI.sub("", text).splitlines():
        m = _EXC.match(ln)
        if m and _CHILD not in ln and "Traceback" not in ln:
            return m.group(1).strip()[:300]
    return None


def classify_torchtitan_failure(text: str) -> tuple[TrialStatus, str, list[str]] | None:
    """(status, reason, evidence lines) for the failure ``text`` shows, or None when it shows none."""
    clean = _ANSI.sub("", text)
    generic = megatron_log.classify_failure(clean)
    if generic is not None and generic[0] is TrialStatus.OOM:
        child = [ln.strip() for ln in clean.splitlines() if _CHILD in ln][:1]
        return TrialStatus.OOM, generic[1], generic[2] + child
    lines = clean.splitlines()
    for status, reason, pat in _FAILURES:
        hits = [ln.strip() for ln in lines if pat.search(ln)]
        if hits:
            if status is TrialStatus.CRASH:
                reason = f"{reason}: {hits[0][:200]}"
            return status, reason, hits[:5]
    if generic is not None and generic[1] != "gloo/distributed error":
        return generic
    if _CHILD in clean:
        kills = [ln.strip() for ln in lines if _SIGKILL.search(ln)]
        cause = cause_line(clean)
        if kills and cause is None:
            return TrialStatus.OOM, "a rank was killed by SIGKILL with no error of its own (the kernel's OOM killer)", \
                kills[:3]
        child = [ln.strip() for ln in lines if _CHILD in ln][:1]
        return TrialStatus.CRASH, f"a rank failed: {cause or 'no exception line (see the log)'}", \
            ([cause] if cause else []) + child
    return generic


_EXIT_ABORT = re.compile(r"terminate called without an active exception")


def aborted_after_training(text: str, steps: list[StepLog], *, final_step: int | None,
                           world_size: int | None) -> str | None:
    """The evidence line when a rank aborted only at interpreter exit, after every rank printed the final
    step and the rank had destroyed its process group (a joinable C++ thread destroyed at exit:
    ``terminate called without an active exception``, then SIGABRT). The training and its measurement
    are complete then; anything else (an exception line, an allocator error) is a real failure."""
    if not final_step or not world_size or not steps or steps[-1].step != final_step:
        return None
    if steps[-1].ranks < world_size or cause_line(text) is not None:
        return None
    clean = _ANSI.sub("", text)
    m = _EXIT_ABORT.search(clean)
    if m is None or "Process group destroyed" not in clean[:m.start()]:
        return None
    return f"{m.group(0)} (at exit, after all {world_size} ranks printed step {final_step}): not a training failure"


def parse_torchtitan_output(stdout: str, stderr: str, returncode: int | None, *, warmup_steps: int,
                            measured_steps: int, world_size: int | None, tokens_per_step: int | None,
                            cpu: bool = False, final_step: int | None = None) -> ParsedRun:
    """Status, metrics and evidence of one finished torchtitan launch. ``final_step``: the job's
    ``training.steps`` (lets an abort at exit after complete training count as a finished run)."""
    text = stdout + "\n" + stderr
    steps = parse_torchtitan_log(text)
    metrics = to_metrics(steps, warmup_steps=warmup_steps, measured_steps=measured_steps, world_size=world_size,
                         tokens_per_step=tokens_per_step, cpu=cpu)
    failure = classify_torchtitan_failure(text)
    late = aborted_after_training(text, steps, final_step=final_step, world_size=world_size)
    if late is not None and metrics.step_time_s is not None:
        return ParsedRun(status=TrialStatus.OK, metrics=metrics, evidence=[late], exit_explained=late)
    if failure is not None:
        status, reason, evidence = failure
        return ParsedRun(status=status, metrics=metrics.model_copy(update={"step_time_s": None}), evidence=evidence,
                         reason=reason)
    if returncode not in (0, None):
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
        return ParsedRun(status=TrialStatus.CRASH, metrics=metrics.model_copy(update={"step_time_s": None}),
                         evidence=tail, reason=f"exit code {returncode}")
    if metrics.step_time_s is None or not math.isfinite(metrics.step_time_s):
        last = steps[-1].step if steps else 0
        return ParsedRun(status=TrialStatus.CRASH, metrics=metrics,
                         reason=f"the log does not reach step {warmup_steps + measured_steps} (warm-up {warmup_steps} "
                                f"+ measured {measured_steps}); the last step line is step {last}")
    return ParsedRun(status=TrialStatus.OK, metrics=metrics)
