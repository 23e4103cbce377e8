"""Megatron-LM's log dialect: iteration lines, memory reports, timers, and failures from real error text.

One parser serves real Megatron-LM, the embedded ``minigpt`` workload and the simulated clusters, which
all print the same lines::

     [2026-11-30 10:00:00] iteration        5/      20 | consumed samples:           80 | elapsed time per
     iteration (ms): 812.3 | throughput per GPU (TFLOP/s/GPU): 0.4 | learning rate: 1.000000E-03 | global batch
     size:    16 | lm loss: 5.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 |
     number of nan iterations:   0 |
    [Rank 0] (after 5 iterations) memory (MB) | allocated: 310.5 | max allocated: 402.1 | reserved: 520.0 | max reserved: 601.3
    (min, max) time across ranks (ms):
        forward-compute ................................: (120.11, 125.40)

Memory: "max reserved" is the capacity-governed peak (a GPU's caching allocator; on the CPU, the peak
data segment that RLIMIT_DATA caps); "max allocated" is what tensors used (on the CPU, max RSS).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from ...trial import Metrics, TrialStatus

MB = 2**20

_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
_FIELD = re.compile(r"\s*([^|:]+?)\s*:\s*([^|]+?)\s*\|")
_MEM = re.compile(
    r"\[Rank (\d+)\].*?memory \(MB\)\s*\|\s*allocated:\s*([\d.]+)\s*\|\s*max allocated:\s*([\d.]+)"
    r"\s*\|\s*reserved:\s*([\d.]+)\s*\|\s*max reserved:\s*([\d.]+)"
)
_TIMER = re.compile(r"^\s+([A-Za-z][\w\-]*(?:[\w\-]+)*)\s*\.+\s*:\s*\(\s*([\d.]+)\s*,\s*([\d.]+)\s*\)")


@dataclass
class IterationLog:
    iteration: int
    total: int
    step_ms: float | None = None
    loss: float | None = None
    grad_norm: float | None = None  # global norm before clipping
    tflops_per_gpu: float | None = None
    global_batch: int | None = None
    skipped: int = 0
    nan: int = 0


@dataclass
class MegatronLog:
    iterations: list[IterationLog] = field(default_factory=list)
    max_allocated_mb: dict[int, float] = field(default_factory=dict)
    max_reserved_mb: dict[int, float] = field(default_factory=dict)
    timers_ms: dict[str, list[float]] = field(default_factory=dict)  # name -> max-across-ranks per report


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_log(text: str) -> MegatronLog:
    """Every iteration line, memory report and timer line in ``text`` (stdout of any rank)."""
    out = MegatronLog()
    for line in text.splitlines():
        m = _ITER.search(line)
        if m:
            it = IterationLog(int(m.group(1)), int(m.group(2)))
            for key, val in _FIELD.findall(m.group(3) + ("|" if not m.group(3).rstrip().endswith("|") else "")):
                key = key.strip().lower()
                if key == "elapsed time per iteration (ms)":
                    it.step_ms = _num(val)
                elif key == "lm loss":
                    it.loss = _num(val)
                elif key == "grad norm":
                    it.grad_norm = _num(val)
                elif key.startswith("throughput per gpu"):
                    it.tflops_per_gpu = _num(val)
                elif key == "global batch size":
                    v = _num(val)
                    it.global_batch = int(v) if v is not None else None
                elif key == "number of skipped iterations":
                    it.skipped = int(_num(val) or 0)
                elif key == "number of nan iterations":
                    it.nan = int(_num(val) or 0)
            out.iterations.append(it)
            continue
        m = _MEM.search(line)
        if m:
            rank = int(m.group(1))
            out.max_allocated_mb[rank] = max(out.max_allocated_mb.get(rank, 0.0), float(m.group(3)))
            out.max_reserved_mb[rank] = max(out.max_reserved_mb.get(rank, 0.0), float(m.group(5)))
            continue
        m = _TIMER.match(line)
        if m:
            out.timers_ms.setdefault(m.group(1), []).append(float(m.group(3)))
    return out


def steady_step_time_s(log: MegatronLog, *, warmup_steps: int, measured_steps: int) -> float | None:
    """Median step time over the measured window: iterations warmup+1 .. warmup+measured (1-based).
    None when the log does not reach the end of the window."""
    times = {it.iteration: it.step_ms for it in log.iterations if it.step_ms is not None}
    window = [times.get(i) for i in range(warmup_steps + 1, warmup_steps + measured_steps + 1)]
    if not window or any(t is None for t in window):
        return None
    return statistics.median(window) / 1000.0


def to_metrics(log: MegatronLog, *, warmup_steps: int, measured_steps: int, tokens_per_step: int | None = None,
               peak_flops: float | None = None) -> Metrics:
    step = steady_step_time_s(log, warmup_steps=warmup_steps, measured_steps=measured_steps)
    steps_s = [it.step_ms / 1000.0 for it in log.iterations if it.step_ms is not None]
    losses = [it.loss for it in log.iterations if it.loss is not None]
    grad_norms = [it.grad_norm for it in log.iterations if it.grad_norm is not None]
    reserved = {r: v * MB for r, v in log.max_reserved_mb.items()}
    window = [it for it in log.iterations if warmup_steps < it.iteration <= warmup_steps + measured_steps]
    tflops = [it.tflops_per_gpu for it in window if it.tflops_per_gpu is not None]
    tf = statistics.median(tflops) if tflops else None
    phases = {k: statistics.median(v[warmup_steps:] or v) / 1000.0 for k, v in log.timers_ms.items()}
    return Metrics(
        step_time_s=step,
        step_times_s=steps_s,
        tokens_per_s=(tokens_per_step / step) if (step and tokens_per_step) else None,
        tflops_per_device=tf,
        mfu=(tf * 1e12 / peak_flops) if (tf is not None and peak_flops) else None,
        peak_memory_bytes=max(reserved.values()) if reserved else None,
        peak_memory_by_rank=reserved,
        losses=losses,
        grad_norms=grad_norms if len(grad_norms) == len(losses) else [],
        phases_s=phases,
    )


# --------------------------------------------------------------------------- failures
# (status, reason, pattern). Order matters: the first match decides. Patterns are real error texts.
_FAILURES: list[tuple[TrialStatus, str, re.Pattern[str]]] = [
    # the workload's own kernel lines (infrarsi/kernels/insitu.py): a spot check that mismatched, a candidate
    # whose bytes are not the ones verified at run start
    (TrialStatus.NUMERICS_DRIFT, "kernel spot check", re.compile(r"infrarsi kernel spot check failed")),
    (TrialStatus.CONTRACT_VIOLATION, "kernel refused", re.compile(r"infrarsi kernel refused")),
    (TrialStatus.OOM, "out of memory", re.compile(
        r"CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate memory|\bMemoryError\b|"
        r"std::bad_alloc|CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|oom-kill event|exceeded memory limit|"
        r"OUT_OF_MEMORY|Cannot allocate memory")),
    (TrialStatus.CRASH, "NCCL error", re.compile(
        r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|Watchdog caught collective operation timeout|"
        r"ProcessGroupNCCL.*(?:timeout|Timeout)|NCCL communicator was aborted")),
    (TrialStatus.CRASH, "compile error", re.compile(
        r"torch\._dynamo\.exc\.\w+|BackendCompilerFailed|InductorError|CompilationError|triton\.compiler\.errors")),
    (TrialStatus.NUMERICS_DRIFT, "NaN or inf loss", re.compile(
        r"lm loss:\s*(?:nan|inf|-inf)\b|number of nan iterations:\s*[1-9]|found NaN in local grad norm|"
        r"Rank \d+: found NaN|loss is (?:nan|NaN|inf)", re.IGNORECASE)),
    (TrialStatus.INVALID, "argument error", re.compile(
        r"error: unrecognized arguments|error: argument [-\w]+|: error: the following arguments are required|"
        r"AssertionError.*(?:must be|divisible|should be|cannot|not supported)|arguments\.py.*AssertionError|"
        r"ValueError: .*(?:must be a multiple|must be divisible|is not divisible)")),
    (TrialStatus.CRASH, "gloo/distributed error", re.compile(
        r"ChildFailedError|Connection reset by peer|gloo/transport|DistBackendError|RendezvousError")),
]


def classify_failure(text: str) -> tuple[TrialStatus, str, list[str]] | None:
    """The failure ``text`` shows, as (status, reason, evidence lines), or None when no known failure.

    Evidence is every line that matched the deciding pattern (at most 5), so a report can show why."""
    lines = text.splitlines()
    for status, reason, pat in _FAILURES:
        hits = [ln.strip() for ln in lines if pat.search(ln)]
        if hits:
            return status, reason, hits[:5]
    return None
