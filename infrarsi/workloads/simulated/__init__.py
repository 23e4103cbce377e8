"""Simulated GPU clusters: an analytical model of Megatron-style training of decoder-only transformers.

What it is for: measuring the search at scale (8-1024 GPUs, dense and MoE) against a known optimum
(:func:`exhaustive_optimum`), and asking what-if questions ("does 70B fit on 32 H200 with PP 4?")
without a cluster. Same knob names as the catalog (``infrarsi/knobs/catalog.py``), same log lines as
Megatron-LM (parsed by ``infrarsi/adapters/megatron_log.py``), a real ``torch.OutOfMemoryError`` text and
exit code 1 when a setting does not fit.

The model, per GPU (all times in seconds, memory in bytes)::

    iteration = pipeline(m micro-batches) + exposed DP grad sync + exposed param all-gather + optimizer + fixed
    pipeline  = m * t_stage_max + (p - 1) / v * t_stage_mean + exposed p2p            (bubble (p-1)/(v*m))
    t_stage   = layers/p * t_layer (+ logits + cross-entropy on the last stage)
    t_layer   = GEMMs (FLOPs / (peak * eff(M, N, K)))      -- thin TP slices, small M are less efficient
              + flash attention (FLOPs / (peak * attn_eff)) + memory-bound element-wise work
              + exposed TP collectives (all-reduce, or AG+RS with sequence parallel; 15% with tp_comm_overlap;
                latency one constant per collective, or NCCL's ring model: GPUSpec.collective_latency)
              + context-parallel KV ring (overlapped with attention) + MoE dispatch (all-to-all or all-gather)
              + recompute (selective: attention core again; full: the whole forward again)
              floor: CPU launch time per layer (small slices become launch-bound)
              + with GPUSpec.small_work_terms (off here, on where `infrarsi estimate` prices a real launch):
                per-kernel GPU gaps, NCCL's collective latency, GEMMs of less than one wave of tiles, the GEMM
                memory bound, a host round trip per pipeline p2p exchange (small_work.py, each with its source)
              + with SimWorkload.kernels = "eager" (a torchtitan launch): eager PyTorch's unfused kernels, fp32
                cross-entropy, AdamW's implementation, FSDP2's copies and NCCL's SMs beside compute (eager.py)

FLOPs follow Megatron's ``num_floating_point_operations`` (GQA, SwiGLU, MoE top-k, causal attention
counted at half); the reported TFLOP/s per GPU and MFU use it (MFU against the bf16 dense peak, fp8 runs
included). Memory follows Korthikanti et al. 2022 (Table 2) generalised to GQA, SwiGLU and MoE, with flash
attention (no s^2 term), bf16 weights + fp32 main grads + fp32 master + Adam (18 bytes/param; the
distributed optimizer shards the 12 optimizer bytes over data parallel), the first pipeline stage holding
the most micro-batches (p of them, x (1 + (p-1)/(p*v)) when interleaved), the last stage holding the
logits, and a caching-allocator fragmentation margin. Over capacity = OOM, no step time.

Data parallel: fp32 gradients are reduce-scattered (distributed optimizer) or all-reduced, bf16 parameters
all-gathered; a group spread over nodes gets one NIC per member per node. overlap_grad_reduce hides the
sync behind the last micro-batch's backward, overlap_param_gather behind the first forward. MoE: expert TP
= TP (Megatron's default); the busiest expert-parallel rank sets the pace (imbalance grows with EP); the
all-to-all dispatcher moves top-k token copies, the all-gather one gathers the whole EP x TP group's tokens.
fp8: GEMMs at the fp8 peak with a recipe-dependent efficiency, plus quantisation passes; bf16 = false
trains in fp32 (TF32 GEMMs, 4-byte activations, 16 bytes/param).

Run one trial as a process (what the adapter launches)::

    python -m infrarsi.workloads.simulated --workload dense8b-h100x8 \
        --setting '{"tensor_parallel": 2, "data_parallel": 4, "distributed_optimizer": true}' --seed 1

or in-process (benchmarks): ``simulate("dense8b-h100x8", setting, seed=1)``.

Layout of the package: ``hardware`` (GPU table), ``workload`` (models on clusters, the reference table),
``space`` (the knob space), ``layout`` (a setting as the cost model reads it; FLOPs, parameters),
``memory`` and ``step_time`` (the cost model), ``trial`` (:func:`simulate`), ``optimum``
(:func:`exhaustive_optimum`), ``process`` (the log-printing process).
"""

from __future__ import annotations

from .hardware import HARDWARE, GiB, GPUSpec, MiB, gpu
from .layout import _imbalance, _Layout, _layout, model_flops_per_iteration, param_counts
from .memory import FRAGMENTATION, NONTORCH_BYTES, TP_OVERLAP_BUFFERS, MemoryBreakdown, _memory, memory
from .optimum import Optimum, exhaustive_optimum, iter_valid
from .process import main
from .space import SIM_KNOBS, space_for
from .step_time import (
    COLL_LATENCY_S, ELEM_EFF, FIXED_ITER_S, FP8_CAST_PASSES, FP8_GEMM_EFF, GEMM_F0, GEMM_M0, GEMM_N0, IB_LATENCY_S,
    OPT_BYTES_PER_PARAM, TP_OVERLAP_EXPOSED, TP_OVERLAP_GEMM_SLOWDOWN, _step_time,
)
from .trial import DEFAULT_NOISE_CV, SimResult, _noise, check_setting, simulate
from .workload import WORKLOADS, ModelSpec, SimWorkload, get_workload, workload_from_args

__all__ = [
    "COLL_LATENCY_S", "DEFAULT_NOISE_CV", "ELEM_EFF", "FIXED_ITER_S", "FP8_CAST_PASSES", "FP8_GEMM_EFF",
    "FRAGMENTATION", "GEMM_F0", "GEMM_M0", "GEMM_N0", "HARDWARE", "IB_LATENCY_S", "NONTORCH_BYTES",
    "OPT_BYTES_PER_PARAM", "SIM_KNOBS", "TP_OVERLAP_BUFFERS", "TP_OVERLAP_EXPOSED", "TP_OVERLAP_GEMM_SLOWDOWN",
    "WORKLOADS", "GiB", "GPUSpec", "MemoryBreakdown", "MiB", "ModelSpec", "Optimum", "SimResult", "SimWorkload",
    "check_setting", "exhaustive_optimum", "get_workload", "gpu", "iter_valid", "main", "memory",
    "model_flops_per_iteration", "param_counts", "simulate", "space_for", "workload_from_args",
    # the cost model's internals, for the perturbed landscapes (workloads/variants.py) and the tests
    "_Layout", "_imbalance", "_layout", "_memory", "_noise", "_step_time",
]
