"""megatron-core's own word on a setting, before anything is launched.

A setting the knob space calls valid can still be one the framework refuses; a refusal on the cluster
costs an allocation. So every trial's launch is first put to megatron-core's config code, where it is
installed, and a refused setting becomes an ``invalid`` trial carrying the framework's message, with no
launch (the runner records a ``ValueError`` from ``Adapter.launch`` that way).

Megatron-LM's own argument parser is not in the megatron-core wheel, so the checks are megatron-core's
``TransformerConfig`` (the model config Megatron builds from the arguments) and the process-group
arithmetic of ``parallel_state.initialize_model_parallel``, done with megatron-core's own
``RankGenerator`` for the dense and the expert grids. Not installed: nothing is checked (``available``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ...transformer import data_parallel
from ..base import FrameworkRejected  # noqa: F401  (re-exported: the refusal the checks raise)


def available() -> bool:
    """Whether megatron-core's config code is importable here."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.parallel_state  # noqa: F401
            import megatron.core.transformer.transformer_config  # noqa: F401
    except ImportError:
        return False
    return True


def _has_transformer_engine() -> bool:
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return False
    return True


def megatron_core_check(fixed: Mapping[str, Any], setting: Mapping[str, Any]) -> list[str]:
    """Build megatron-core's TransformerConfig for this model and setting; its error, if any.

    Returns [] when megatron-core accepts it, one message otherwise, or a note when megatron-core
    is not installed (pip install 'infrarsi[megatron]')."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.transformer.enums import AttnBackend
            from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError:
        return ["megatron-core is not installed, so its checks were skipped; pip install 'infrarsi[megatron]'"]
    need = ("num_layers", "hidden_size", "num_attention_heads")
    if not all(fixed.get(k) for k in need):
        return []
    import torch

    s = setting
    gran = s.get("recompute_granularity", "none")
    # Megatron's arguments set params_dtype (and the pipeline's p2p dtype) from --bf16/--fp16
    dtype = torch.bfloat16 if s.get("bf16") else (torch.float16 if fixed.get("fp16") else torch.float32)
    kw: dict[str, Any] = dict(
        num_layers=fixed["num_layers"], hidden_size=fixed["hidden_size"],
        num_attention_heads=fixed["num_attention_heads"],
        num_query_groups=fixed.get("num_query_groups"),
        ffn_hidden_size=fixed.get("ffn_hidden_size"), kv_channels=fixed.get("kv_channels"),
        tensor_model_parallel_size=s.get("tensor_parallel", 1),
        pipeline_model_parallel_size=s.get("pipeline_parallel", 1),
        virtual_pipeline_model_parallel_size=(s.get("virtual_pipeline", 1) if s.get("virtual_pipeline", 1) > 1 else None),
        context_parallel_size=s.get("context_parallel", 1),
        expert_model_parallel_size=s.get("expert_parallel", 1),
        sequence_parallel=bool(s.get("sequence_parallel")),
        recompute_granularity=None if gran == "none" else gran,
        recompute_method=s.get("recompute_method") if gran == "full" else None,
        recompute_num_layers=s.get("recompute_num_layers") if gran == "full" else None,
        bf16=bool(s.get("bf16")), fp16=bool(fixed.get("fp16")), params_dtype=dtype, pipeline_dtype=dtype,
        fp8="hybrid" if s.get("fp8_recipe", "none") != "none" else None,
        fp8_recipe=s.get("fp8_recipe") if s.get("fp8_recipe", "none") != "none" else "delayed",
        tp_comm_overlap=bool(s.get("tp_comm_overlap")),
        add_bias_linear=not fixed.get("disable_bias_linear"), gated_linear_unit=bool(fixed.get("swiglu")),
        attention_backend=AttnBackend[s.get("attention_backend", "auto")],
    )
    if fixed.get("num_experts"):
        kw.update(num_moe_experts=fixed["num_experts"], moe_router_topk=fixed.get("moe_router_topk", 2),
                  moe_token_dispatcher_type=s.get("moe_token_dispatcher", "allgather"),
                  moe_grouped_gemm=bool(s.get("moe_grouped_gemm")))
        if fixed.get("moe_ffn_hidden_size"):
            kw["moe_ffn_hidden_size"] = fixed["moe_ffn_hidden_size"]
    if kw["fp8"] is not None and not _has_transformer_engine():
        # megatron-core's fp8 checks ask Transformer Engine's version; without TE they cannot run (TypeError on
        # None), so fp8 is left to the catalog's device rule and the rest of the config is still checked
        kw["fp8"] = None
    kw = {k: v for k, v in kw.items() if v is not None or k in ("recompute_granularity", "recompute_method", "fp8")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TransformerConfig(**kw)
    except (ValueError, AssertionError, TypeError) as e:
        return [f"megatron-core TransformerConfig: {e}"]
    return []


def megatron_parallel_check(setting: Mapping[str, Any], *, world_size: int | None,
                            expert_tensor_parallel: int | None = None) -> list[str]:
    """The rank arithmetic of ``initialize_model_parallel`` for this setting, with megatron-core's own
    ``RankGenerator`` (dense grid tp-cp-dp-pp, expert grid etp-ep-edp-pp; their pipeline groups must agree)."""
    try:
        from megatron.core.parallel_state import RankGenerator
    except ImportError:
        return []
    if not world_size:
        return []
    s = setting
    tp, pp, cp, ep = (int(s.get(k, 1)) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel",
                                                  "expert_parallel"))
    vp = int(s.get("virtual_pipeline", 1))
    dp = data_parallel(world_size, tp, pp, cp)
    if dp is None:
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by {tp * pp * cp}"]
    if vp > 1 and pp <= 1:
        return ["megatron-core parallel_state: pipeline-model-parallel size should be greater than 1 with "
                "interleaved schedule"]
    etp = expert_tensor_parallel if expert_tensor_parallel is not None else tp
    etmp = etp * ep * pp
    if world_size % etmp:
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by "
                f"expert_tensor_model_pipeline_parallel size ({etmp})"]
    order = "tp-cp-ep-dp-pp"
    try:
        dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order, rank_offset=0)
        expert = RankGenerator(tp=etp, ep=ep, dp=world_size // etmp, pp=pp, cp=1, order=order, rank_offset=0)
        if dense.get_ranks("pp") != expert.get_ranks("pp"):
            return ["megatron-core parallel_state: Pipeline parallel groups are expected to be the same for "
                    "Non-Expert and Expert part"]
    except (AssertionError, RuntimeError, ValueError) as e:
        return [f"megatron-core parallel_state: {e}"]
    return []


def check_megatron(parsed, setting: Mapping[str, Any]) -> list[str]:
    """megatron-core's refusals of ``setting`` for this launch ([] when it accepts, or is not installed)."""
    if not available():
        return []
    out = megatron_core_check(parsed.fixed, setting)
    out += megatron_parallel_check(setting, world_size=parsed.world_size,
                                   expert_tensor_parallel=parsed.expert_tensor_parallel)
    return out
