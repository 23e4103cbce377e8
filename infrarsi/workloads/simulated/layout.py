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
    fsdp: int = 0  # torchtitan: FSDP's shard degree (dp_shard x cp; 1 = no sharding); 0: Megatron's data parallel
    rep: int = 1  # torchtitan: HSDP's replicas (data_parallel_replicate)
    raf: bool = True  # torchtitan: FSDP reshards (frees) parameters after forward, gathers them again in backward
    ac_every: int = 0  # rc "layer" (torchtitan's layer-level selective AC): every ac_every-th block fully recomputed


def _layout(w: SimWorkload, s: Mapping[str, Any]) -> _Layout:
    v = _DEFAULTS_BASE | dict(s)
    if None in v.values():
        v = _DEFAULTS_BASE | {k: x for k, x in s.items() if x is not None}
    tp, pp, cp = v["tensor_parallel"], v["pipeline_parallel"], v["context_parallel"]
    dp = w.world_size // (tp * pp * cp)
    if w.dp_sharding == "per_block":
        return _fsdp_layout(w, s, v, dp)
    mbs = v["micro_batch_size"]
    bf16 = bool(v["bf16"])
    return _Layout(tp=tp, pp=pp, vp=v["virtual_pipeline"], cp=cp, ep=v["expert_parallel"] if w.model.moe else 1,
                   dp=dp, mbs=mbs, nmb=max(1, w.model.global_batch_size // (mbs * dp)),
                   sp=bool(v["sequence_parallel"]) and tp > 1, rc=_recompute(w, v["recompute_granularity"])[0],
                   do=bool(v["distributed_optimizer"]), ogr=bool(v["overlap_grad_reduce"]),
                   opg=bool(v["overlap_param_gather"]), tco=bool(v["tp_comm_overlap"]), a=2 if bf16 else 4,
                   fp8=v["fp8_recipe"] if bf16 else "none", disp=v["moe_token_dispatcher"], gg=bool(v["moe_grouped_gemm"]))


def _recompute(w: SimWorkload, rc: str) -> tuple[str, int]:
    """(the layout's recompute mode, every how many blocks for "layer"): "selective" as the workload means it
    (``SimWorkload.selective_recompute``: "selective" for the attention core, "op", or "layer" every n-th block)."""
    if rc != "selective" or w.selective_recompute == "attention":
        return rc, 0
    return ("op", 0) if w.selective_recompute == "op" else ("layer", int(w.selective_recompute))


def _fsdp_layout(w: SimWorkload, s: Mapping[str, Any], v: Mapping[str, Any], dp: int) -> _Layout:
    """A setting of an FSDP2 job (torchtitan's) as the cost model reads it: FSDP over data_parallel /
    data_parallel_replicate x cp ranks (torchtitan's ``dp_shard_cp`` mesh), HSDP replicas, no Megatron DP flags
    (FSDP's own overlap, :mod:`.fsdp`). ``fsdp_reshard_after_forward``: "default" reshards unless pipeline parallel
    (torchtitan 0.2.2 ``apply_fsdp``), "always" / "never" as named."""
    tp, pp, cp = v["tensor_parallel"], v["pipeline_parallel"], v["context_parallel"]
    rep = int(s.get("data_parallel_replicate") or 1)
    if dp % rep:
        raise ValueError(f"data_parallel_replicate {rep} does not divide data parallel {dp}")
    policy = s.get("fsdp_reshard_after_forward") or "default"
    raf = {"always": True, "never": False}.get(str(policy), pp == 1)
    rc, every = _recompute(w, v["recompute_granularity"])
    mbs, bf16 = v["micro_batch_size"], bool(v["bf16"])
    return _Layout(tp=tp, pp=pp, vp=v["virtual_pipeline"], cp=cp, ep=v["expert_parallel"] if w.model.moe else 1,
                   dp=dp, mbs=mbs, nmb=max(1, w.model.global_batch_size // (mbs * dp)),
                   sp=bool(v["sequence_parallel"]) and tp > 1, rc=rc, do=dp // rep * cp > 1, ogr=False, opg=False,
                   tco=False, a=2 if bf16 else 4, fp8=v["fp8_recipe"] if bf16 else "none",
                   disp=v["moe_token_dispatcher"], gg=bool(v["moe_grouped_gemm"]), fsdp=dp // rep * cp, rep=rep,
                   raf=raf, ac_every=every)


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
