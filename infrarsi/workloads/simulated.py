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
              + exposed TP collectives (all-reduce, or AG+RS with sequence parallel; 15% with tp_comm_overlap)
              + context-parallel KV ring (overlapped with attention) + MoE dispatch (all-to-all or all-gather)
              + recompute (selective: attention core again; full: the whole forward again)
              floor: CPU launch time per layer (small slices become launch-bound)

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
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..knobs import Constraint, KnobSpace, Setting
from ..knobs import catalog
from ..transformer import Transformer

GiB = 2**30
MiB = 2**20
DEFAULT_NOISE_CV = 0.02  # run-to-run step-time CV of a quiet dedicated cluster


# ============================================================================ hardware
class GPUSpec(BaseModel):
    """One GPU kind in an 8-GPU NVLink node, nodes joined by InfiniBand (one NIC per GPU).

    Bandwidths are what NCCL reaches (bus bandwidth), not the marketing figure: NVLink 4 is 450 GB/s
    per direction, ring collectives reach ~360 GB/s; a 400 Gb/s NDR NIC is 50 GB/s, ~45 GB/s reached.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    peak_bf16_flops: float  # dense, per GPU
    peak_fp8_flops: float | None  # None: no fp8 tensor cores
    memory_bytes: int  # what torch sees as total capacity
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # achieved collective bus bandwidth inside a node
    ib_bytes_per_s: float  # achieved per-GPU inter-node bandwidth (one NIC per GPU)
    gpus_per_node: int = 8
    gemm_eff: float  # large bf16 GEMM efficiency (achieved / peak)
    attn_eff_fwd: float  # flash attention forward, fraction of peak
    attn_eff_bwd: float
    fp8_recipes: tuple[str, ...] = ()
    launch_bound_s: float = 0.0  # CPU time to launch one layer's forward+backward kernels


HARDWARE: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        # A100 SXM 80GB: 312 TF bf16, no fp8, 2.04 TB/s, NVLink 3 (300 GB/s/dir), HDR 200 Gb/s per GPU.
        GPUSpec(name="A100", peak_bf16_flops=312e12, peak_fp8_flops=None, memory_bytes=80 * GiB,
                hbm_bytes_per_s=2.04e12, nvlink_bytes_per_s=230e9, ib_bytes_per_s=22e9, gemm_eff=0.80,
                attn_eff_fwd=0.60, attn_eff_bwd=0.48, fp8_recipes=(), launch_bound_s=240e-6),
        # H100 SXM 80GB: 989 TF bf16 / 1979 fp8, 3.35 TB/s, NVLink 4 (450 GB/s/dir), NDR 400 Gb/s per GPU.
        GPUSpec(name="H100", peak_bf16_flops=989e12, peak_fp8_flops=1979e12, memory_bytes=int(79.6 * GiB),
                hbm_bytes_per_s=3.35e12, nvlink_bytes_per_s=360e9, ib_bytes_per_s=45e9, gemm_eff=0.74,
                attn_eff_fwd=0.55, attn_eff_bwd=0.42, fp8_recipes=("delayed", "tensorwise", "blockwise"),
                launch_bound_s=200e-6),
        # H200 141GB: H100 compute (same GEMM efficiency) with HBM3e (4.8 TB/s); same NVLink and NIC.
        GPUSpec(name="H200", peak_bf16_flops=989e12, peak_fp8_flops=1979e12, memory_bytes=int(140.4 * GiB),
                hbm_bytes_per_s=4.8e12, nvlink_bytes_per_s=360e9, ib_bytes_per_s=45e9, gemm_eff=0.74,
                attn_eff_fwd=0.55, attn_eff_bwd=0.42, fp8_recipes=("delayed", "tensorwise", "blockwise"),
                launch_bound_s=200e-6),
        # B200 180GB: 2.25 PF bf16 / 4.5 PF fp8 dense, 8 TB/s, NVLink 5 (900 GB/s/dir), 400 Gb/s per GPU.
        GPUSpec(name="B200", peak_bf16_flops=2250e12, peak_fp8_flops=4500e12, memory_bytes=int(179 * GiB),
                hbm_bytes_per_s=8.0e12, nvlink_bytes_per_s=720e9, ib_bytes_per_s=45e9, gemm_eff=0.70,
                attn_eff_fwd=0.50, attn_eff_bwd=0.40,
                fp8_recipes=("delayed", "tensorwise", "blockwise", "mxfp8"), launch_bound_s=180e-6),
    )
}
_GPU_ALIASES = {"A100-80GB": "A100", "H100-80GB": "H100", "H100-SXM": "H100", "H200-141GB": "H200", "B200-180GB": "B200"}


def gpu(kind: str) -> GPUSpec:
    """The GPU spec for ``kind`` (A100, H100, H200, B200 or an alias like H100-80GB)."""
    name = _GPU_ALIASES.get(kind, kind)
    if name not in HARDWARE:  # "NVIDIA H100 80GB HBM3", "H200-140GB": the generation named inside
        name = next((k for k in HARDWARE if k in kind.upper()), name)
    if name not in HARDWARE:
        raise ValueError(f"gpu {kind!r} is not in the hardware table; use one of {', '.join(HARDWARE)}")
    return HARDWARE[name]


# Constants of the model that are not hardware facts (fitted once against Megatron-LM's published
# H100 table, see tests/workloads/test_simulated.py::test_calibration_megatron_readme).
GEMM_M0 = 64.0  # rows at which a GEMM reaches half its row efficiency: eff ~ M / (M + M0)
GEMM_N0 = 128.0  # same for the N and K dims (thin TP slices)
GEMM_F0 = 4e9  # FLOPs at which a GEMM reaches half its size efficiency (wave quantisation, tails)
ELEM_EFF = 0.45  # element-wise kernels (norms, residuals, activations, casts) reach this fraction of HBM bandwidth
TP_OVERLAP_EXPOSED = 0.15  # share of TP communication left exposed by tp_comm_overlap
TP_OVERLAP_GEMM_SLOWDOWN = 0.04  # GEMMs share SMs with the overlapped collectives
COLL_LATENCY_S = 12e-6  # per collective launch inside a node
IB_LATENCY_S = 25e-6
OPT_BYTES_PER_PARAM = 36  # Adam step: read p, g, m, v (fp32), write p, m, v, bf16 copy
FIXED_ITER_S = 4e-3  # data loader, loss all-reduce, logging, Python per iteration
NONTORCH_BYTES = int(1.25 * GiB)  # CUDA context, cuBLAS workspaces, NCCL buffers (outside the allocator)
TP_OVERLAP_BUFFERS = int(0.75 * GiB)  # Transformer Engine userbuffers for tp_comm_overlap
FRAGMENTATION = 1.05  # reserved / allocated at the peak (caching allocator); MoE: more
FP8_GEMM_EFF = {"delayed": 0.80, "tensorwise": 0.78, "blockwise": 0.66, "mxfp8": 0.80}  # x bf16 eff at 2x peak
FP8_CAST_PASSES = {"delayed": 1.0, "tensorwise": 1.6, "blockwise": 1.8, "mxfp8": 1.3}


# ============================================================================ workloads
class ModelSpec(BaseModel):
    """A decoder-only transformer (Megatron names). MoE when ``num_experts`` > 0 (every layer MoE)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=8)
    num_attention_heads: int = Field(ge=1)
    num_query_groups: int | None = None  # None = multi-head attention (groups = heads)
    kv_channels: int | None = None  # None = hidden / heads
    ffn_hidden_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    seq_length: int = Field(ge=1)
    global_batch_size: int = Field(ge=1)
    swiglu: bool = True
    untie_embeddings_and_output_weights: bool = True
    dropout: bool = False  # attention/hidden dropout > 0 (stores 1-byte masks)
    flash_attention: bool = True
    num_experts: int = 0
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None  # None = ffn_hidden_size
    moe_shared_expert_intermediate_size: int = 0
    moe_load_cv: float = 0.15  # per-expert token-load CV after load balancing (drives EP imbalance)

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        g = self.num_query_groups or self.num_attention_heads
        if self.num_attention_heads % g:
            raise ValueError(f"num_query_groups {g} must divide num_attention_heads {self.num_attention_heads}")
        if self.num_experts and not 1 <= self.moe_router_topk <= self.num_experts:
            raise ValueError(f"moe_router_topk {self.moe_router_topk} must be in 1..num_experts ({self.num_experts})")
        return self

    @property
    def groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size


