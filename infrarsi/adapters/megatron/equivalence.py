"""Megatron-LM launches compared by Megatron's own terms: argument names and megatron-core's config arithmetic.

Megatron's argument parser (``megatron/training/arguments.py``) is not in the megatron-core wheel, so a launch
is read the way it reads one, with its names: every ``--flag VALUES`` becomes the argparse destination
``flag`` (dashes to underscores; the last one given wins), and the arguments become megatron-core's
``TransformerConfig`` the way Megatron builds it (``core_transformer_config_from_args``: every config field
named like an argument takes its value, plus the translations that function and ``validate_args`` make:
``--swiglu`` is a gated linear unit, ``--disable-bias-linear`` clears ``add_bias_linear``, ``--bf16`` sets the
params dtype, ``--recompute-activations`` is selective recompute, sequence parallelism is switched off at TP 1,
the expert TP size defaults to TP, ...). ``TransformerConfig.__post_init__`` then derives what it derives
(kv channels, FFN size, query groups). Two launches are compared on

- every argument destination (the workload, the data, the optimizer, unknown flags: all of them),
- every field of the model config, before and after megatron-core's own derivations,
- the data parallel size (world / (tp * pp * cp)), the world size, the program and the environment,

and may differ only where a knob the setting changed owns the field, or in the output locations a run points
into its trial directory (``--save``, ``--tensorboard-dir``, ``--wandb-save-dir``).
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Mapping
from typing import Any

from ...knobs.catalog import knobs_for
from ...transformer import data_parallel
from ..equivalence import changed_knobs, differences, raise_if_different
from .args import split_items
from .spelling import SPELLING
from .check import available

OUTPUTS = frozenset({"arg.save", "arg.tensorboard_dir", "arg.wandb_save_dir"})
# What the emitted launch may add because Megatron requires it, without changing what is computed:
# CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args insists on it when TP or CP > 1 before Blackwell).
REQUIRED = frozenset({"env.CUDA_DEVICE_MAX_CONNECTIONS"})

# Argument destination -> the knobs whose change may change it: each knob's own flag (its spelling, spelling.py, as
# argparse names it: --use-distributed-optimizer -> use_distributed_optimizer), then the destinations more knobs share
# or that are a knob's without being its spelling.
_DEST_SHARED: dict[str, tuple[str, ...]] = {
    "num_virtual_stages_per_pipeline_rank": ("virtual_pipeline", "pipeline_parallel"),
    "num_layers_per_virtual_pipeline_stage": ("virtual_pipeline", "pipeline_parallel"),
    "recompute_activations": ("recompute_granularity",),
    "recompute_method": ("recompute_method", "recompute_granularity"),
    "recompute_num_layers": ("recompute_num_layers", "recompute_granularity"),
    "fp8_format": ("fp8_recipe",),
    "fp8_param_gather": ("fp8_recipe", "distributed_optimizer"),
    "fp8_amax_history_len": ("fp8_recipe",),
    "fp8_amax_compute_algo": ("fp8_recipe",),
    "fp8_margin": ("fp8_recipe",),
    "sequence_parallel": ("sequence_parallel", "tensor_parallel"),
    "overlap_param_gather_with_optimizer_step": ("overlap_param_gather", "distributed_optimizer"),
    "tp_comm_overlap_cfg": ("tp_comm_overlap",),
}
_DEST_KNOBS: dict[str, tuple[str, ...]] = {
    **{SPELLING.flags[k.name].removeprefix("--").replace("-", "_"): (k.name,) for k in knobs_for(SPELLING)
       if k.name in SPELLING},
    **_DEST_SHARED,
}
# Model-config field -> the knobs that may change it.
_FIELD_KNOBS: dict[str, tuple[str, ...]] = {
    "tensor_model_parallel_size": ("tensor_parallel",),
    "expert_tensor_parallel_size": ("tensor_parallel",),
    "pipeline_model_parallel_size": ("pipeline_parallel",),
    "virtual_pipeline_model_parallel_size": ("virtual_pipeline", "pipeline_parallel"),
    "context_parallel_size": ("context_parallel",),
    "expert_model_parallel_size": ("expert_parallel",),
    "sequence_parallel": ("sequence_parallel", "tensor_parallel"),
    "recompute_granularity": ("recompute_granularity",),
    "recompute_method": ("recompute_method", "recompute_granularity"),
    "recompute_num_layers": ("recompute_num_layers", "recompute_granularity"),
    "bf16": ("bf16",), "params_dtype": ("bf16",), "pipeline_dtype": ("bf16",),
    "autocast_dtype": ("bf16",),
    "fp8": ("fp8_recipe",), "fp8_recipe": ("fp8_recipe",), "fp8_param": ("fp8_recipe", "distributed_optimizer"),
    "fp8_amax_history_len": ("fp8_recipe",), "fp8_amax_compute_algo": ("fp8_recipe",), "fp8_margin": ("fp8_recipe",),
    "tp_comm_overlap": ("tp_comm_overlap",),
    "attention_backend": ("attention_backend",),
    "moe_token_dispatcher_type": ("moe_token_dispatcher",),
    "moe_grouped_gemm": ("moe_grouped_gemm",),
    "cross_entropy_loss_fusion": ("cross_entropy_fusion",),
    "batch_p2p_comm": ("virtual_pipeline", "pipeline_parallel"),
    "microbatch_group_size_per_vp_stage": ("virtual_pipeline", "pipeline_parallel"),  # defaults to pp
}
_LAYOUT = ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel")


def namespace(args: list[str]) -> dict[str, Any]:
    """The program arguments as argparse destinations: ``--flag-name V`` is ``flag_name = 'V'``, a flag without
    values ``True``, several values one space-joined string; the last occurrence wins. Positional words are
    kept in order under ``positional``."""
    ns: dict[str, Any] = {}
    positional: list[str] = []
    for it in split_items(args):
        if it.flag is None:
            positional.extend(it.tokens)
            continue
        dest = it.flag.lstrip("-").replace("-", "_")
        vals = it.values
        ns[dest] = True if not vals and "=" not in it.tokens[0] else " ".join(vals)
    if positional:
        ns["positional"] = " ".join(positional)
    return ns


def _typed(text: Any, hint: Any) -> Any:
    """An argument's text as the config field's type (the field's hint), or the text when it is not that type."""
    if text is True:
        return True
    origin, targs = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        for t in targs:
            if t is type(None):
                continue
            got = _typed(text, t)
            if got is not text:
                return got
        return text
    if origin is typing.Literal:
        return text if text in targs else text
    if origin in (list, typing.List):  # noqa: UP006
        inner = targs[0] if targs else str
        return [_typed(w, inner) for w in str(text).split()]
    for t in (bool, int, float):
        if hint is t:
            try:
                return {"true": True, "false": False}[str(text).lower()] if t is bool else t(text)
            except (ValueError, KeyError):
                return text
    return text


def config_kwargs(ns: Mapping[str, Any]) -> dict[str, Any]:
    """``TransformerConfig`` keyword arguments from argument destinations, as Megatron makes them."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    hints = typing.get_type_hints(TransformerConfig)
    names = {f.name for f in dataclasses.fields(TransformerConfig)}
    kw: dict[str, Any] = {n: _typed(ns[n], hints.get(n, str)) for n in names if n in ns}
    tp = int(ns.get("tensor_model_parallel_size", 1))
    pp = int(ns.get("pipeline_model_parallel_size", 1))
    kw.setdefault("tensor_model_parallel_size", tp)
    # validate_args: --recompute-activations is selective recompute; SP is switched off at TP 1; expert TP = TP
    if ns.get("recompute_activations") is True:
        kw["recompute_granularity"] = "selective"
    if tp == 1:
        kw["sequence_parallel"] = False
    kw.setdefault("expert_tensor_parallel_size", tp)
    # the virtual pipeline size validate_args derives
    vp = ns.get("num_virtual_stages_per_pipeline_rank")
    if vp is None and ns.get("num_layers_per_virtual_pipeline_stage") and ns.get("num_layers"):
        per_stage = int(ns["num_layers"]) // max(1, pp)
        vp = per_stage // int(ns["num_layers_per_virtual_pipeline_stage"])
    kw["virtual_pipeline_model_parallel_size"] = int(vp) if vp and int(vp) > 1 else None
    # core_transformer_config_from_args' translations
    kw["gated_linear_unit"] = bool(ns.get("swiglu"))
    kw["add_bias_linear"] = not ns.get("disable_bias_linear")
    kw["bf16"], kw["fp16"] = bool(ns.get("bf16")), bool(ns.get("fp16"))
    kw["params_dtype"] = "bfloat16" if kw["bf16"] else ("float16" if kw["fp16"] else "float32")
    kw["pipeline_dtype"] = kw["params_dtype"]
    kw["batch_p2p_comm"] = not (kw["virtual_pipeline_model_parallel_size"] is not None
                                and not ns.get("no_overlap_p2p_communication"))
    kw["fp8"] = ns.get("fp8_format")
    if kw["fp8"] is None:
        kw.pop("fp8_recipe", None)  # the recipe only acts with a format
    kw["fp8_param"] = bool(ns.get("fp8_param_gather"))
    kw["num_moe_experts"] = int(ns["num_experts"]) if ns.get("num_experts") else None
    if not ns.get("group_query_attention"):
        kw.pop("num_query_groups", None)  # Megatron uses --num-query-groups only with --group-query-attention
    for src, dst in (("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage"),
                     ("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage")):
        if ns.get(src):
            kw[dst] = int(ns[src])
    return kw


def model_config(kw: Mapping[str, Any]) -> dict[str, Any] | str:
    """The fields of megatron-core's ``TransformerConfig`` built from ``kw`` (after its own derivations), or
    its refusal as text. fp8 is left to Transformer Engine's absence (its checks need TE's version)."""
    import torch
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    k = dict(kw)
    k["params_dtype"] = k["pipeline_dtype"] = getattr(torch, str(k["params_dtype"]))
    if isinstance(k.get("attention_backend"), str) and k["attention_backend"] in AttnBackend.__members__:
        k["attention_backend"] = AttnBackend[k["attention_backend"]]
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        k["fp8"] = None
    if k.get("fp8") is None:
        k.pop("fp8_param", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = TransformerConfig(**k)
    except Exception as e:  # noqa: BLE001 - the refusal is compared like any field
        return f"{type(e).__name__}: {e}"
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _env_owners() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {"INFRARSI_PATCHES": ()}
    for var, name in SPELLING.env_vars(knobs_for(SPELLING)).items():
        out[var] = (name,)
    return out


def reading(argv: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """Everything the comparison looks at for one launch: ``arg.*`` destinations, ``config.*`` keyword
    arguments, ``model.*`` megatron-core's config, ``env.*``, ``launch.*``."""
    from .launch import parse_megatron_argv

    p = parse_megatron_argv(list(argv), env=dict(env))
    ns = namespace(p.args)
    out: dict[str, Any] = {f"arg.{k}": v for k, v in ns.items()}
    if available():  # megatron-core's config arithmetic; without it the arguments are still compared
        kw = config_kwargs(ns)
        out.update({f"config.{k}": v for k, v in kw.items()})
        cfg = model_config(kw)
        if isinstance(cfg, str):
            out["model"] = cfg
        else:
            out.update({f"model.{k}": v for k, v in cfg.items()})
    out.update({f"env.{k}": v for k, v in env.items()})
    out["launch.program"] = " ".join(p.launch.program)
    out["launch.world_size"] = p.world_size
    tp, pp, cp = (int(ns.get(f, 1)) for f in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                               "context_parallel_size"))
    out["launch.data_parallel_size"] = data_parallel(p.world_size, tp, pp, cp) if p.world_size else None
    return out


