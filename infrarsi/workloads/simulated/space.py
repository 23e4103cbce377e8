"""The simulated workload's knob space: catalog knobs with domains narrowed to the cluster, the catalog's
rules plus two of the cluster's own, and which knobs each rule reads (for early pruning)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...knobs import Constraint, KnobSpace
from ...knobs import catalog
from .workload import SimWorkload, get_workload


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
