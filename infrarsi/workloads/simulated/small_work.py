"""The cost model's terms for small work per GPU (``GPUSpec.small_work_terms``; off for the benchmark landscapes,
on where `infrarsi estimate` prices a real launch): fixed costs that a large layer hides and a small one does not.

- per-kernel GPU overhead: every kernel costs a fixed gap on the GPU even when the CPU launches ahead of it;
- collective latency: NCCL's own latency model (ring, Simple protocol) per collective, beside its bandwidth;
- GEMM tile and wave quantisation: a GEMM's output is cut into thread-block tiles that run on the SMs in waves;
  a GEMM of fewer tiles than SMs leaves SMs idle;
- a GEMM never runs faster than it reads and writes its operands (the memory bound of the same guide);
- the pipeline's per-micro-batch cost: Megatron synchronises the device after every p2p exchange.

Each constant names its source (document, section or figure, value). None is fitted to measured step times.
"""

from __future__ import annotations

import math

from .hardware import GPUSpec

# Per-kernel GPU-side overhead. NVIDIA Technical Blog, "Getting Started with CUDA Graphs" (A. Gray, 2019,
# https://developer.nvidia.com/blog/cuda-graphs/): a kernel of ~2.9 us runs at 3.8 us per kernel when launched
# back to back on a stream with no host synchronisation (the CPU ahead of the GPU), 3.4 us inside a CUDA graph:
# ~0.9 us of gap per kernel that launching ahead does not hide. Megatron's eager PyTorch kernels pay it.
KERNEL_GAP_S = 0.9e-6
# Kernels of one transformer layer, one micro-batch, forward + backward, as Megatron-core with Transformer Engine
# launches them (an estimate from the layer's operations, not a measurement, and not fitted): forward ~20 (fused norm + QKV GEMM, RoPE on q and k, attention, output
# GEMM, bias-dropout-add, fused norm + FC1, activation, FC2, bias-dropout-add, their casts and 2-4 TP
# collectives), backward about twice that (input and weight gradients per GEMM).
KERNELS_PER_LAYER = 60
# Embedding, output layer and cross-entropy of one micro-batch, forward + backward (counted the same way).
KERNELS_PER_MICROBATCH = 15

# Pipeline p2p: megatron-core (0.16.1, pipeline_parallel/p2p_communication.py) calls torch.cuda.synchronize() after
# every batched send/recv (batch_p2p_comm and batch_p2p_sync, both on by default), so each exchange drains the GPU's
# queue and the next kernel waits for a host round trip. The same CUDA Graphs post: 9.6 us per 2.9 us kernel when
# the host synchronises after each launch, so ~6.7 us of synchronise + launch per exchange.
PIPELINE_SYNC_S = 9.6e-6 - 2.9e-6

# Tile and wave quantisation. NVIDIA Deep Learning Performance documentation, "Matrix Multiplication Background
# User's Guide" (https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/), sections
# "GPU Implementation" (the output is cut into thread-block tiles; cuBLAS tiles 256x128, 128x256, 128x128, 256x64,
# 64x256, 128x64, 64x128, 64x64, "larger tiles have more data reuse ... more efficient than smaller tiles"),
# "Tile Quantization" and "Wave Quantization" (tiles run in waves of one per SM). The model's fitted terms already
# hold a large GEMM's partial last wave (step_time.GEMM_F0) and the padding of thin dimensions (GEMM_M0, GEMM_N0).
# What they never saw is a GEMM of less than one wave of the largest tile, where SMs sit idle: it takes its best
# tile, busy share min(1, tiles / SMs) times the tile's data reuse tm*tn/(tm+tn) (multiply-adds per element
# loaded) over 256x128's (smaller tiles run less efficiently).
GEMM_TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64))
_REUSE_MAX = 256 * 128 / (256 + 128)


def _tiles(mm: float, n: float, tm: int, tn: int) -> int:
    return math.ceil(mm / tm) * math.ceil(n / tn)


def occupancy(sm_count: int, mm: float, n: float) -> float:
    """Share of the GPU an (mm x k) @ (k x n) GEMM keeps busy, over its best tile: 1.0 once the largest tile
    makes at least one full wave (the fitted large-GEMM efficiency covers the rest), less below it."""
    if min(_tiles(mm, n, 256, 128), _tiles(mm, n, 128, 256)) >= sm_count:
        return 1.0
    return max(min(1.0, _tiles(mm, n, tm, tn) / sm_count) * (tm * tn / (tm + tn)) / _REUSE_MAX
               for tm, tn in GEMM_TILES)


def gemm_memory_s(mm: float, n: float, k: float, a: int, hbm_bytes_per_s: float) -> float:
    """Seconds to read A (mm x k) and B (k x n) and write C (mm x n) once at HBM bandwidth: the same guide's
    "Math and Memory Bounds" section (a GEMM is memory-bound when its arithmetic intensity is under the GPU's
    ops:byte ratio)."""
    return (mm * k + k * n + mm * n) * a / hbm_bytes_per_s


def layer_kernel_overhead_s(spec: GPUSpec, full_recompute: bool) -> float:
    """GPU-side kernel gaps of one layer, one micro-batch (full recompute launches the forward's kernels again)."""
    if not spec.small_work_terms:
        return 0.0
    return KERNELS_PER_LAYER * KERNEL_GAP_S * (4 / 3 if full_recompute else 1.0)


def microbatch_kernel_overhead_s(spec: GPUSpec) -> float:
    """GPU-side kernel gaps of the embedding, output layer and loss of one micro-batch."""
    return KERNELS_PER_MICROBATCH * KERNEL_GAP_S if spec.small_work_terms else 0.0


def pipeline_sync_s(spec: GPUSpec, exchanges: float) -> float:
    """Host round trips of ``exchanges`` pipeline p2p exchanges (each followed by a device synchronise)."""
    return exchanges * PIPELINE_SYNC_S if spec.small_work_terms else 0.0
