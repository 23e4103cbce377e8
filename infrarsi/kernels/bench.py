"""Time a verified kernel candidate on a GPU against its reference, eager and torch.compile'd.

    result = bench("kernels/rmsnorm/triton_rows4.py")

Times are medians of triton.testing.do_bench, which clears the L2 cache before every repetition
(it zeroes a 256 MB buffer), so each run reads its inputs from HBM. Bandwidth is the minimum
traffic (every input read once, every output written once) over the candidate's forward time,
as a fraction of the device's peak measured here with a large device-to-device copy.
A speedup above 10x over the reference, or bandwidth above the measured peak (above the
roofline), is flagged as suspect: such numbers usually mean the work was skipped or the clock lied.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .loader import load_candidate, load_reference, op_of, sha256_of

SUSPECT_SPEEDUP = 10.0  # over the eager reference
PEAK_COPY_BYTES = 1 << 30  # 1 GiB each way: far larger than any L2


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    op: str
    path: str
    sha256: str
    device: str
    shape: str  # the input shapes, e.g. "(32768, 4096) bfloat16"
    candidate_ms: float  # forward, median
    reference_ms: float
    compiled_ms: float | None  # None when torch.compile failed (reason in notes)
    candidate_fwd_bwd_ms: float
    reference_fwd_bwd_ms: float
    bytes_moved: int  # minimum forward traffic
    achieved_gbps: float
    peak_gbps: float
    fraction_of_peak: float
    speedup_vs_reference: float
    speedup_vs_compiled: float | None
    suspect: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def bytes_moved(inputs, outputs) -> int:
    """Bytes read plus bytes written if every tensor is touched exactly once (the roofline's floor)."""
    import torch

    return sum(t.numel() * t.element_size() for t in list(inputs) + list(outputs) if torch.is_tensor(t))


def judge(*, speedup_vs_reference: float, fraction_of_peak: float) -> list[str]:
    """Reasons a measurement is too good to be true; [] when it is plausible."""
    out = []
    if speedup_vs_reference > SUSPECT_SPEEDUP:
        out.append(f"speedup {speedup_vs_reference:.1f}x over the reference exceeds {SUSPECT_SPEEDUP:.0f}x: "
                   "suspect (skipped work, cached results or a patched timer?)")
    if fraction_of_peak > 1.0:
        out.append(f"bandwidth is {fraction_of_peak:.2f}x the measured peak (above the roofline): suspect "
                   "(the kernel cannot have read and written its data)")
    return out


def measured_peak_bandwidth(device: str = "cuda") -> float:
    """Bytes/s of a large device-to-device copy (read + write), median of do_bench."""
    import torch
    import triton.testing

    src = torch.empty(PEAK_COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    return 2 * PEAK_COPY_BYTES / (ms * 1e-3)


def bench(path: str | Path, op: str | None = None, *, warmup_ms: int = 25, rep_ms: int = 100) -> BenchResult:
    """Benchmark one candidate on the current CUDA device. Raises RuntimeError without a GPU."""
    import torch
    import triton.testing

    if not has_gpu():
        raise RuntimeError("kernels bench needs a CUDA GPU; this machine has none (verify runs on the CPU)")
    path = Path(path).resolve()
    op = op or op_of(path)
    ref = load_reference(op)
    cand = load_candidate(path)
    notes: list[str] = []
    args, kwargs = ref.bench_inputs(device="cuda")
    diff = [a for a in args if torch.is_tensor(a) and a.requires_grad]

    def timed(fn) -> float:
        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def fwd_bwd(forward):
        def run():
            outs = forward(*args, **kwargs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            torch.autograd.grad(outs, diff, [torch.ones_like(o) for o in outs])

        return run

    with torch.no_grad():
        cand_ms = timed(lambda: cand.forward(*args, **kwargs))
        ref_ms = timed(lambda: ref.forward(*args, **kwargs))
        compiled_ms = None
        try:  # a compile failure is a note, not a crash: the comparison is then against eager only
            compiled = torch.compile(ref.forward)
            compiled(*args, **kwargs)
            compiled_ms = timed(lambda: compiled(*args, **kwargs))
        except Exception as e:
            notes.append(f"torch.compile of the reference failed: {type(e).__name__}: {e}"[:300])
        outs = cand.forward(*args, **kwargs)
    cand_fb = timed(fwd_bwd(cand.forward))
    ref_fb = timed(fwd_bwd(ref.forward))
    outs = outs if isinstance(outs, tuple) else (outs,)
    moved = bytes_moved(args, outs)
    peak = measured_peak_bandwidth()
    achieved = moved / (cand_ms * 1e-3)
    speedup = ref_ms / cand_ms
    shapes = ", ".join(str(tuple(a.shape)) for a in args if torch.is_tensor(a))
    dtype = next(str(a.dtype).removeprefix("torch.") for a in args if torch.is_tensor(a))
    return BenchResult(
        op=op, path=str(path), sha256=sha256_of(path), device=torch.cuda.get_device_name(),
        shape=f"{shapes} {dtype}", candidate_ms=cand_ms, reference_ms=ref_ms, compiled_ms=compiled_ms,
        candidate_fwd_bwd_ms=cand_fb, reference_fwd_bwd_ms=ref_fb, bytes_moved=moved,
        achieved_gbps=achieved / 1e9, peak_gbps=peak / 1e9, fraction_of_peak=achieved / peak,
        speedup_vs_reference=speedup, speedup_vs_compiled=(compiled_ms / cand_ms) if compiled_ms else None,
        suspect=judge(speedup_vs_reference=speedup, fraction_of_peak=achieved / peak), notes=notes,
    )
