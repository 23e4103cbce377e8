"""Time a verified kernel candidate against its reference (eager, torch.compile'd, and any other named
implementation, e.g. Liger-Kernel's), on fresh inputs for every timed call, and check every answer.

    result = bench("kernels/rmsnorm/triton_rows.py@rows16")      # a CUDA GPU, production shapes
    result = bench(path, device="cpu", small=True, reps=3)       # the same code path on the CPU interpreter
    result.rejected   # [] or why the measurement cannot be believed

Each repetition refills the input tensors in place with new random values (same objects, same addresses:
an output cache keyed on the input object returns a stale answer), clears the L2 cache (zeroes a 256 MB
buffer) before each timed call, times one call of each implementation with CUDA events (perf_counter on
the CPU), and compares the candidate's outputs -- and in the forward+backward loop its gradients -- with
the eager reference's on that same input. Times are medians over repetitions.

Rejected (not merely flagged): any output or gradient off the reference on a timed input, and forward
bandwidth above the device's measured copy bandwidth (every op here is memory-bound: faster than a
copy means the work was not done). Flagged as suspect: a speedup above 10x over the eager reference.
"""

from __future__ import annotations

import inspect
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .loader import Candidate, load_candidate, load_reference, op_of, parse_candidate, sha256_of

SUSPECT_SPEEDUP = 10.0  # over the eager reference
PEAK_COPY_BYTES = 1 << 30  # 1 GiB each way on a GPU: far larger than any L2
CPU_COPY_BYTES = 64 << 20
L2_FLUSH_BYTES = 256 << 20


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    op: str
    path: str  # PATH or PATH@VARIANT, resolved
    sha256: str  # of the file
    device: str
    shape: str  # the input shapes, e.g. "(32768, 4096) bfloat16"
    reps: int
    candidate_ms: float  # forward, median over fresh inputs
    reference_ms: float
    compiled_ms: float | None  # None when torch.compile was skipped or failed (reason in notes)
    candidate_fwd_bwd_ms: float
    reference_fwd_bwd_ms: float
    compiled_fwd_bwd_ms: float | None
    others_ms: dict[str, float | None] = field(default_factory=dict)  # e.g. {"liger": 0.21}
    others_fwd_bwd_ms: dict[str, float | None] = field(default_factory=dict)
    bytes_moved: int = 0  # minimum forward traffic
    achieved_gbps: float = 0.0
    peak_gbps: float = 0.0
    fraction_of_peak: float = 0.0
    speedup_vs_reference: float = 0.0
    speedup_vs_compiled: float | None = None
    mismatches: list[str] = field(default_factory=list)  # timed inputs where the candidate was wrong
    rejected: list[str] = field(default_factory=list)
    suspect: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.rejected

    def to_dict(self) -> dict:
        return asdict(self)


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def bytes_moved(inputs, outputs) -> int:
    """Bytes read plus bytes written if every tensor is touched exactly once (the roofline's floor)."""
    import torch

    return sum(t.numel() * t.element_size() for t in list(inputs) + list(outputs) if torch.is_tensor(t))


def judge(*, speedup_vs_reference: float, fraction_of_peak: float, mismatches: list[str] = ()) -> tuple[list[str], list[str]]:
    """(rejected, suspect): reasons a measurement cannot be believed, and reasons to look twice."""
    rejected, suspect = [], []
    if mismatches:
        rejected.append(f"the candidate's answer was off the reference on {len(mismatches)} timed input(s): "
                        f"{mismatches[0]}")
    if fraction_of_peak > 1.0:
        rejected.append(f"forward bandwidth is {fraction_of_peak:.2f}x the measured copy bandwidth (above the "
                        "roofline of a memory-bound op): the kernel cannot have read and written its data")
    if speedup_vs_reference > SUSPECT_SPEEDUP:
        suspect.append(f"speedup {speedup_vs_reference:.1f}x over the reference exceeds {SUSPECT_SPEEDUP:.0f}x: "
                       "suspect (skipped work, cached results or a patched timer?)")
    return rejected, suspect


