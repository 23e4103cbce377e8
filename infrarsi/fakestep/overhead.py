"""What no tensor tracker can see, as measured constants.

A tracker counts tensor storages. A process's peak also holds what is not a tensor: on the CPU, the Python
interpreter and torch's libraries, the OpenMP pool's thread stacks, oneDNN's scratchpads and primitive caches, and
glibc's heap, which keeps freed activation-sized chunks (a medium allocation comes from the heap once glibc's
dynamic mmap threshold has risen past it); on a GPU, the CUDA context, cuBLAS workspaces, NCCL buffers and the
caching allocator's fragmentation. Two measured constants cover it:

    unseen = base[kind, threads, dtype] + fragmentation x (tracked activations + temporaries)

``base`` is what a process of the job's kind holds with (almost) no tensors; ``fragmentation`` is what the
allocator adds per byte of short-lived tensors. Both are measured, never guessed, by

    .venv/bin/python scripts/bench_estimate.py --calibrate

(:func:`infrarsi.estimate.measure.calibrate`), which runs minigpt for real at a tiny size (1 layer, hidden 64, seq
16: tensors of a few hundred KiB) for ``base``, and at a medium size that is not the shipped contract's shape (2
layers, hidden 192, seq 512, micro-batch 8) for ``fragmentation``: measured peak data segment (the figure
RLIMIT_DATA governs and a trial reports) minus the estimate's tracked bytes. The shipped contract's settings are
then a held-out test of both.

torchtitan has its own pair (adapters/torchtitan/estimate.py's RANK_BASE and RANK_FRAGMENTATION, handed in as
``rank``), measured on the process its trials really are (torchtitan.train through the CPU launcher under torchrun,
2 ranks on gloo, with its tokenizer and dataloader) by

    .venv/bin/python scripts/bench_estimate.py --calibrate-torchtitan

which runs contracts/torchtitan-cpu.toml's job for real at local batch 1, seq 32 and with each activation
checkpointing mode, and fits base + fragmentation x temporaries to the reported peaks minus the fake step's tracked
bytes (FRAGMENTING: which tracked bytes fragment). With minigpt's fragmentation (0.674 per byte of activations and
temporaries, an fp32 workload's heap) and the base of a one-process step without the dataloader (1466 MiB), no
activation checkpointing was estimated at 2.15 GiB against 2.04 GiB measured, and the tuner priced it P(OOM) 0.55
under the contract's 2.25 GiB cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..contract.model import Contract

MiB = 2**20

# Measured on the 2-core CPU machine with torch 2.13.0 by the command above (its output, rounded to 0.1 MiB).
BASE: dict[tuple[str, int, str], float] = {
    ("cpu", 1, "fp32"): 252.0 * MiB,
    ("cpu", 2, "fp32"): 309.4 * MiB,
    ("cpu", 1, "bf16"): 268.4 * MiB,
    ("cpu", 2, "bf16"): 327.1 * MiB,
}
FRAGMENTATION: dict[str, float] = {"cpu": 0.674}
# The tracked categories fragmentation is per byte of ("transient bytes"): activations + temporaries.
FRAGMENTING: dict[str, tuple[str, ...]] = {"cpu": ("Activation", "Temp")}
MEASURED_BY = "scripts/bench_estimate.py --calibrate (torch 2.13.0 CPU, 2 cores)"

# A framework whose CPU rank is measured on its own (its estimate module's constants: a torchtitan.train rank, the
# megatron-core CPU training loop of adapters/megatron/estimate/overhead.py) hands unseen_bytes that measurement as
# ``rank``.

# No GPU was available to measure on: a GPU's base is the analytical model's (priors/offline.py, 1.25 GiB:
# CUDA context + cuBLAS workspaces + NCCL buffers) and its fragmentation is not counted; both labelled as such.
# Override with --unseen-gib from an empty job measured on your GPU.
GPU_UNMEASURED = 1.25 * 2**30


def unseen_bytes(contract: Contract, *, threads: int | None = None, bf16: bool = False, transient_bytes: float = 0.0,
                 override_gib: float | None = None,
                 rank: Callable[[], tuple[float, str]] | None = None) -> tuple[float, str]:
    """(bytes, where they come from) to add to the tracked peak of one rank of ``contract``'s hardware;
    ``transient_bytes`` are the tracked activations + temporaries at the peak. On the CPU, ``rank`` is the
    framework's own measured rank, (bytes, source), when its estimate module has one; else the embedded workload's
    process measured here."""
    if override_gib is not None:
        return override_gib * 2**30, f"given: {override_gib:g} GiB"
    kind = str(contract.hardware.kind or "cpu").lower()
    if kind == "cpu":
        t = max(1, int(threads or 1))
        if rank is not None:
            return rank()
        frag = FRAGMENTATION["cpu"] * transient_bytes
        t = t if ("cpu", t, "fp32") in BASE else max(k[1] for k in BASE if k[0] == "cpu")
        base = BASE[("cpu", t, "bf16" if bf16 else "fp32")]
        what = f"CPU process at {t} thread(s)"
        return base + frag, (f"measured: {what} {base / MiB:.0f} MiB + allocator {FRAGMENTATION['cpu']:.2f} x "
                             f"{transient_bytes / MiB:.0f} MiB transient ({MEASURED_BY})")
    return GPU_UNMEASURED, ("not measured (no GPU here): the analytical 1.25 GiB for CUDA context, cuBLAS workspaces "
                            "and NCCL buffers, no fragmentation; set --unseen-gib from a measured empty job on your GPU")
