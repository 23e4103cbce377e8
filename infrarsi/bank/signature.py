"""Workload signature: what a trial trained, reduced to the numbers that decide which launch is fast.

Built from a contract's fixed workload arguments (Megatron names, e.g. ``hidden_size``), from a
simulated workload's description, or from any mapping; every spelling in ``infrarsi.transformer.ALIASES``
is accepted (short ones such as ``hidden``, ``layers``, ``seq``, ``gbs``, ``experts``, ``topk``, and the
frameworks' ``n_kv_heads``, ``num_key_value_heads``, ``intermediate_size``, ...). ``workload_distance`` is the documented
similarity the seeding uses.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..transformer import Transformer, resolve


class WorkloadSignature(BaseModel):
    """Model dims, MoE shape, sequence length, global batch, framework. 0 = unknown for a dim."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = ""
    """A label for people ("llama3-8b"); not part of the similarity."""
    framework: str = "unknown"
    """The adapter that ran it: "megatron", "torchtitan", "minigpt", "simulated"."""
    framework_version: str | None = None
    num_layers: int = Field(0, ge=0)
    hidden_size: int = Field(0, ge=0)
    num_attention_heads: int = Field(0, ge=0)
    num_query_groups: int = Field(0, ge=0)
    ffn_hidden_size: int = Field(0, ge=0)
    vocab_size: int = Field(0, ge=0)
    num_experts: int = Field(0, ge=0)
    """0 or 1 = dense."""
    moe_router_topk: int = Field(0, ge=0)
    seq_length: int = Field(0, ge=0)
    global_batch_size: int = Field(0, ge=0)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def key(self) -> str:
        """A stable 16-hex identity over every field (the name included)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def same_task(self, other: "WorkloadSignature") -> bool:
        """True when every dimension matches (name and framework version aside)."""
        skip = {"name", "framework_version"}
        return self.model_dump(exclude=skip) == other.model_dump(exclude=skip)

    def transformer(self) -> Transformer:
        """The model this signature describes; a signature does not record the MLP kind, so it is
        taken gated (SwiGLU, as every current LLM family), with one embedding."""
        return Transformer(layers=self.num_layers, hidden=self.hidden_size, heads=self.num_attention_heads or 1,
                           vocab=self.vocab_size, seq=self.seq_length, groups=self.num_query_groups,
                           ffn=self.ffn_hidden_size, swiglu=True, experts=self.num_experts if self.is_moe else 0,
                           topk=self.moe_router_topk or 1, gbs=self.global_batch_size)

    def params(self) -> float:
        """Approximate parameter count (0 when the dims are unknown): one embedding + per layer attention
        and MLP (all experts of a MoE), norms aside (``Transformer.param_counts`` has them)."""
        if not self.hidden_size or not self.num_layers:
            return 0.0
        t = self.transformer()
        return float(t.layers * (t.attention_params + t.mlp_params + t.expert_params) + t.embedding_params)


_DIMS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size", "vocab_size",
         "num_experts", "moe_router_topk", "seq_length", "global_batch_size")


def signature_from(workload: Any, *, framework: str | None = None, framework_version: str | None = None,
                   name: str | None = None) -> WorkloadSignature:
    """A signature from a mapping of workload arguments, a Contract, or an object with attributes.

    A Contract gives ``workload.args`` (Megatron names), ``workload.adapter`` as the framework and
    its ``name``. Unknown keys are ignored (a workload has many arguments that do not shape speed:
    data paths, learning rate). A non-integer dimension is an error naming the field."""
    if isinstance(workload, WorkloadSignature):
        return workload
    d = workload.to_args() if isinstance(workload, Transformer) else _as_dict(workload)
    if "workload" in d and isinstance(d["workload"], Mapping):  # a Contract dumped to a dict
        c = d
        d = {**dict(c["workload"].get("args", {})), "framework": c["workload"].get("adapter"), "name": c.get("name", "")}
    elif "args" in d and isinstance(d["args"], Mapping):  # a contract's [workload] table
        d = {**dict(d["args"]), "framework": d.get("adapter"), **{k: d[k] for k in ("name",) if k in d}}
    fields: dict[str, Any] = {}
    for field, (spelling, v) in resolve(d).items():
        if field in _DIMS:
            try:
                fields[field] = int(v)
            except (TypeError, ValueError):
                raise ValueError(f"workload {field} ({spelling}={v!r}): expected an integer") from None
    fw = framework or d.get("framework") or d.get("adapter") or "unknown"
    ver = framework_version or d.get("framework_version")
    return WorkloadSignature(name=str(name if name is not None else d.get("name", "") or ""), framework=str(fw),
                             framework_version=None if ver is None else str(ver), **fields)


# Weights of each log-ratio term in workload_distance: what moves the optimum most.
WEIGHTS = {
    "hidden_size": 1.0,        # matmul shapes, TP efficiency, activation size
    "num_layers": 0.5,         # PP splits, memory per stage
    "seq_length": 0.75,        # activation memory, attention cost, CP
    "global_batch_size": 0.5,  # micro-batch / accumulation choices, DP
    "ffn_hidden_size": 0.5,
    "num_attention_heads": 0.25,  # what TP may divide
    "vocab_size": 0.1,
}


def workload_distance(a: WorkloadSignature, b: WorkloadSignature) -> float:
    """How far apart two workloads are for transfer, >= 0 (0 = same task).

    d = sum_i w_i * |ln(a_i / b_i)|    over the dims in WEIGHTS both sides know
      + 2.0                            when one is MoE and the other dense (EP, routing, all-to-all)
      + |ln(experts ratio)| + 0.5 |ln(topk ratio)|   when both are MoE
      + 0.5                            when the frameworks differ (different knob semantics)

    e.g. the same model at twice the sequence length: 0.75 * ln 2 = 0.52; a 70B (h 8192, L 80) vs an
    8B (h 4096, L 32): 1.0 ln 2 + 0.5 ln 2.5 + ... ~ 1.3.
    """
    d = 0.0
    for f, w in WEIGHTS.items():
        x, y = getattr(a, f), getattr(b, f)
        if x and y:
            d += w * abs(math.log(x / y))
    if a.is_moe != b.is_moe:
        d += 2.0
    elif a.is_moe:
        d += abs(math.log(a.num_experts / b.num_experts))
        if a.moe_router_topk and b.moe_router_topk:
            d += 0.5 * abs(math.log(a.moe_router_topk / b.moe_router_topk))
    if a.framework != b.framework and "unknown" not in (a.framework, b.framework):
        d += 0.5
    return d


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    names = getattr(obj, "__dataclass_fields__", None)
    if names is None and hasattr(obj, "__dict__"):
        names = vars(obj)
    if names is None:
        raise ValueError(f"workload {obj!r}: expected a mapping, a Contract or an object with model dimensions")
    return {k: getattr(obj, k) for k in names if not k.startswith("_")}
