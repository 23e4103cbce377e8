"""Megatron-LM's command line as infrarsi reads it: which flag spells which knob, the fixed workload
flags, and the program arguments split into items and read into a setting.

The knob tables are Megatron's spelling of the catalog's knobs (:mod:`.spelling`), by kind; the flags that belong to a knob
without being its spelling and the fixed workload flags are here (:mod:`.launch` reads launches with them,
:mod:`.emit` writes them). A knob a launch does not mention has Megatron's default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...knobs.catalog import knobs_for
from .spelling import SPELLING

FRAMEWORK = "megatron"

# The knob flags, read from Megatron's spelling of the catalog (spelling.py, the one table of them): flag -> knob,
# by the knob's kind. A categorical flag also says the values Megatron's parser accepts: the knob's domain, but for
# the values the launch states by leaving the flag out (recompute "none", fp8 "none") or that it does not take.
_FLAG_VALUES: dict[str, tuple[str, ...]] = {
    "recompute_granularity": ("full", "selective"),
    "fp8_recipe": ("delayed", "tensorwise", "mxfp8", "blockwise"),
}
_SPELLED = [k for k in knobs_for(SPELLING) if k.name in SPELLING]  # the flag knobs (not the environment's)
_INT_KNOBS = {SPELLING.flags[k.name]: k.name for k in _SPELLED if k.kind == "int"}
_CHOICE_KNOBS = {SPELLING.flags[k.name]: (k.name, _FLAG_VALUES.get(k.name, tuple(k.domain)))
                 for k in _SPELLED if k.kind == "categorical"}
_BOOL_KNOBS = {SPELLING.flags[k.name]: k.name for k in _SPELLED if k.kind == "bool"}
# Flags that belong to a knob without being its spelling.
_VP_LAYERS = "--num-layers-per-virtual-pipeline-stage"
_RECOMPUTE_ACT = "--recompute-activations"
_FP8_FORMAT = "--fp8-format"
# Flags that are no knob's spelling but that Megatron accepts only together with some knob values: the emitted
# launch keeps such a flag exactly when its condition holds for the new setting (``args`` are the launch's own).
# The messages are Megatron's validate_args asserts.
_FSDP_FLAGS = ("--use-torch-fsdp2", "--use-megatron-fsdp")
COUPLED_FLAGS: dict[str, tuple[Any, str]] = {
    "--fp8-param-gather": (
        lambda s, args: s["fp8_recipe"] != "none" and (s["distributed_optimizer"] or any(f in args for f in _FSDP_FLAGS)),
        "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp, or inference mode"),
    "--overlap-param-gather-with-optimizer-step": (
        lambda s, args: s["overlap_param_gather"] and s["distributed_optimizer"],
        "--overlap-param-gather-with-optimizer-step only with --overlap-param-gather and the distributed optimizer"),
    "--tp-comm-overlap-cfg": (lambda s, args: s["tp_comm_overlap"], "--tp-comm-overlap-cfg only with --tp-comm-overlap"),
    "--fp8-amax-history-len": (lambda s, args: s["fp8_recipe"] != "none", "fp8 scaling options only with fp8"),
    "--fp8-amax-compute-algo": (lambda s, args: s["fp8_recipe"] != "none", "fp8 scaling options only with fp8"),
    "--fp8-margin": (lambda s, args: s["fp8_recipe"] != "none", "fp8 scaling options only with fp8"),
}
_FP8_ONLY = ("--fp8-param-gather",)  # a switch (takes no value)
# Value knobs whose flag is removed (not set to the default) when the setting does not need them.
_ONLY_WHEN_WANTED = ("recompute_granularity", "recompute_method", "recompute_num_layers", "fp8_recipe",
                     "virtual_pipeline")
_VALUE_FLAGS = {**{f: 1 for f in _INT_KNOBS}, **{f: 1 for f in _CHOICE_KNOBS}, _VP_LAYERS: 1, _FP8_FORMAT: 1}
_SWITCHES = {**_BOOL_KNOBS, _RECOMPUTE_ACT: "recompute_granularity", **{f: "fp8_recipe" for f in _FP8_ONLY}}
KNOB_FLAGS = frozenset(_VALUE_FLAGS) | frozenset(_SWITCHES)

# Fixed workload arguments: flag -> (name, type). "list" keeps every value (joined by spaces).
_FIXED = {
    "--num-layers": ("num_layers", int),
    "--hidden-size": ("hidden_size", int),
    "--ffn-hidden-size": ("ffn_hidden_size", int),
    "--num-attention-heads": ("num_attention_heads", int),
    "--num-query-groups": ("num_query_groups", int),
    "--kv-channels": ("kv_channels", int),
    "--seq-length": ("seq_length", int),
    "--max-position-embeddings": ("max_position_embeddings", int),
    "--global-batch-size": ("global_batch_size", int),
    "--vocab-size": ("vocab_size", int),
    "--num-experts": ("num_experts", int),
    "--moe-router-topk": ("moe_router_topk", int),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", int),
    "--train-iters": ("train_iters", int),
    "--train-samples": ("train_samples", int),
    "--seed": ("seed", int),
    "--lr": ("lr", float),
    "--data-path": ("data_path", "list"),
    "--tokenizer-type": ("tokenizer_type", str),
    "--tokenizer-model": ("tokenizer", str),
    "--decoder-first-pipeline-num-layers": ("decoder_first_pipeline_num_layers", int),
    "--decoder-last-pipeline-num-layers": ("decoder_last_pipeline_num_layers", int),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", str),
    "--rampup-batch-size": ("rampup_batch_size", "list"),
    "--fp16": ("fp16", bool),
    "--swiglu": ("swiglu", bool),
    "--group-query-attention": ("group_query_attention", bool),
    "--multi-latent-attention": ("multi_latent_attention", bool),
    "--disable-bias-linear": ("disable_bias_linear", bool),
    "--mock-data": ("mock_data", bool),
    "--spec": ("spec", "list"),
    "--account-for-embedding-in-pipeline-split": ("account_for_embedding_in_pipeline_split", bool),
    "--account-for-loss-in-pipeline-split": ("account_for_loss_in_pipeline_split", bool),
}
_ENTRY = re.compile(r"(^|/)(pretrain_\w+|train)\.py$")


class MegatronLaunchError(ValueError):
    """A launch that cannot be read; the message names the flag, variable or line and the fix."""


# --------------------------------------------------------------------------- argument items
@dataclass
class Item:
    """One flag and its values as written (``tokens`` are the exact argv words), or a positional."""

    flag: str | None
    tokens: list[str]

    @property
    def values(self) -> list[str]:
        if self.flag is None:
            return self.tokens
        first = self.tokens[0]
        if "=" in first and first.startswith("--"):
            return [first.split("=", 1)[1], *self.tokens[1:]]
        return self.tokens[1:]


def _is_value(tok: str) -> bool:
    return not tok.startswith("-") or re.fullmatch(r"-\.?\d.*", tok) is not None


def split_items(args: list[str]) -> list[Item]:
    """Group program arguments into flags with their values. Switch knobs take no value and knob
    value flags exactly one; any other flag takes every following word that is not a flag (so a
    flag the catalog does not know keeps all its values)."""
    out: list[Item] = []
    k, n = 0, len(args)
    while k < n:
        tok = args[k]
        if not tok.startswith("-") or _is_value(tok):
            out.append(Item(None, [tok]))
            k += 1
            continue
        flag = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if "=" in tok and tok.startswith("--"):
            out.append(Item(flag, [tok]))
            k += 1
            continue
        if flag in _SWITCHES:
            out.append(Item(flag, [tok]))
            k += 1
            continue
        if flag in _VALUE_FLAGS:
            if k + 1 >= n or not _is_value(args[k + 1]):
                raise MegatronLaunchError(f"{flag} needs a value; write e.g. `{flag} 2`")
            out.append(Item(flag, [tok, args[k + 1]]))
            k += 2
            continue
        j = k + 1
        while j < n and _is_value(args[j]):
            j += 1
        out.append(Item(flag, args[k:j]))
        k = j
    return out


def _int_of(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise MegatronLaunchError(f"{flag}: {text!r} is not an integer; write e.g. `{flag} 2`") from None



def _read_fixed(items: list[Item]) -> dict[str, Any]:
    fixed: dict[str, Any] = {}
    for it in items:
        spec = _FIXED.get(it.flag or "")
        if not spec:
            continue
        name, typ = spec
        vals = it.values
        if typ is bool:
            fixed[name] = True
            continue
        if typ == "list":
            fixed[name] = " ".join(vals)
            continue
        if not vals and typ is str:
            fixed[name] = ""  # e.g. --tokenizer-model $UNSET: kept, Megatron reports it when it runs
            continue
        if len(vals) != 1:
            raise MegatronLaunchError(f"{it.flag} takes one value, got {len(vals)} ({' '.join(vals) or 'none'})")
        try:
            fixed[name] = typ(vals[0])
        except ValueError:
            kind = "an integer" if typ is int else "a number"
            raise MegatronLaunchError(f"{it.flag}: {vals[0]!r} is not {kind}; write e.g. `{it.flag} 32`") from None
    heads = fixed.get("num_attention_heads")
    # Megatron uses --num-query-groups only with --group-query-attention; otherwise groups = heads
    if heads and not fixed.get("group_query_attention"):
        fixed["num_query_groups"] = heads
    return fixed


def _read_setting(items: list[Item], env: Mapping[str, str], fixed: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    knobs = {k.name: k for k in knobs_for(SPELLING)}
    s: dict[str, Any] = {k.name: k.default for k in knobs.values()}
    s["data_parallel"] = None
    seen_granularity = False
    vp_layers = None
    fp8_format = None
    etp = None
    for it in items:
        f = it.flag
        if f is None:
            continue
        vals = it.values
        if f in _INT_KNOBS:
            s[_INT_KNOBS[f]] = _int_of(f, vals[0])
        elif f in _CHOICE_KNOBS:
            name, choices = _CHOICE_KNOBS[f]
            if vals[0] not in choices:
                raise MegatronLaunchError(f"{f}: {vals[0]!r} is not one of {', '.join(choices)}")
            s[name] = vals[0]
            seen_granularity |= name == "recompute_granularity"
        elif f in _BOOL_KNOBS:
            s[_BOOL_KNOBS[f]] = True
        elif f == _RECOMPUTE_ACT and not seen_granularity:
            s["recompute_granularity"] = "selective"
        elif f == _VP_LAYERS:
            vp_layers = _int_of(f, vals[0])
        elif f == _FP8_FORMAT:
            fp8_format = vals[0]
        elif f == "--expert-tensor-parallel-size" and vals:
            etp = _int_of(f, vals[0])
    if fp8_format is None:
        s["fp8_recipe"] = "none"
    elif SPELLING.flags["fp8_recipe"] not in {it.flag for it in items}:
        s["fp8_recipe"] = "delayed"  # Megatron's default recipe once --fp8-format is given
    if vp_layers is not None:
        L, pp = fixed.get("num_layers"), s["pipeline_parallel"]
        if not L or L % (pp * vp_layers):
            raise MegatronLaunchError(
                f"{_VP_LAYERS} {vp_layers}: {L} layers are not divisible by pp {pp} * {vp_layers}; "
                f"use {SPELLING.flags['virtual_pipeline']} instead")
        s["virtual_pipeline"] = L // (pp * vp_layers)
    for var, name in SPELLING.env_vars(list(knobs.values())).items():
        k = knobs[name]
        if var in env:
            raw = env[var]
            if k.kind == "int":
                try:
                    s[name] = int(raw)
                except ValueError:
                    raise MegatronLaunchError(f"{var}={raw!r} is not an integer") from None
            else:
                if raw not in k.domain:
                    raise MegatronLaunchError(
                        f"{var}={raw!r} is not one of {', '.join(map(str, k.domain[1:]))}; "
                        f"the tuner cannot represent it")
                s[name] = raw
    return s, etp