def owners() -> dict[str, tuple[str, ...]]:
    own: dict[str, tuple[str, ...]] = {}
    for dest, knobs in _DEST_KNOBS.items():
        own[f"arg.{dest}"] = knobs
        own[f"config.{dest}"] = knobs
    for field, knobs in _FIELD_KNOBS.items():
        own[f"config.{field}"] = tuple({*own.get(f"config.{field}", ()), *knobs})
        own[f"model.{field}"] = tuple({*own.get(f"config.{field}", ()), *knobs})
    for var, knobs in _env_owners().items():
        own[f"env.{var}"] = knobs
    own["launch.data_parallel_size"] = _LAYOUT
    own["model"] = tuple({k for ks in _FIELD_KNOBS.values() for k in ks})  # a refusal the setting brought
    return own


def compare(parsed, argv: list[str], env: Mapping[str, str], setting: Mapping[str, Any], *,
            before: Mapping[str, Any] | None = None) -> list[str]:
    """The differences between the user's launch (``parsed``, a MegatronLaunch) and the emitted one (``argv``,
    ``env``) that the knobs ``setting`` changed do not explain ([] when it computes the user's job).
    ``before`` is the user's launch's reading, when it is at hand (it does not change between trials)."""
    changed = changed_knobs(parsed.setting, setting)
    changed |= {k for k in setting if k.startswith("kernel_")}
    if "INFRARSI_PATCHES" in env:
        changed.add("kernel")
    a = before if before is not None else reading(parsed.argv(), parsed.env)
    b = reading(argv, env)
    own = owners()
    own["env.INFRARSI_PATCHES"] = ("kernel",)
    for var, knobs in getattr(parsed, "knob_vars", {}).items():  # `export TP=4` for `--tp $TP`: follows its knob
        own.setdefault(f"env.{var}", knobs)
    return differences(a, b, changed=changed, owners=own, outputs=OUTPUTS | REQUIRED)


def check_equivalent(parsed, argv: list[str], env: Mapping[str, str], setting: Mapping[str, Any], *,
                     before: Mapping[str, Any] | None = None) -> None:
    """:func:`compare`, raising :class:`~infrarsi.adapters.equivalence.NotEquivalent` on a difference."""
    raise_if_different(compare(parsed, argv, env, setting, before=before), "the emitted Megatron launch")