class _Clock:
    """One timed call: CUDA events after an L2 flush on a GPU, perf_counter on the CPU."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = device.startswith("cuda")
        self.flush_buf = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device) if self.cuda else None

    def time(self, fn: Callable[[], object]) -> tuple[float, object]:
        import torch

        if not self.cuda:
            t0 = time.perf_counter()
            out = fn()
            return (time.perf_counter() - t0) * 1e3, out
        self.flush_buf.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), out


def measured_peak_bandwidth(device: str = "cuda") -> float:
    """Bytes/s of a large copy (read + write), median of several."""
    import torch

    n = PEAK_COPY_BYTES if device.startswith("cuda") else CPU_COPY_BYTES
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    clock = _Clock(device)
    dst.copy_(src)
    ms = statistics.median(clock.time(lambda: dst.copy_(src))[0] for _ in range(7))
    return 2 * n / (ms * 1e-3)


def _refill(args, gen) -> None:
    """New random values in the same tensors (floating ones; targets and tables of ints stay)."""
    import torch

    with torch.no_grad():
        for a in args:
            if torch.is_tensor(a) and a.is_floating_point():
                base = a if a._base is None else a._base
                base.copy_(torch.randn(base.shape, generator=gen, device="cpu").to(base.device, base.dtype))


def _tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _off(got, want, atol: float, rtol: float) -> str | None:
    """None when every element of got is within atol + rtol*|want|, else which tensor and how many."""
    for k, (g, w) in enumerate(zip(_tuple(got), _tuple(want))):
        g64, w64 = g.detach().double(), w.detach().double()
        bad = ~((g64 - w64).abs() <= atol + rtol * w64.abs())
        if g64.shape != w64.shape or bool(bad.any()):
            n = int(bad.sum()) if g64.shape == w64.shape else -1
            return f"tensor {k}: {n} of {g64.numel()} elements beyond atol {atol} + rtol {rtol}"
    return None


def bench(path: str | Path | Candidate, op: str | None = None, *, device: str | None = None, small: bool = False,
          reps: int = 30, warmup: int = 3, dtype=None, others: Mapping[str, Callable] | None = None,
          compile_reference: bool | None = None) -> BenchResult:
    """Benchmark one candidate. On the CPU (device="cpu"), pass small=True: the reference's "batch" family."""
    import torch

    device = device or ("cuda" if has_gpu() else "cpu")
    if device.startswith("cuda") and not has_gpu():
        raise RuntimeError("kernels bench needs a CUDA GPU; this machine has none (verify runs on the CPU)")
    if not device.startswith("cuda") and not small:
        raise RuntimeError("kernels bench on the CPU runs only the small shapes (small=True): production shapes "
                           "under the Triton interpreter would take hours")
    path = parse_candidate(path).resolved()  # PATH or PATH@VARIANT (loader.py)
    op = op or op_of(path)
    ref = load_reference(op)
    cand = load_candidate(path)
    dtype = dtype or torch.bfloat16
    notes: list[str] = []
    if small:
        args, kwargs = ref.inputs("batch", dtype, seed=1, device=device)
    else:
        args, kwargs = ref.bench_inputs(dtype=dtype, device=device)
    args = list(inspect.signature(ref.forward).bind(*args, **kwargs).args)  # every argument positional
    diff = [a for a in args if torch.is_tensor(a) and a.requires_grad]
    atol, rtol = ref.TOLERANCES[dtype]
    atol, rtol = 2 * atol, 2 * rtol  # two roundings: the eager reference's own, and the candidate's
    impls: dict[str, Callable] = {"candidate": cand.forward, "reference": ref.forward}
    compile_reference = device.startswith("cuda") if compile_reference is None else compile_reference
    if compile_reference:
        try:  # a compile failure is a note, not a crash: the comparison is then against eager only
            compiled = torch.compile(ref.forward)
            compiled(*args)
            impls["compiled"] = compiled
        except Exception as e:
            notes.append(f"torch.compile of the reference failed: {type(e).__name__}: {e}"[:300])
    elif "compiled" not in (others or {}):
        notes.append("torch.compile of the reference not run (CPU dry run, or not asked for)")
    for name, fn in (others or {}).items():
        try:
            fn(*args)
            impls[name] = fn
        except Exception as e:
            notes.append(f"{name} could not run: {type(e).__name__}: {e}"[:300])
    clock = _Clock(device)
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    fwd: dict[str, list[float]] = {k: [] for k in impls}
    mismatches: list[str] = []
    with torch.no_grad():
        for i in range(warmup + reps):
            _refill(args, gen)
            outs = {}
            for name, fn in impls.items():
                ms, outs[name] = clock.time(lambda fn=fn: fn(*args))
                if i >= warmup:
                    fwd[name].append(ms)
            why = _off(outs["candidate"], outs["reference"], atol, rtol)
            if why is not None:
                mismatches.append(f"forward, repetition {i}: {why}")
    fb: dict[str, list[float]] = {k: [] for k in impls}
    for i in range(warmup + reps):
        _refill(args, gen)
        grads = {}
        for name, fn in impls.items():
            def run(fn=fn):
                outs = _tuple(fn(*args))
                gos = [torch.ones_like(o) for o in outs]
                return torch.autograd.grad([o for o in outs if o.requires_grad],
                                           diff, [g for g, o in zip(gos, outs) if o.requires_grad], allow_unused=True)
            ms, grads[name] = clock.time(run)
            if i >= warmup:
                fb[name].append(ms)
        for k, (g, w) in enumerate(zip(grads["candidate"], grads["reference"])):
            why = None if (g is None and w is None) else _off(g, w, atol, rtol) if g is not None and w is not None \
                else "a gradient is missing"
            if why is not None:
                mismatches.append(f"backward (gradient {k}), repetition {i}: {why}")
    med = {k: statistics.median(v) for k, v in fwd.items()}
    med_fb = {k: statistics.median(v) for k, v in fb.items()}
    with torch.no_grad():
        outs = _tuple(cand.forward(*args))
    moved = bytes_moved(args, outs)
    peak = measured_peak_bandwidth(device)
    achieved = moved / (med["candidate"] * 1e-3)
    speedup = med["reference"] / med["candidate"]
    rejected, suspect = judge(speedup_vs_reference=speedup, fraction_of_peak=achieved / peak, mismatches=mismatches)
    shapes = ", ".join(str(tuple(a.shape)) for a in args if torch.is_tensor(a))
    dev_name = torch.cuda.get_device_name() if device.startswith("cuda") else "cpu (Triton interpreter)"
    extra = [k for k in impls if k not in ("candidate", "reference", "compiled")]
    return BenchResult(
        op=op, path=path.spec, sha256=sha256_of(path), device=dev_name, shape=f"{shapes} {str(dtype)[6:]}", reps=reps,
        candidate_ms=med["candidate"], reference_ms=med["reference"], compiled_ms=med.get("compiled"),
        candidate_fwd_bwd_ms=med_fb["candidate"], reference_fwd_bwd_ms=med_fb["reference"],
        compiled_fwd_bwd_ms=med_fb.get("compiled"), others_ms={k: med[k] for k in extra},
        others_fwd_bwd_ms={k: med_fb[k] for k in extra}, bytes_moved=moved, achieved_gbps=achieved / 1e9,
        peak_gbps=peak / 1e9, fraction_of_peak=achieved / peak, speedup_vs_reference=speedup,
        speedup_vs_compiled=(med["compiled"] / med["candidate"]) if "compiled" in med else None,
        mismatches=mismatches[:10], rejected=rejected, suspect=suspect, notes=notes,
    )