class SimWorkload(BaseModel):
    """A model on a cluster: ``nodes`` x 8 GPUs of kind ``gpu``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    model: ModelSpec
    gpu: str = "H100"
    nodes: int = Field(1, ge=1)
    doc: str = ""
    baseline: dict[str, Any] = {}
    """A typical first launch (what an engineer writes before tuning); knobs not named take defaults."""
    gpu_spec: GPUSpec | None = None
    """Replaces the hardware table's spec for ``gpu`` (a what-if GPU, or a perturbed one: workloads/variants.py)."""

    @model_validator(mode="after")
    def _check(self) -> "SimWorkload":
        gpu(self.gpu)
        return self

    @cached_property
    def world_size(self) -> int:
        return self.nodes * self.spec.gpus_per_node

    @cached_property
    def spec(self) -> GPUSpec:
        return self.gpu_spec or gpu(self.gpu)


def _llama(**kw: Any) -> ModelSpec:
    return ModelSpec(swiglu=True, untie_embeddings_and_output_weights=True, **kw)


_TYPICAL = {"distributed_optimizer": False, "overlap_grad_reduce": False, "overlap_param_gather": False}

WORKLOADS: dict[str, SimWorkload] = {
    w.name: w
    for w in (
        SimWorkload(
            name="dense8b-h100x8", gpu="H100", nodes=1,
            doc="Llama-3-8B-like dense model (GQA 32/8, SwiGLU 14336, vocab 128256) on one 8 x H100 node, "
                "seq 8192, global batch 128.",
            model=_llama(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                         ffn_hidden_size=14336, vocab_size=128256, seq_length=8192, global_batch_size=128),
            baseline={"tensor_parallel": 4, "data_parallel": 2, "sequence_parallel": True,
                      "recompute_granularity": "full", **_TYPICAL},
        ),
        SimWorkload(
            name="dense70b-h100x64", gpu="H100", nodes=8,
            doc="Llama-3-70B-like dense model (80 layers, GQA 64/8, SwiGLU 28672) on 8 nodes x 8 H100, "
                "seq 8192, global batch 128.",
            model=_llama(num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
                         ffn_hidden_size=28672, vocab_size=128256, seq_length=8192, global_batch_size=128),
            baseline={"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 2, "sequence_parallel": True,
                      "recompute_granularity": "full", "distributed_optimizer": True,
                      "overlap_grad_reduce": False, "overlap_param_gather": False},
        ),
        SimWorkload(
            name="moe47b-h100x64", gpu="H100", nodes=8,
            doc="Mixtral-8x7B-like MoE (46.7B total, 12.9B active: 8 experts, top-2, GQA 32/8) on 8 nodes x "
                "8 H100, seq 4096, global batch 256. (On 8 GPUs every setting is out of memory: 18 bytes x "
                "45B expert parameters / 8 GPUs = 101 GB > 80 GB.)",
            model=_llama(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                         ffn_hidden_size=14336, vocab_size=32000, seq_length=4096, global_batch_size=256,
                         num_experts=8, moe_router_topk=2),
            baseline={"tensor_parallel": 2, "pipeline_parallel": 4, "expert_parallel": 4, "data_parallel": 8,
                      "sequence_parallel": True, "recompute_granularity": "full", **_TYPICAL},
        ),
        SimWorkload(
            name="moe16b-h100x32", gpu="H100", nodes=4,
            doc="Fine-grained MoE, DeepSeek-V2-Lite/Moonlight-like (16.9B total, 2.8B active: 64 experts of "
                "1408, top-6, 2 shared experts, 28 layers, hidden 2048) on 4 nodes x 8 H100, seq 4096, "
                "global batch 512.",
            model=ModelSpec(num_layers=28, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=10944,
                            vocab_size=102400, seq_length=4096, global_batch_size=512, num_experts=64,
                            moe_router_topk=6, moe_ffn_hidden_size=1408, moe_shared_expert_intermediate_size=2816),
            baseline={"tensor_parallel": 2, "expert_parallel": 8, "data_parallel": 16, "sequence_parallel": True,
                      "recompute_granularity": "full", **_TYPICAL},
        ),
    )
}

_MODEL_KEYS = set(ModelSpec.model_fields)
_WORKLOAD_KEYS = {"gpu", "nodes", "reference", "workload", "name", "train_iters", "seed", "noise_cv", "doc"}


def workload_from_args(args: Mapping[str, Any]) -> SimWorkload:
    """A workload from a contract's ``[workload.args]``.

    Either ``reference = "dense8b-h100x8"`` (optionally overriding model fields, ``gpu`` or ``nodes``),
    or the model dims themselves (Megatron names: num_layers, hidden_size, ...) plus ``gpu`` and ``nodes``.
    ``train_iters``, ``seed`` and ``noise_cv`` are run settings and are ignored here."""
    a = dict(args)
    ref = a.get("reference") or a.get("workload")
    unknown = sorted(set(a) - _MODEL_KEYS - _WORKLOAD_KEYS)
    if unknown:
        raise ValueError(f"workload.args: unknown key(s) {unknown}; use reference, gpu, nodes or model fields "
                         f"({', '.join(sorted(_MODEL_KEYS))})")
    model_over = {k: v for k, v in a.items() if k in _MODEL_KEYS}
    try:
        if ref:
            if ref not in WORKLOADS:
                raise ValueError(f"workload.args.reference {ref!r} is unknown; use one of {', '.join(WORKLOADS)}")
            base = WORKLOADS[ref]
            if not model_over and "gpu" not in a and "nodes" not in a:
                return base
            model = ModelSpec(**{**base.model.model_dump(), **model_over})
            gpu_kind, nodes = str(a.get("gpu", base.gpu)), int(a.get("nodes", base.nodes))
            if model == base.model and (gpu(gpu_kind).name, nodes) == (base.gpu, base.nodes):
                return base  # the reference, its dims repeated
            return SimWorkload(name=str(a.get("name") or f"{ref}-custom"), model=model, gpu=gpu_kind, nodes=nodes,
                               baseline=base.baseline)
        missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
                               "seq_length", "global_batch_size") if k not in a]
        if missing:
            raise ValueError(f"workload.args needs reference = <name> or the model fields {missing}")
        return SimWorkload(name=str(a.get("name") or "custom"), model=ModelSpec(**model_over),
                           gpu=str(a.get("gpu", "H100")), nodes=int(a.get("nodes", 1)))
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"workload.args.{loc}: {first['msg'].removeprefix('Value error, ')}") from None


def get_workload(workload: str | SimWorkload | Mapping[str, Any]) -> SimWorkload:
    """A workload by registry name, as given, or from contract-style args."""
    if isinstance(workload, SimWorkload):
        return workload
    if isinstance(workload, str):
        if workload not in WORKLOADS:
            raise ValueError(f"unknown simulated workload {workload!r}; known: {', '.join(WORKLOADS)}")
        return WORKLOADS[workload]
    return workload_from_args(workload)


