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

import math
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
        # with selective recompute a recompute_num_layers the launch sets (the catalog's 1 = not set) is refused
        recompute_num_layers=s.get("recompute_num_layers") if gran == "full" or (
            gran == "selective" and s.get("recompute_num_layers", 1) != 1) else None,
        bf16=bool(s.get("bf16")), fp16=bool(fixed.get("fp16")), params_dtype=dtype, pipeline_dtype=dtype,
        fp8="hybrid" if s.get("fp8_recipe", "none") != "none" else None,
        fp8_recipe=s.get("fp8_recipe") if s.get("fp8_recipe", "none") != "none" else "delayed",
        tp_comm_overlap=bool(s.get("tp_comm_overlap")),
        add_bias_linear=not fixed.get("disable_bias_linear"), gated_linear_unit=bool(fixed.get("swiglu")),
        attention_backend=AttnBackend[s.get("attention_backend", "auto")],
    )
    for src, dst in (("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage"),
                     ("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage"),
                     ("account_for_embedding_in_pipeline_split", "account_for_embedding_in_pipeline_split"),
                     ("account_for_loss_in_pipeline_split", "account_for_loss_in_pipeline_split")):
        if fixed.get(src):
            kw[dst] = fixed[src]
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
            cfg = TransformerConfig(**kw)
    except (ValueError, AssertionError, TypeError) as e:
        return [f"megatron-core TransformerConfig: {e}"]
    from megatron.core.utils import divide

    try:  # what the attention module computes when it is built: num_query_groups_per_partition
        divide(cfg.num_query_groups or cfg.num_attention_heads, cfg.tensor_model_parallel_size)
    except AssertionError as e:
        return [f"megatron-core Attention (query groups per TP rank): {' '.join(str(e).split())}"]
    pp = cfg.pipeline_model_parallel_size
    if pp > 1:  # the layers each pipeline (and virtual) stage builds: megatron-core's own split, its asserts
        from megatron.core.transformer.transformer_block import get_num_layers_to_build

        vp = cfg.virtual_pipeline_model_parallel_size
        try:
            for rank in range(pp):
                get_num_layers_to_build(cfg, vp_stage=0 if vp else None, pp_rank=rank)
        except (AssertionError, ValueError) as e:
            return [f"megatron-core get_num_layers_to_build: {' '.join(str(e).split())}"]
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
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by {tp * pp * cp} (TP {tp} "
                f"x PP {pp} x CP {cp}); {_dividing(world_size, {'TP': tp, 'PP': pp, 'CP': cp})}"]
    if vp > 1 and pp <= 1:
        return ["megatron-core parallel_state: pipeline-model-parallel size should be greater than 1 with "
                "interleaved schedule"]
    etp = expert_tensor_parallel if expert_tensor_parallel is not None else tp
    etmp = etp * ep * pp
    if world_size % etmp:
        return [f"megatron-core parallel_state: world_size ({world_size}) is not divisible by "
                f"expert_tensor_model_pipeline_parallel size ({etmp}) (expert TP {etp} x EP {ep} x PP {pp}); "
                f"{_dividing(world_size, {'EP': ep, 'expert TP': etp, 'PP': pp})}"]
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


def _dividing(world: int, sizes: dict[str, int]) -> str:
    """Which single change of ``sizes`` (name -> size; their product must divide ``world``) would divide it."""
    total = math.prod(sizes.values())
    fixes = []
    for name, size in sizes.items():
        rest = total // size
        ok = [d for d in range(1, world + 1) if world % (rest * d) == 0]
        if ok:
            fixes.append(f"{name} {', '.join(map(str, ok[:-1]))} or {ok[-1]}" if len(ok) > 1 else f"{name} {ok[0]}")
    return ("settings that divide it: " + "; ".join(fixes)) if fixes else "no single change divides it"


def check_megatron(parsed, setting: Mapping[str, Any]) -> list[str]:
    """megatron-core's refusals of ``setting`` for this launch ([] when it accepts, or is not installed)."""
    if not available():
        return []
    out = megatron_core_check(parsed.fixed, setting)
    out += megatron_parallel_check(setting, world_size=parsed.world_size,
                                   expert_tensor_parallel=parsed.expert_tensor_parallel)
    return out


def megatron_args_check(fixed: Mapping[str, Any], setting: Mapping[str, Any], *, world_size: int | None) -> list[str]:
    """The asserts of Megatron-LM's ``validate_args`` (``megatron/training/arguments.py``, not in the megatron-core
    wheel) that concern knobs, stated in its words: the facts a refused setting is checked against where
    megatron-core's config code does not see them."""
    s, f = setting, fixed
    out: list[str] = []
    tp, pp, cp = (int(s.get(k, 1)) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))
    L = f.get("num_layers")
    uneven = f.get("decoder_first_pipeline_num_layers") or f.get("decoder_last_pipeline_num_layers") \
        or f.get("pipeline_model_parallel_layout")
    n = (L or 0) + int(bool(f.get("account_for_embedding_in_pipeline_split"))) \
        + int(bool(f.get("account_for_loss_in_pipeline_split")))
    if L and not uneven and int(s.get("virtual_pipeline", 1)) <= 1 and n % pp:
        out.append("validate_args: Number of layers should be divisible by the pipeline-model-parallel size")
    gran = s.get("recompute_granularity", "none")
    if gran == "selective" and s.get("recompute_method", "uniform") != "uniform":
        out.append("validate_args: recompute method is not yet supported for selective recomputing granularity")
    if s.get("overlap_param_gather") and not (s.get("distributed_optimizer") and s.get("overlap_grad_reduce")):
        out.append("validate_args: --overlap-param-gather only supported with distributed optimizer, and with "
                   "--overlap-grad-reduce")
    sp = bool(s.get("sequence_parallel")) and tp > 1  # switched off at TP 1
    if s.get("tp_comm_overlap") and not sp:
        out.append("validate_args: Tensor parallel communication/GEMM overlap can happen only when sequence "
                   "parallelism is enabled")
    if s.get("bf16") and f.get("fp16"):
        out.append("validate_args: cannot have both fp16 and bf16 enabled")
    if s.get("attention_backend") == "local" and str(f.get("spec", "")).split()[:1] != ["local"]:
        out.append("validate_args: --attention-backend local requires --spec local")
    vp = int(s.get("virtual_pipeline", 1))
    if L and gran == "full" and s.get("recompute_method", "uniform") == "uniform" and \
            int(s.get("recompute_num_layers", 1)) > L // max(1, pp * vp):
        # megatron-core TransformerBlock._checkpointed_forward (uniform) indexes self.layers past the chunk's end
        out.append("megatron-core TransformerBlock: uniform recompute of more layers than a chunk holds")
    gbs, mbs = f.get("global_batch_size"), int(s.get("micro_batch_size", 1))
    if world_size and gbs and world_size % (tp * pp * cp) == 0:
        dp = world_size // (tp * pp * cp)
        if gbs % (mbs * dp):
            out.append(f"validate_args: global batch size ({gbs}) is not divisible by micro batch size ({mbs}) "
                       f"times data parallel size ({dp})")
    return out
