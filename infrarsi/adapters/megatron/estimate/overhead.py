"""What a megatron-core CPU training rank holds beyond its live tensors, from what holds it.

On the CPU a trial's peak is its data segment (VmData's peak: private writable address space, what RLIMIT_DATA
caps), not its resident set: glibc's heap, every mmapped chunk and every thread's stack count whole, touched or not.
A rank of launchers/pretrain_gpt_cpu.py (1 thread, bf16, gloo) holds, beyond the storages the fake step tracks:

- **the heap's high-water mark** (computed, no constant): torch's CPU tensors come from glibc's malloc. A storage of
  at least 32 MiB (``MMAP_MAX``, the dynamic mmap threshold's ceiling) is always its own mmap and is unmapped when
  freed; a smaller one comes from the heap once the threshold has risen past it, which it has after the first
  step (it rises to the size of every mmapped chunk freed). The heap does not give back what it reached: at the
  step's peak the data segment holds the heap-sized storages' high-water mark plus the mmapped ones alive, i.e.
  ``small_max + large_max`` of the step (fake.StorageTracker.heap_peaks), whatever the tracked peak.
  Large-vocabulary logits and long-sequence scores are mmapped, so they add no heap.
- **holes**: freed heap chunks that later requests do not fit, per byte of the step's heap-sized transient
  high-water (``small_max - small_state``): ``holes``.
- **gloo**: each process group the rank is a member of runs its own threads, whose 8 MiB stacks are data segment
  (``per_group``, measured directly). The distributed optimizer's reduce-scatter of the gradient buckets and
  all-gather of the parameters go through gloo, whose buffers for them no tensor tracker sees: ``comm`` per byte of
  the gradient buffer a rank reduce-scatters (DP > 1). A plain all-reduce (no distributed optimizer) measured none.
- **the process**: Python, torch, megatron-core, the training loop, oneDNN's primitive cache (bounded at 64 kernels
  by the launcher): ``base``.
- **MoE**: a dropless router gives every expert a new token count each step: its GEMMs' shapes change, oneDNN
  compiles kernels until its cache (64) is full, and the experts' per-step buffers of ever-new sizes leave the heap
  chunks of many sizes: ``moe`` once for a rank with experts plus ``per_local_expert`` per local expert (MoE layers
  x experts / EP on the rank).

The constants are fitted by ``python scripts/bench_estimate_megatron.py --calibrate`` on real trials of shapes that
the held-out table (``python scripts/bench_estimate_megatron.py``) does not contain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MiB = 2**20
MEASURED_BY = "scripts/bench_estimate_megatron.py --calibrate (megatron-core 0.16.1, torch 2.13.0 CPU, 2 cores)"


@dataclass(frozen=True, kw_only=True)
class CpuConstants:
    """Bytes (``holes``: bytes per byte) of a megatron-core CPU rank that no tensor shows; see the module doc."""

    base: float
    per_group: float
    holes: float
    comm: float
    moe: float
    per_local_expert: float


# Fitted on this machine (MEASURED_BY, 2026-12-06, load 5-7) over the 14 measured ranks of CALIBRATE's 13 settings;
# per_group measured directly (16 groups created in one process). comm came out 0: the distributed optimizer's
# gloo collectives left nothing measurable beyond the groups' threads (2 settings).
CPU = CpuConstants(base=375.3 * MiB, per_group=24.00 * MiB, holes=1.086, comm=0.0, moe=85.2 * MiB,
                   per_local_expert=2.02 * MiB)


def heap_extra(heap: Mapping[str, int] | None) -> float:
    """Bytes the heap's high-water mark and the mmapped storages add over the tracked peak (0 without ``heap``)."""
    if not heap:
        return 0.0
    return max(0.0, float(heap["small_max"] + heap["large_max"] - heap["tracked_peak"]))


def small_transient(heap: Mapping[str, int] | None) -> float:
    """The step's high-water of heap-sized bytes beyond the state it started with."""
    if not heap:
        return 0.0
    return max(0.0, float(heap["small_max"] - heap["small_state"]))


def features(*, process_groups: int, local_experts: int, heap: Mapping[str, int] | None,
             reduced_bytes: float = 0.0) -> dict[str, float]:
    """The quantities the constants multiply (``base`` 1; ``moe`` 1 for a rank with local experts;
    ``reduced_bytes``: its gradient buffer when it reduce-scatters it over DP > 1, else 0)."""
    return {"base": 1.0, "per_group": float(process_groups), "holes": small_transient(heap),
            "comm": float(reduced_bytes), "moe": 1.0 if local_experts else 0.0,
            "per_local_expert": float(local_experts)}


def unseen(*, process_groups: int, local_experts: int, heap: Mapping[str, int] | None, reduced_bytes: float = 0.0,
           constants: CpuConstants = CPU) -> tuple[float, dict[str, float]]:
    """(bytes, by part) a rank holds beyond its tracked peak: the computed heap part and each constant's part."""
    f = features(process_groups=process_groups, local_experts=local_experts, heap=heap, reduced_bytes=reduced_bytes)
    parts = {k: getattr(constants, k) * v for k, v in f.items()}
    parts["heap high-water"] = heap_extra(heap)
    return sum(parts.values()), parts


def describe(parts: Mapping[str, float], *, process_groups: int, local_experts: int,
             constants: CpuConstants = CPU) -> str:
    experts = (f" + MoE {parts['moe'] / MiB:.0f} MiB + {local_experts} local experts x "
               f"{constants.per_local_expert / MiB:.1f} MiB" if local_experts else "")
    comm = f" + distributed optimizer's gloo collectives {parts['comm'] / MiB:.0f} MiB" if parts["comm"] else ""
    return (f"computed: the heap's high-water mark over the tracked peak {parts['heap high-water'] / MiB:.0f} MiB; "
            f"measured: a megatron-core CPU training rank (gloo, 1 thread; other thread counts not measured) "
            f"{constants.base / MiB:.0f} MiB + {process_groups} gloo groups x {constants.per_group / MiB:.1f} MiB"
            f"{experts} + heap holes {parts['holes'] / MiB:.0f} MiB{comm} ({MEASURED_BY})")