# ============================================================================ knob space
# The knobs the simulator models, in the order exhaustive enumeration assigns them (layout first).
SIM_KNOBS = (
    "tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "virtual_pipeline",
    "expert_parallel", "micro_batch_size", "sequence_parallel", "recompute_granularity", "distributed_optimizer",
    "bf16", "fp8_recipe", "moe_token_dispatcher", "tp_comm_overlap", "overlap_grad_reduce",
    "overlap_param_gather", "moe_grouped_gemm",
)
_MOE_ONLY = ("expert_parallel", "moe_token_dispatcher", "moe_grouped_gemm")
# Knobs each catalog constraint reads (lets enumeration prune early); unknown names are checked at the end.
_DEPS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "world_size_product": ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel"),
    "expert_grid": ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "expert_parallel"),
    "tp_divides_heads": ("tensor_parallel",),
    "tp_divides_query_groups": ("tensor_parallel",),
    "pp_divides_layers": ("pipeline_parallel",),
    "ep_divides_experts": ("expert_parallel",),
    "cp_divides_seq": ("context_parallel",),
    "global_batch_divisible": ("micro_batch_size", "data_parallel"),
    "sequence_parallel_needs_tp": ("sequence_parallel", "tensor_parallel"),
    "virtual_pipeline_fits": ("virtual_pipeline", "pipeline_parallel"),
    "recompute_layers_fit": ("recompute_granularity", "pipeline_parallel", "virtual_pipeline"),
    "overlap_param_gather_needs": ("overlap_param_gather", "distributed_optimizer", "overlap_grad_reduce"),
    "tp_comm_overlap_needs": ("tp_comm_overlap", "tensor_parallel", "sequence_parallel"),
    "fp8_needs_bf16": ("fp8_recipe", "bf16"),
    "bf16_not_with_fp16": ("bf16",),
    "async_tp_needs": ("tensor_parallel",),
    "tp_within_nvlink": ("tensor_parallel",),
    "fp8_supported": ("fp8_recipe",),
}.items()}


def _domain_values(w: SimWorkload) -> dict[str, tuple[Any, ...]]:
    m, world = w.model, w.world_size
    divs = catalog.divisors(world)
    n = w.spec.gpus_per_node
    layer_divs = [v for v in (1, 2, 3, 4, 5, 6, 8) if m.num_layers % v == 0]
    return {
        "tensor_parallel": tuple(d for d in divs if d <= n),
        "pipeline_parallel": tuple(d for d in divs if d <= min(m.num_layers, 32)),
        "context_parallel": tuple(d for d in divs if d <= 8),
        "data_parallel": tuple(divs),
        "virtual_pipeline": tuple(layer_divs),
        "expert_parallel": tuple(d for d in divs if m.num_experts % d == 0) if m.moe else (1,),
        "micro_batch_size": tuple(d for d in (1, 2, 4, 8) if m.global_batch_size % d == 0),
        "fp8_recipe": ("none", *w.spec.fp8_recipes),
        "moe_token_dispatcher": ("allgather", "alltoall"),
    }


def _sim_defaults(w: SimWorkload) -> dict[str, Any]:
    """Megatron's defaults for a launch that says nothing (bf16 on: the workload trains in bf16)."""
    return {**_DEFAULTS_BASE, "data_parallel": w.world_size}


_DEFAULTS_BASE: dict[str, Any] = {
    "tensor_parallel": 1, "pipeline_parallel": 1, "context_parallel": 1, "data_parallel": 1, "virtual_pipeline": 1,
    "expert_parallel": 1, "micro_batch_size": 1, "sequence_parallel": False, "recompute_granularity": "none",
    "distributed_optimizer": False, "bf16": True, "fp8_recipe": "none", "moe_token_dispatcher": "allgather",
    "tp_comm_overlap": False, "overlap_grad_reduce": False, "overlap_param_gather": False, "moe_grouped_gemm": False,
}


def _extra_constraints(w: SimWorkload) -> list[Constraint]:
    spec = w.spec

    def tp_within_nvlink(s: Mapping[str, Any]) -> str | None:
        tp = s.get("tensor_parallel", 1)
        if tp > spec.gpus_per_node:
            return (f"tensor_parallel {tp} spans more than one NVLink domain ({spec.gpus_per_node} GPUs per "
                    f"{spec.name} node); use tensor_parallel <= {spec.gpus_per_node}")
        return None

    def fp8_supported(s: Mapping[str, Any]) -> str | None:
        r = s.get("fp8_recipe", "none")
        if r != "none" and r not in spec.fp8_recipes:
            have = ", ".join(spec.fp8_recipes) or "none (no fp8 tensor cores)"
            return f"fp8_recipe {r!r} is not supported on {spec.name}; supported: {have}"
        return None

    return [Constraint("tp_within_nvlink", tp_within_nvlink), Constraint("fp8_supported", fp8_supported)]


_SPACES: dict[str, KnobSpace] = {}


def _space_cached(w: SimWorkload) -> KnobSpace:
    key = w.model_dump_json()
    if key in _SPACES:
        return _SPACES[key]
    m = w.model
    doms = _domain_values(w)
    dflt = _sim_defaults(w)
    knobs = []
    for name in SIM_KNOBS:
        if name in _MOE_ONLY and not m.moe:
            continue
        k = catalog.knob(name)
        dom = doms.get(name, k.domain)
        knobs.append(k.with_domain(dom, dflt[name] if dflt[name] in dom else None))
    cons = catalog.workload_constraints(
        num_layers=m.num_layers, num_attention_heads=m.num_attention_heads, num_query_groups=m.groups,
        num_experts=m.num_experts or None, seq_length=m.seq_length, global_batch_size=m.global_batch_size,
        world_size=w.world_size, defaults={**catalog.DEFAULTS, **dflt},
    )
    space = _SPACES[key] = KnobSpace(knobs, [*cons, *_extra_constraints(w)])
    return space


def space_for(workload: str | SimWorkload | Mapping[str, Any]) -> KnobSpace:
    """The simulated workload's knob space: catalog knob names and rules, domains narrowed to the cluster
    (parallel degrees divide the world size, TP within a node, fp8 recipes the GPU supports); MoE knobs
    only on MoE models. Defaults are Megatron's (bf16 on)."""
    return _space_cached(get_workload(workload))


