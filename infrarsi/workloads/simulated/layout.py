"""One setting as the cost model reads it (``_Layout``: parallel degrees, micro-batches, precision), and the
model's FLOPs and parameter counts (from :mod:`infrarsi.transformer`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from ...transformer import Transformer
from .space import _DEFAULTS_BASE
from .workload import ModelSpec, SimWorkload


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
    return _transformer(model).flops_per_iteration()  # the default convention: a causal mask, as Megatron counts


@lru_cache(maxsize=256)
def param_counts(model: ModelSpec) -> dict[str, float]:
    """Parameters by how they are sharded: ``tp`` (split over TP), ``replicated`` (norms, router),
    ``expert`` (split over EP x expert-TP), ``embedding`` (one V x h matrix). Per layer, and totals
    (:meth:`infrarsi.transformer.Transformer.param_counts`)."""
    return _transformer(model).param_counts()


@lru_cache(maxsize=256)
def _transformer(model: ModelSpec) -> Transformer:
    return Transformer.from_args(model.model_dump())


def _imbalance(model: ModelSpec, ep: int) -> float:
    """Expected max/mean token load over EP ranks: each rank sums E/ep experts whose loads vary with
    CV ``moe_load_cv``; the max of ep such sums is ~ 1 + cv_rank * sqrt(2 ln ep)."""
    if ep <= 1:
        return 1.0
    cv_rank = model.moe_load_cv / math.sqrt(model.num_experts / ep)
    return 1.0 + cv_rank * math.sqrt(2.0 * math.log(ep))
