"""Simulated workloads: a model (``ModelSpec``, Megatron names) on a cluster (``SimWorkload``), the reference
table ``WORKLOADS``, and workloads from a contract's ``[workload.args]``."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .hardware import GPUSpec, gpu


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
    dp_sharding: Literal["per_iteration", "per_block"] = "per_iteration"
    """How data parallelism moves parameters and gradients: "per_iteration" (Megatron's: gradients synced and
    parameters gathered once per iteration, the overlap flags) or "per_block" (FSDP2, as torchtitan runs it: every
    block gathered and its gradients reduce-scattered per micro-batch, overlapped with the blocks beside it:
    :mod:`.fsdp`)."""
    selective_recompute: str = "attention"
    """What recompute_granularity = "selective" recomputes: "attention" (Megatron's: the attention core), "op"
    (torchtitan's op-level selective AC: every second matmul and the element-wise ops) or an integer n as text
    (torchtitan's layer-level selective AC: every n-th block fully, the others not at all)."""
    kernels: Literal["fused", "eager"] = "fused"
    """The kernels the framework runs: "fused" (Megatron with Transformer Engine, what the model's element-wise
    traffic counts) or "eager" (torchtitan without torch.compile: the unfused kernels, fp32 cross-entropy and FSDP2's
    copies and NCCL's SMs beside compute, :mod:`.eager`)."""
    optimizer_implementation: Literal["fused", "foreach", "for-loop"] = "fused"
    """AdamW's implementation where ``kernels`` is "eager" (torchtitan's ``optimizer.implementation``)."""

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