# ============================================================================ the model
@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of the most loaded GPU, bytes. ``reserved`` is what the caching allocator holds at the
    peak (what capacity governs); ``device_used`` adds memory outside the allocator."""

    weights_and_optimizer: float
    activations: float
    transient: float
    allocated: float
    reserved: float
    device_used: float
    capacity: float
    stage: str  # "first" or "last" pipeline stage (the one that peaks)
    largest_alloc: float  # the biggest single transient allocation (what an OOM "tried to allocate")

    @property
    def oom(self) -> bool:
        return self.device_used > self.capacity


@dataclass(frozen=True)
class SimResult:
    """One simulated trial. OOM: ``step_time_s`` is None (as in real life, nothing was measured)."""

    step_time_s: float | None
    peak_memory_bytes: float  # max reserved on the most loaded GPU (the capacity-governed peak)
    oom: bool
    tflops_per_gpu: float | None
    mfu: float | None  # against the bf16 dense peak
    noise_free_step_time_s: float | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    memory: MemoryBreakdown | None = None


class _Layout(NamedTuple):
    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    dp: int
    mbs: int
    nmb: int  # micro-batches per iteration per pipeline
    sp: bool
    rc: str
    do: bool
    ogr: bool
    opg: bool
    tco: bool
    a: int  # activation / parameter bytes: 2 (bf16) or 4 (fp32)
    fp8: str
    disp: str
    gg: bool


def _layout(w: SimWorkload, s: Mapping[str, Any]) -> _Layout:
    v = _DEFAULTS_BASE | dict(s)
    if None in v.values():
        v = _DEFAULTS_BASE | {k: x for k, x in s.items() if x is not None}
    tp, pp, cp = v["tensor_parallel"], v["pipeline_parallel"], v["context_parallel"]
    dp = w.world_size // (tp * pp * cp)
    mbs = v["micro_batch_size"]
    bf16 = bool(v["bf16"])
    return _Layout(tp=tp, pp=pp, vp=v["virtual_pipeline"], cp=cp, ep=v["expert_parallel"] if w.model.moe else 1,
                   dp=dp, mbs=mbs, nmb=max(1, w.model.global_batch_size // (mbs * dp)),
                   sp=bool(v["sequence_parallel"]) and tp > 1, rc=v["recompute_granularity"],
                   do=bool(v["distributed_optimizer"]), ogr=bool(v["overlap_grad_reduce"]),
                   opg=bool(v["overlap_param_gather"]), tco=bool(v["tp_comm_overlap"]), a=2 if bf16 else 4,
                   fp8=v["fp8_recipe"] if bf16 else "none", disp=v["moe_token_dispatcher"], gg=bool(v["moe_grouped_gemm"]))


def model_flops_per_iteration(model: ModelSpec) -> float:
    """Megatron's ``num_floating_point_operations`` for one global batch (fwd + bwd, no recompute):
    :meth:`infrarsi.transformer.Transformer.flops_per_iteration` (causal attention counted at half)."""
    return _transformer(model).flops_per_iteration(convention="megatron")


@lru_cache(maxsize=256)
def param_counts(model: ModelSpec) -> dict[str, float]:
    """Parameters by how they are sharded: ``tp`` (split over TP), ``replicated`` (norms, router),
    ``expert`` (split over EP x expert-TP), ``embedding`` (one V x h matrix). Per layer, and totals
    (:meth:`infrarsi.transformer.Transformer.param_counts`)."""
    return _transformer(model).param_counts()


@lru_cache(maxsize=256)
def _transformer(model: ModelSpec) -> Transformer:
    return Transformer.from_args(model.model_dump())


def _gemm_eff(spec: GPUSpec, mm: float, n: float, k: float) -> float:
    """Achieved / peak for an (mm x k) @ (k x n) GEMM: each thin dimension loses efficiency, and a small
    GEMM (few waves of tiles over the SMs) loses more."""
    size = 2 * mm * n * k
    return (spec.gemm_eff * (mm / (mm + GEMM_M0)) * (n / (n + GEMM_N0)) * (k / (k + GEMM_N0))
            * (size / (size + GEMM_F0)))


def _coll_bw(spec: GPUSpec, n: int, stride: int) -> tuple[float, float]:
    """(bus bandwidth, latency) of a collective over ``n`` ranks spaced ``stride`` apart in rank order.
    Inside one node: NVLink. Across nodes: each node's share of the group drives that many NICs."""
    per_node = spec.gpus_per_node
    if n * stride <= per_node:
        return spec.nvlink_bytes_per_s, COLL_LATENCY_S
    in_node = max(1, min(n, per_node // stride)) if stride < per_node else 1
    return min(spec.nvlink_bytes_per_s, in_node * spec.ib_bytes_per_s), IB_LATENCY_S


def _imbalance(model: ModelSpec, ep: int) -> float:
    """Expected max/mean token load over EP ranks: each rank sums E/ep experts whose loads vary with
    CV ``moe_load_cv``; the max of ep such sums is ~ 1 + cv_rank * sqrt(2 ln ep)."""
    if ep <= 1:
        return 1.0
    cv_rank = model.moe_load_cv / math.sqrt(model.num_experts / ep)
    return 1.0 + cv_rank * math.sqrt(2.0 * math.log(ep))


def _stage_params(w: SimWorkload, lay: _Layout) -> tuple[float, float, float, float]:
    """(dense params, expert params) on one GPU of the first and of the last pipeline stage."""
    m, pc = w.model, param_counts(w.model)
    per = m.num_layers / lay.pp
    body_dense = per * (pc["tp_layer"] / lay.tp + pc["replicated_layer"])
    body_exp = per * pc["expert_layer"] / (lay.ep * lay.tp)  # expert TP = TP (Megatron's default)
    emb = pc["embedding"] / lay.tp
    if lay.pp == 1:
        first = body_dense + emb * (2 if m.untie_embeddings_and_output_weights else 1) + m.hidden_size
        return first, body_exp, first, body_exp
    # With PP > 1 the last stage holds the output layer (a copy of the embedding when tied).
    return body_dense + emb, body_exp, body_dense + emb + m.hidden_size, body_exp


def _bytes_per_param(lay: _Layout, shards: int) -> float:
    """bf16: 2 (param) + 4 (fp32 main grad) + 12 (fp32 master, Adam m, v); fp32: 4 + 4 + 8.
    The distributed optimizer splits the optimizer part over ``shards`` data-parallel ranks."""
    base, opt = (6.0, 12.0) if lay.a == 2 else (8.0, 8.0)
    return base + (opt / shards if lay.do else opt)


def _act_per_layer(w: SimWorkload, lay: _Layout) -> tuple[float, float]:
    """(stored, working) activation bytes of one layer for one micro-batch on one GPU.
    stored: what stays until the backward (depends on recompute); working: one layer's full
    activations (what full recompute rebuilds, transiently)."""
    m = w.model
    h, a = m.hidden_size, lay.a
    lin = 1 if lay.fp8 != "none" else a  # Transformer Engine keeps fp8 copies of linear inputs
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.groups
    T = lay.mbs * m.seq_length / lay.cp  # tokens per micro-batch on this rank
    tp = lay.tp
    spd = tp if lay.sp else 1
    drop = 2 if m.dropout else 0
    # sequence region: LN1 input, QKV input, LN2 input, MLP input (+ two 1-byte dropout masks)
    seq = T * h * (2 * a + 2 * lin + drop) / spd
    # attention: Q, K, V, output (= projection input); flash attention keeps the softmax statistics only
    attn = T * (a * q + 2 * a * kv + lin * q) / tp + T * m.num_attention_heads * 4 / tp
    if not m.flash_attention and lay.rc == "none":
        attn += T * m.seq_length * m.num_attention_heads * (a + (3 if m.dropout else 0)) / tp
    g = 2 if m.swiglu else 1
    if m.moe:
        f = m.expert_ffn
        rows = T * m.moe_router_topk * _imbalance(m, lay.ep)  # token copies this GPU's experts process
        mlp = rows * (lin * h + f * (a * g + lin) / tp)
        mlp += rows * h * a  # combine input (unpermute)
        if lay.disp == "allgather":
            mlp += lay.ep * T * h * a  # tokens gathered from the EP x TP group
        mlp += T / spd * m.num_experts * 4 * 2  # router logits and probabilities, fp32
        fs = m.moe_shared_expert_intermediate_size
        mlp += T * fs * (a * g + lin) / tp
    else:
        mlp = T * m.ffn_hidden_size * (a * g + lin) / tp
    full_layer = seq + attn + mlp
    if lay.rc == "full":
        return T * h * a / spd, full_layer  # only the layer input is kept
    return full_layer, 0.0


def memory(workload: str | SimWorkload, setting: Mapping[str, Any]) -> MemoryBreakdown:
    """Peak memory per GPU (max over the first and last pipeline stages)."""
    w = get_workload(workload)
    return _memory(w, _layout(w, setting))


def _memory(w: SimWorkload, lay: _Layout) -> MemoryBreakdown:
    m, spec = w.model, w.spec
    h, a, V = m.hidden_size, lay.a, m.vocab_size
    T = lay.mbs * m.seq_length / lay.cp
    spd = lay.tp if lay.sp else 1
    n_dense = lay.dp * lay.cp  # the distributed optimizer shards over data parallel x context parallel
    n_exp = max(1, w.world_size // (lay.pp * lay.ep * lay.tp))
    d1, e1, dl, el = _stage_params(w, lay)
    fp8_extra = 1.0 if lay.fp8 != "none" else 0.0  # fp8 weight copies of the linear layers
    wo_first = d1 * (_bytes_per_param(lay, n_dense) + fp8_extra) + e1 * (_bytes_per_param(lay, n_exp) + fp8_extra)
    wo_last = dl * (_bytes_per_param(lay, n_dense) + fp8_extra) + el * (_bytes_per_param(lay, n_exp) + fp8_extra)

    stored, working = _act_per_layer(w, lay)
    L, p, v = m.num_layers, lay.pp, lay.vp
    # layer-micro-batches held at the peak (1F1B warm-up): first stage p micro-batches of L/p layers,
    # x (1 + (p-1)/(p*v)) when interleaved; the last stage one micro-batch (+ (v-1)*p warm-up chunks).
    if p == 1:
        held_first = held_last = float(L)
    else:
        fill = min(1.0, lay.nmb / p)
        held_first = L * (1 + ((p - 1) / (p * v) if v > 1 else 0.0)) * fill
        held_last = L * (v - 1) / v * fill + L / (p * v)  # (v-1)*p warm-up chunks of L/(p*v) layers, + one
    n_first = min(lay.nmb, p) if v == 1 else p  # micro-batches in flight on the first stage
    emb_act = n_first * (8 * T + (T * h if m.dropout else 0)) / lay.tp  # token ids (int64) + dropout mask
    logits_stored = 4 * T * h / spd + 4 * T * V / lay.tp  # final norm in/out; fp32 softmax kept for backward
    logits_transient = 6 * T * V / lay.tp  # bf16 logits + fp32 copy during the loss
    act_first = held_first * stored + emb_act
    act_last = held_last * stored + (logits_stored if p > 1 else 0.0)
    if p == 1:
        act_first += logits_stored

    transient_common = working + (TP_OVERLAP_BUFFERS if lay.tco else 0)
    if m.moe:
        transient_common += 2 * T * m.moe_router_topk * h * a * _imbalance(m, lay.ep)  # dispatch buffers
    if not lay.do:
        transient_common += 0.05 * (d1 + e1) * 4  # grad-norm / multi-tensor-apply chunks
    tr_first = transient_common + (logits_transient if p == 1 else 0.0)
    tr_last = transient_common + logits_transient
    frag = FRAGMENTATION + (0.04 if m.moe else 0.0) + (0.02 if lay.pp > 1 else 0.0)
    alloc_first = wo_first + act_first + tr_first
    alloc_last = wo_last + act_last + tr_last
    if alloc_first >= alloc_last:
        wo, act, tr, stage = wo_first, act_first, tr_first, "first"
    else:
        wo, act, tr, stage = wo_last, act_last, tr_last, "last"
    allocated = wo + act + tr
    reserved = allocated * frag
    nontorch = NONTORCH_BYTES + 0.1 * GiB * sum(1 for x in (lay.tp, lay.pp, lay.cp, lay.ep) if x > 1)
    largest = max(working, logits_transient if stage == "last" or p == 1 else 0.0, T * h * a * 4 / spd)
    return MemoryBreakdown(weights_and_optimizer=wo, activations=act, transient=tr, allocated=allocated,
                           reserved=reserved, device_used=reserved + nontorch, capacity=spec.memory_bytes,
                           stage=stage, largest_alloc=largest)


def _layer_time(w: SimWorkload, lay: _Layout) -> tuple[float, dict[str, float]]:
    """Forward + backward seconds of one layer for one micro-batch on one GPU, and its parts."""
    m, spec = w.model, w.spec
    h, a, tp = m.hidden_size, lay.a, lay.tp
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.groups
    T = lay.mbs * m.seq_length / lay.cp
    spd = tp if lay.sp else 1
    fp8 = lay.fp8 != "none"
    peak = spec.peak_bf16_flops if a == 2 else spec.peak_bf16_flops / 2  # fp32 runs as TF32
    gemm_peak = spec.peak_fp8_flops if fp8 else peak
    fp8_scale = FP8_GEMM_EFF[lay.fp8] if fp8 else 1.0
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    g = 2 if m.swiglu else 1

    def gemm(mm: float, n: float, k: float) -> tuple[float, float]:
        """(forward seconds, fp8 cast seconds) of an (mm x k) @ (k x n) GEMM; backward is 2x forward."""
        t = 2 * mm * n * k / (gemm_peak * _gemm_eff(spec, mm, n, k) * fp8_scale)
        cast = (mm * k * (a + 1) * FP8_CAST_PASSES[lay.fp8] / hbm) if fp8 else 0.0
        return t, cast

    gemms = [gemm(T, (q + 2 * kv) / tp, h), gemm(T, h, q / tp)]
    exp_fwd = 0.0
    n_tp_coll = 2  # collectives per layer per direction: after attention and after the MLP
    elem = T * h * 10 * a / spd + T * (q + kv) * 2 * a / tp  # norms, residuals / RoPE on q, k
    launch = spec.launch_bound_s
    a2a = 0.0
    if m.moe:
        n_tp_coll = 1
        f, E, k_top = m.expert_ffn, m.num_experts, m.moe_router_topk
        imb = _imbalance(m, lay.ep)
        n_local = E // lay.ep
        rows_e = T * k_top * lay.ep / E  # tokens per local expert (expert TP = TP gathers over TP)
        m_eff = rows_e * (2.0 if lay.gg else 1.0)  # grouped GEMM tiles across experts
        one = (2 * rows_e * g * f * h / tp + 2 * rows_e * f * h / tp) / (
            gemm_peak * _gemm_eff(spec, m_eff, g * f / tp, h) * fp8_scale)
        exp_fwd = n_local * one * imb
        if fp8:
            exp_fwd += n_local * rows_e * h * (a + 1) * FP8_CAST_PASSES[lay.fp8] * 2 / hbm
        fs = m.moe_shared_expert_intermediate_size
        if fs:
            gemms += [gemm(T, g * fs / tp, h), gemm(T, h, fs / tp)]
        gemms.append((2 * T / spd * h * E / (peak * 0.3), 0.0))  # router (tiny, inefficient)
        rows_gpu = T * k_top * imb
        elem += rows_gpu * f * 3 * a / tp + T / spd * E * 4 * 3 + T * fs * 3 * a / tp
        launch += 150e-6 + (0.0 if lay.gg else n_local * 6 * 6e-6)
        # token dispatch: per direction, dispatch + combine
        if lay.disp == "alltoall":
            vol = T / spd * k_top * h * a * (lay.ep - 1) / lay.ep * imb
            elem += 4 * T / spd * k_top * h * a  # permute / unpermute copies
            if lay.ep > 1:
                per_node = max(1, spec.gpus_per_node // tp)
                off = max(0.0, (lay.ep - per_node) / (lay.ep - 1)) if lay.ep > per_node else 0.0
                bw_t = off / (spec.ib_bytes_per_s * 0.7) + (1 - off) / (spec.nvlink_bytes_per_s * 0.8)
                a2a += 2 * (vol * bw_t + lay.ep * 5e-6 + (IB_LATENCY_S if off else COLL_LATENCY_S))
            if tp > 1:  # gather the received tokens over expert TP
                bw, lat = _coll_bw(spec, tp, 1)
                a2a += 2 * (T * k_top * h * a * (tp - 1) / tp * imb / bw + lat)
        else:  # allgather tokens of the EP x TP group, reduce-scatter the outputs
            n = lay.ep * tp
            if n > 1:
                bw, lat = _coll_bw(spec, n, 1)
                a2a += 2 * (T / spd * h * a * (n - 1) / bw + lat)
            elem += 2 * rows_gpu * h * a
    else:
        f = m.ffn_hidden_size
        gemms += [gemm(T, g * f / tp, h), gemm(T, h, f / tp)]
        elem += T * f * (g + 1) * a / tp

    gemm_fwd = sum(t for t, _ in gemms) + exp_fwd
    cast_fwd = sum(c for _, c in gemms)
    attn_flops = 2 * T * m.seq_length * q / tp  # causal: half of 4 * T * s * q
    if not m.flash_attention:
        attn_fwd = attn_flops / (peak * 0.35) + T * m.seq_length * m.num_attention_heads * a * 4 / tp / hbm
    else:
        attn_fwd = attn_flops / (peak * spec.attn_eff_fwd)
    attn_bwd = 2 * attn_flops / (peak * spec.attn_eff_bwd) * (1.0 if m.flash_attention else 2.2)
    elem_fwd = elem / hbm

    # tensor-parallel collectives: bytes = T * h * a per collective (AR = RS + AG, same volume with SP)
    tp_comm = 0.0
    if tp > 1:
        bw, lat = _coll_bw(spec, tp, 1)
        vol = T * h * a
        per = 2 * (tp - 1) / tp * vol / bw + (2 * lat if lay.sp else lat)
        tp_comm = n_tp_coll * per  # one direction
    cp_comm = 0.0
    if lay.cp > 1:
        # point-to-point KV ring between CP neighbours (tp ranks apart): NVLink inside a node, else one NIC
        inside = tp * lay.cp <= spec.gpus_per_node
        bw = spec.nvlink_bytes_per_s if inside else spec.ib_bytes_per_s
        lat = COLL_LATENCY_S if inside else IB_LATENCY_S
        kv_bytes = T * 2 * kv * a / tp * (lay.cp - 1)
        cp_comm = max(0.0, kv_bytes / bw - 0.8 * attn_fwd) + (lay.cp - 1) * lat  # forward; backward 2x

    gemm_total = 3 * gemm_fwd + 3 * cast_fwd
    fwd_compute = gemm_fwd + cast_fwd + attn_fwd + elem_fwd
    # recompute: selective redoes the attention core, full the whole forward (with its collectives)
    re_compute = attn_fwd if lay.rc == "selective" else (fwd_compute if lay.rc == "full" else 0.0)
    n_tp_passes = 2 + (1 if lay.rc == "full" else 0)
    n_a2a = 1.0 + (0.5 if lay.rc == "full" else 0.0)
    if lay.tco and tp > 1:
        tp_exposed = n_tp_passes * tp_comm * TP_OVERLAP_EXPOSED + TP_OVERLAP_GEMM_SLOWDOWN * gemm_total
    else:
        tp_exposed = n_tp_passes * tp_comm
    cp_exposed = cp_comm * (3 + (1 if lay.rc == "full" else 0))
    compute = gemm_total + attn_fwd + attn_bwd + 3 * elem_fwd + re_compute
    gpu_time = compute + tp_exposed + cp_exposed + a2a * n_a2a
    cpu_time = launch * (1.33 if lay.rc == "full" else 1.0)
    total = max(gpu_time, cpu_time)
    return total, {"gemm": gemm_total, "attention": attn_fwd + attn_bwd, "elementwise": 3 * elem_fwd,
                   "recompute": re_compute, "tp_comm": tp_exposed, "cp_comm": cp_exposed, "moe_dispatch": a2a * n_a2a,
                   "launch_bound": max(0.0, cpu_time - gpu_time)}


def _step_time(w: SimWorkload, lay: _Layout, cache: dict | None = None) -> tuple[float, dict[str, float]]:
    """Noise-free iteration seconds and a phase breakdown (seconds per iteration). ``cache`` keeps partial
    results across calls (layer times do not depend on pp, vp, dp; nothing but the exposure depends on the
    overlap knobs)."""
    if cache is None:
        parts = _step_parts(w, lay, None)
    else:
        pkey = ("step", lay._replace(ogr=False, opg=False))
        parts = cache.get(pkey)
        if parts is None:
            parts = cache[pkey] = _step_parts(w, lay, cache)
    total, grad_exp, ag_exp = _exposed(parts, lay.rc, lay.ogr, lay.opg)
    return total, {**parts[5], "dp_grad_sync": grad_exp, "dp_param_gather": ag_exp}


def _exposed(parts: tuple, rc: str, ogr: bool, opg: bool) -> tuple[float, float, float]:
    """(iteration seconds, exposed grad sync, exposed param gather): overlap_grad_reduce hides the grad sync
    behind the last micro-batch's backward, overlap_param_gather the all-gather behind the first forward
    (90% of the window is usable; the last bucket, 5%, is always exposed)."""
    t_pipe, t_max, t_grad, t_ag, t_opt, _ = parts
    frac_bwd = 0.75 if rc == "full" else 2.0 / 3.0
    win_bwd, win_fwd = frac_bwd * t_max, (1 - frac_bwd) * t_max
    grad_exp = (max(0.0, t_grad - 0.9 * win_bwd) + 0.05 * t_grad) if ogr else t_grad
    ag_exp = (max(0.0, t_ag - 0.9 * win_fwd) + 0.05 * t_ag) if opg else t_ag
    return t_pipe + grad_exp + ag_exp + t_opt + FIXED_ITER_S, grad_exp, ag_exp


def _step_parts(w: SimWorkload, lay: _Layout, cache: dict | None) -> tuple[float, float, float, float, float, dict]:
    """(pipeline seconds, slowest stage per micro-batch, DP grad sync, DP param gather, optimizer, phases)."""
    m, spec = w.model, w.spec
    h, a, tp, V = m.hidden_size, lay.a, lay.tp, m.vocab_size
    T = lay.mbs * m.seq_length / lay.cp
    spd = tp if lay.sp else 1
    peak = spec.peak_bf16_flops if a == 2 else spec.peak_bf16_flops / 2
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    if cache is None:
        t_layer, parts = _layer_time(w, lay)
    else:
        lkey = lay._replace(pp=1, vp=1, dp=1, nmb=1, do=False, ogr=False, opg=False)
        hit = cache.get(lkey)
        if hit is None:
            hit = cache[lkey] = _layer_time(w, lay)
        t_layer, parts = hit
    # output layer (bf16 even under fp8) + vocab-parallel cross-entropy (fp32, memory-bound)
    t_logits = 3 * 2 * T * h * V / tp / (peak * _gemm_eff(spec, T, V / tp, h)) + T * V / tp * 20 / hbm
    t_embed = 3 * T * h * a / hbm
    if tp > 1:
        bw, lat = _coll_bw(spec, tp, 1)
        t_embed += 2 * (2 * (tp - 1) / tp * T * h * a / bw + lat)
    L, p, v, nmb = m.num_layers, lay.pp, lay.vp, lay.nmb
    per_stage = L / p * t_layer
    if p == 1:
        t_max = t_mean = per_stage + t_logits + t_embed
        p2p = 0.0
    else:
        t_first, t_last = per_stage + t_embed, per_stage + t_logits
        t_max, t_mean = max(t_first, t_last), per_stage + (t_logits + t_embed) / p
        stride = tp * lay.cp * lay.dp
        bw = spec.ib_bytes_per_s if stride >= spec.gpus_per_node else spec.nvlink_bytes_per_s
        t_p2p = T * h * a / spd / bw + IB_LATENCY_S
        p2p = (nmb * v + p - 1) * 2 * t_p2p * (0.5 if v == 1 else 0.3)
    bubble = (p - 1) / v * t_mean
    t_pipe = nmb * t_max + bubble + p2p

    # data-parallel gradient sync (fp32 main grads) and parameter all-gather (bf16), per GPU
    d1, e1, _, _ = _stage_params(w, lay)
    groups = [(d1, lay.dp * lay.cp, tp * lay.cp)]
    if e1:
        groups.append((e1, max(1, w.world_size // (p * lay.ep * tp)), tp * lay.ep))
    t_grad = t_ag = opt_params = 0.0
    for params, n, stride in groups:
        opt_params += params / n if lay.do else params
        if n <= 1:
            continue
        bw, lat = _coll_bw(spec, n, stride)
        rs = (n - 1) / n * params * 4 / bw + 4 * lat
        if lay.do:
            t_grad += rs
            t_ag += (n - 1) / n * params * a / bw + 4 * lat
        else:
            t_grad += 2 * rs
    t_opt = opt_params * OPT_BYTES_PER_PARAM / hbm + 2e-3 + (d1 + e1) * 4 * 2 / hbm  # + grad norm / zeroing
    scale = nmb * L / p
    phases = {k: v_ * scale for k, v_ in parts.items()}
    phases.update({"logits_loss": nmb * t_logits, "pipeline_bubble": bubble, "pipeline_p2p": p2p,
                   "optimizer": t_opt, "other": FIXED_ITER_S, "forward_backward": t_pipe})
    return t_pipe, t_max, t_grad, t_ag, t_opt, phases


def _noise(seed: int | None, key: str, cv: float, n: int = 1) -> list[float]:
    """``n`` multiplicative log-normal factors with mean 1 and coefficient of variation ``cv``."""
    if cv <= 0:
        return [1.0] * n
    rng = random.Random(f"{seed}:{key}") if seed is not None else random.Random()
    sigma = math.sqrt(math.log1p(cv * cv))
    return [math.exp(rng.gauss(-sigma * sigma / 2, sigma)) for _ in range(n)]


def check_setting(workload: str | SimWorkload, setting: Mapping[str, Any]) -> Setting:
    """The setting completed with defaults (and data_parallel derived when missing), or ValueError with every
    violated rule on one line each."""
    w = get_workload(workload)
    space = space_for(w)
    s = dict(setting)
    if "data_parallel" not in s:
        tp, pp, cp = (s.get(k, 1) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))
        s["data_parallel"] = w.world_size // max(1, tp * pp * cp)
    full = space.complete(s)
    bad = space.validate({**full, **{k: v for k, v in s.items() if k not in full}})
    if bad:
        raise ValueError("invalid setting: " + "; ".join(v.message for v in bad))
    return full


def simulate(workload: str | SimWorkload | Mapping[str, Any], setting: Mapping[str, Any], *, seed: int | None = None,
             noise_cv: float = DEFAULT_NOISE_CV, validate: bool = True) -> SimResult:
    """One trial of ``setting`` on ``workload``: the step time (one noisy draw; ``noise_cv=0`` for the
    noise-free model), the peak memory, and OOM (then no step time). ``seed`` makes the noise
    reproducible (different settings still get independent draws). Raises ValueError for a setting that
    breaks the space's rules (Megatron would refuse it at start-up)."""
    w = get_workload(workload)
    s = check_setting(w, setting) if validate else setting
    lay = _layout(w, s)
    mem = _memory(w, lay)
    if mem.oom:
        return SimResult(step_time_s=None, peak_memory_bytes=mem.reserved, oom=True, tflops_per_gpu=None, mfu=None,
                         memory=mem)
    base, phases = _step_time(w, lay)
    key = Setting(s).key() if not isinstance(s, Setting) else s.key()
    t = base * _noise(seed, key, noise_cv)[0]
    tf = model_flops_per_iteration(w.model) / (t * w.world_size)
    return SimResult(step_time_s=t, peak_memory_bytes=mem.reserved, oom=False, tflops_per_gpu=tf / 1e12,
                     mfu=tf / w.spec.peak_bf16_flops, noise_free_step_time_s=base, phases_s=phases, memory=mem)


# ============================================================================ exhaustive optimum
class Optimum(NamedTuple):
    setting: Setting | None
    step_time_s: float | None
    n_valid: int
    n_oom: int


def iter_valid(space: KnobSpace) -> Iterator[Setting]:
    """Every valid setting of ``space`` (depth-first in the layout-first knob order, checking each rule as
    soon as the knobs it reads are assigned; rules with unknown inputs are checked at the leaves)."""
    for cur in _iter_valid_dicts(space):
        yield Setting(cur)


def _iter_valid_dicts(space: KnobSpace, changed: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """As :func:`iter_valid`, yielding one mutable dict that changes between yields (copy to keep).
    ``changed[0]`` is set to the position (in :data:`SIM_KNOBS` order) of the first knob that changed
    since the previous yield, so a caller can reuse work that depends only on earlier knobs."""
    order = _order(space)
    assigned_at: dict[int, list[Constraint]] = {}
    leaf: list[Constraint] = []
    pos = {n: i for i, n in enumerate(order)}
    for c in space.constraints:
        deps = _DEPS.get(c.name)
        if deps is None:
            leaf.append(c)
            continue
        idx = max((pos[d] for d in deps if d in pos), default=0)
        assigned_at.setdefault(idx, []).append(c)
    domains = [space[n].domain for n in order]
    defaults = {k.name: k.default for k in space.knobs}
    cur = dict(defaults)
    last = len(order) - 1
    mark = changed if changed is not None else [0]
    mark[0] = 0

    def rec(i: int) -> Iterator[dict[str, Any]]:
        name = order[i]
        checks = assigned_at.get(i, ())
        for val in domains[i]:
            cur[name] = val
            if mark[0] > i:
                mark[0] = i
            if all(c(cur) is None for c in checks):
                if i == last:
                    if all(c(cur) is None for c in leaf):
                        yield cur
                        mark[0] = last + 1
                else:
                    yield from rec(i + 1)
        cur[name] = defaults[name]

    if order:
        yield from rec(0)


def _order(space: KnobSpace) -> list[str]:
    return [n for n in SIM_KNOBS if n in space] + [n for n in space.names if n not in SIM_KNOBS]


# Knobs that change neither memory nor anything but their own term of the step time: enumerated innermost.
_TIME_ONLY = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather", "moe_grouped_gemm")


def exhaustive_optimum(workload: str | SimWorkload | Mapping[str, Any], space: KnobSpace | None = None, *,
                       device_used: Callable[[MemoryBreakdown], float] | None = None,
                       time_factor: Callable[[Mapping[str, Any]], float] | None = None) -> Optimum:
    """The noise-free fastest valid setting of ``space`` (default: the workload's whole space), by bounded
    enumeration: rules prune partial settings; memory is computed once per memory-relevant prefix and
    OOM settings skip the time model. Returns (setting, step_time_s, n_valid, n_oom).

    ``device_used`` (bytes from a breakdown; default its own ``device_used``) and ``time_factor`` (a
    multiplier on the step time per setting) let a perturbed landscape (workloads/variants.py) reuse the
    enumeration: memory must still depend only on the layout, not on the overlap knobs."""
    w = get_workload(workload)
    sp = space if space is not None else space_for(w)
    best: Setting | None = None
    best_t = math.inf
    n_valid = n_oom = 0
    mem_cache: dict[tuple, bool] = {}
    layer_cache: dict = {}
    order = _order(sp)
    first_fast = min((order.index(n) for n in _TIME_ONLY if n in order), default=len(order))
    if any(n not in SIM_KNOBS for n in order[first_fast:]):
        first_fast = len(order)  # a foreign knob after them: no shortcut
    changed = [0]
    base: _Layout | None = None
    prefix: dict[tuple, Any] = {}  # per layout prefix: memory verdicts and step parts by (tco, gg)
    for s in _iter_valid_dicts(sp, changed):
        n_valid += 1
        if base is None or changed[0] < first_fast:
            base = _layout(w, s)
            prefix = {}
        tco, gg = bool(s.get("tp_comm_overlap", False)), bool(s.get("moe_grouped_gemm", False))
        key = (tco, gg)
        hit = prefix.get(key)
        if hit is None:
            lay = base._replace(tco=tco, gg=gg)
            mkey = lay._replace(ogr=False, opg=False, gg=False)
            oom = mem_cache.get(mkey)
            if oom is None:
                mem = _memory(w, lay)
                oom = mem_cache[mkey] = (device_used(mem) if device_used else mem.device_used) > mem.capacity
            hit = prefix[key] = (oom, None if oom else _step_parts(w, lay._replace(ogr=False, opg=False), layer_cache))
        oom, parts = hit
        if oom:
            n_oom += 1
            continue
        t = _exposed(parts, base.rc, bool(s.get("overlap_grad_reduce", False)),
                     bool(s.get("overlap_param_gather", False)))[0]
        if time_factor is not None:
            t *= time_factor(s)
        if t < best_t:
            best, best_t = Setting(s), t
    return Optimum(best, best_t if best is not None else None, n_valid, n_oom)


# ============================================================================ the process
def _fmt_gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def _oom_point(w: SimWorkload, lay: _Layout, mem: MemoryBreakdown) -> tuple[float, float, float, str]:
    """Where an over-capacity run fails: (bytes it tried to allocate, allocated, reserved before, phase).
    Allocations happen in order -- model and grad buffers, optimizer states, activations layer by layer,
    then the transients -- in chunks of one tensor; the first chunk that does not fit fails."""
    m = w.model
    T = lay.mbs * m.seq_length / lay.cp
    usable = mem.capacity - (mem.device_used - mem.reserved)
    frag = mem.reserved / mem.allocated if mem.allocated else FRAGMENTATION
    emb = m.vocab_size * m.hidden_size / lay.tp
    model_part = mem.weights_and_optimizer * (6.0 / 18.0 if lay.a == 2 else 0.5)
    g = 2 if m.swiglu else 1
    f = m.expert_ffn if m.moe else m.ffn_hidden_size
    act_chunk = max(T * f * g * lay.a / lay.tp, T * m.hidden_size * lay.a)
    steps = [("model setup", model_part, emb * lay.a),
             ("optimizer.step", mem.weights_and_optimizer - model_part, emb * 4 / (lay.dp * lay.cp if lay.do else 1)),
             ("forward", mem.activations, act_chunk),
             ("backward", mem.transient, max(mem.largest_alloc, act_chunk))]
    done = 0.0
    for where, total, chunk in steps:
        chunk = max(1.0, min(chunk, total)) if total > 0 else 0.0
        n = math.ceil(total / chunk) if chunk else 0
        for i in range(n):
            size = min(chunk, total - i * chunk)
            if (done + size) * frag > usable:
                reserved = min(done * frag, usable)
                if usable - reserved >= size:  # fragmentation: free space exists but not in one piece
                    reserved = usable - size + 20 * MiB
                return size, done, max(reserved, done), where
            done += size
    return mem.largest_alloc, mem.allocated, min(mem.reserved, usable), "backward"


def _loss(it: int, seed: int, setting_key: str, fp8: bool) -> float:
    """A plausible pre-training loss curve; the same for every setting up to reduction-order noise
    (1e-5 relative), fp8 adds ~0.2%."""
    base = 2.3 + 8.5 * math.exp(-it / 40.0)
    rng = random.Random(f"data:{seed}:{it}")
    base *= 1 + 0.004 * rng.gauss(0, 1)
    jitter = random.Random(f"order:{setting_key}:{it}").gauss(0, 1e-5)
    return base * (1 + jitter + (0.002 if fp8 else 0.0))


def _print_optimum(w: SimWorkload) -> int:
    space = space_for(w)
    space = space.restrict({"fp8_recipe": ["none"]}, keep=space.names)
    opt = exhaustive_optimum(w, space)
    print(f"{w.name}: {w.nodes} node(s) x {w.spec.gpus_per_node} {w.spec.name}; {opt.n_valid} valid settings, "
          f"{opt.n_oom} out of memory")
    if opt.setting is None:
        print("no setting fits in memory")
        return 1
    r = simulate(w, opt.setting, noise_cv=0)
    print(f"optimum: {opt.step_time_s:.3f} s/iteration, {r.tflops_per_gpu:.1f} TFLOP/s/GPU (MFU {r.mfu:.1%}), "
          f"peak {r.peak_memory_bytes / GiB:.1f} GiB of {w.spec.memory_bytes / GiB:.1f} GiB")
    print(json.dumps(opt.setting.to_dict(), sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infrarsi.workloads.simulated",
                                 description="Print the Megatron-LM log of one simulated training run.")
    ap.add_argument("--workload", required=True, help="a reference name or a JSON object of workload args")
    ap.add_argument("--setting", default="{}", help="JSON object: knob -> value")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--noise-cv", type=float, default=DEFAULT_NOISE_CV)
    ap.add_argument("--rerun", type=int, default=0, help="which rerun of this setting (a fresh noise stream)")
    ap.add_argument("--train-iters", type=int, default=10)
    ap.add_argument("--log-interval", type=int, default=1)
    ap.add_argument("--optimum", action="store_true",
                    help="what-if planning: print the exhaustive optimum (bf16 only) and its memory, then exit")
    ns = ap.parse_args(argv)
    try:
        wl = json.loads(ns.workload) if ns.workload.lstrip().startswith("{") else ns.workload
        w = get_workload(wl)
        if ns.optimum:
            return _print_optimum(w)
        setting = json.loads(ns.setting)
        if not isinstance(setting, dict):
            raise ValueError("--setting must be a JSON object of knob -> value")
        s = check_setting(w, setting)
    except (ValueError, json.JSONDecodeError) as e:
        print(f"AssertionError: this setting cannot be launched: {e}", file=sys.stderr)
        return 1
    lay = _layout(w, s)
    pc = param_counts(w.model)
    print(f"using world size: {w.world_size}, data-parallel size: {lay.dp}, context-parallel size: {lay.cp}, "
          f"tensor-model-parallel size: {lay.tp}, pipeline-model-parallel size: {lay.pp}", flush=True)
    d1, e1, _, _ = _stage_params(w, lay)
    print(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {int(d1 + e1)}", flush=True)
    print(f"simulated cluster: {w.nodes} node(s) x {w.spec.gpus_per_node} {w.spec.name}; model {pc['total'] / 1e9:.2f}B "
          f"parameters ({pc['active'] / 1e9:.2f}B active)", flush=True)
    mem = _memory(w, lay)
    if mem.oom:
        tried, alloc, reserved, where = _oom_point(w, lay, mem)
        in_use = reserved + (mem.device_used - mem.reserved)
        free = max(0.0, mem.capacity - in_use)
        print("[rank0]: Traceback (most recent call last):", file=sys.stderr)
        print(f'[rank0]:   File "megatron/training/training.py", in train_step ({where})', file=sys.stderr)
        print(f"[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_fmt_gib(tried)}. GPU 0 has a "
              f"total capacity of {_fmt_gib(mem.capacity)} of which {_fmt_gib(free)} is free. Including non-PyTorch "
              f"memory, this process has {_fmt_gib(in_use)} memory in use. Of the allocated memory {_fmt_gib(alloc)} is "
              f"allocated by PyTorch, and {_fmt_gib(reserved - alloc)} is reserved by PyTorch but unallocated. If "
              "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
              "avoid fragmentation.  See documentation for Memory Management  "
              "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)", file=sys.stderr)
        return 1
    base, phases = _step_time(w, lay)
    key = s.key()
    factors = _noise(ns.seed, f"{key}:{ns.rerun}", ns.noise_cv, ns.train_iters)
    flops = model_flops_per_iteration(w.model)
    gbs = w.model.global_batch_size
    now = datetime.datetime(2026, 1, 1, 0, 0, 0)
    for it in range(1, ns.train_iters + 1):
        warm = 2.5 if it == 1 else (1.08 if it == 2 else 1.0)  # allocator / NCCL warm-up
        t = base * factors[it - 1] * warm
        now += datetime.timedelta(seconds=t)
        if it % ns.log_interval:
            continue
        tf = flops / (t * w.world_size) / 1e12
        print(f" [{now.strftime('%Y-%m-%d %H:%M:%S.%f')}] iteration {it:8d}/{ns.train_iters:8d} | consumed samples: "
              f"{it * gbs:12d} | elapsed time per iteration (ms): {t * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): "
              f"{tf:.1f} | learning rate: {3e-4 * min(1.0, it / 100):.6E} | global batch size: {gbs:5d} | lm loss: "
              f"{_loss(it, ns.seed, key, lay.fp8 != 'none'):.6E} | loss scale: 1.0 | grad norm: "
              f"{1.0 + 4.0 * math.exp(-it / 20):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |",
              flush=True)
        if it == 1:
            wo, act = mem.weights_and_optimizer / MiB, mem.activations / MiB
            print(f"Theoretical memory footprints: weight and optimizer={wo:.2f} MB, activation={act:.2f} MB, "
                  f"total={wo + act:.2f} MB", flush=True)
        if it == 1 or it == 2:
            mb = 1.0 / MiB
            alloc_now = (mem.weights_and_optimizer + 0.02 * mem.activations) * mb
            print(f"[Rank 0] (after {it} iterations) memory (MB) | allocated: {alloc_now:.2f} | max allocated: "
                  f"{mem.allocated * mb:.2f} | reserved: {mem.reserved * mb:.2f} | max reserved: {mem.reserved * mb:.2f}",
                  flush=True)
        if it >= 2:
            jit = factors[it - 1]
            print("(min, max) time across ranks (ms):")
            for name, key_ in (("forward-backward", "forward_backward"), ("all-grads-sync", "dp_grad_sync"),
                               ("params-all-gather", "dp_param_gather"), ("optimizer", "optimizer")):
                val = phases[key_] * jit * 1000
                print(f"    {name} {'.' * max(3, 48 - len(name))}: ({val * 0.97:.2f}, {val:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
