"""Megatron-LM: read a launch (script or command), rewrite it for any setting, read its logs.

A launch is a ``torchrun ... pretrain_gpt.py ARGS`` command (also under ``srun`` or as a bare
``python pretrain_gpt.py``), on its own or at the end of a bash script in the style of Megatron-LM's
``examples/`` (see :mod:`.launch_script`). :func:`parse_megatron` returns

- ``fixed``: the workload arguments that define the task, Megatron names with underscores
  (``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``seq_length``,
  ``global_batch_size``, ``num_experts``, ``moe_router_topk``, ...);
- ``setting``: every catalog knob Megatron can express, read from the flags and the environment
  (a knob the launch does not mention has Megatron's default);
- the world size, when the launcher or the script's variables state it.

:func:`emit_megatron` rewrites the program arguments for another setting: a knob's flag is replaced
where it stands (``--flag=v`` stays in that form), removed when the new value is the default of a
switch, or appended at the end; every other token is kept byte for byte, unknown flags included.

Validation is twofold: the catalog's constraints (:mod:`infrarsi.knobs.catalog`) and megatron-core's
own ``TransformerConfig`` (which raises, e.g., "num_attention_heads (32) must be a multiple of
tensor_model_parallel_size (3)").
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract.model import Contract
from ..execute.spec import LaunchSpec
from ..execute.trial import Metrics, TrialStatus
from ..knobs import KnobSpace
from ..knobs.catalog import ENV_PREFIX, check_setting, FRAMEWORK_DEFAULTS, knobs_for, space_for_fixed
from ..transformer import data_parallel
from . import megatron_log
from .framework_check import FrameworkRejected, check_megatron, megatron_core_check, megatron_parallel_check
from .base import Adapter, ParsedRun, scoped_space
from .bash import ScriptError, interpret_script
from .launch_script import Launch, split_launcher, unfilled_flags, world_from_variables

FRAMEWORK = "megatron"

# Knob flags that take one value: flag -> (knob, parser of the text).
_INT_KNOBS = {
    "--tensor-model-parallel-size": "tensor_parallel",
    "--pipeline-model-parallel-size": "pipeline_parallel",
    "--num-virtual-stages-per-pipeline-rank": "virtual_pipeline",
    "--context-parallel-size": "context_parallel",
    "--expert-model-parallel-size": "expert_parallel",
    "--micro-batch-size": "micro_batch_size",
    "--recompute-num-layers": "recompute_num_layers",
    "--num-workers": "num_workers",
}
_CHOICE_KNOBS = {
    "--recompute-granularity": ("recompute_granularity", ("full", "selective")),
    "--recompute-method": ("recompute_method", ("uniform", "block")),
    "--attention-backend": ("attention_backend", ("auto", "flash", "fused", "unfused", "local")),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher", ("allgather", "alltoall", "flex")),
    "--fp8-recipe": ("fp8_recipe", ("delayed", "tensorwise", "mxfp8", "blockwise")),
}
_BOOL_KNOBS = {
    "--sequence-parallel": "sequence_parallel",
    "--use-distributed-optimizer": "distributed_optimizer",
    "--overlap-grad-reduce": "overlap_grad_reduce",
    "--overlap-param-gather": "overlap_param_gather",
    "--tp-comm-overlap": "tp_comm_overlap",
    "--bf16": "bf16",
    "--moe-grouped-gemm": "moe_grouped_gemm",
    "--cross-entropy-loss-fusion": "cross_entropy_fusion",
    "--manual-gc": "manual_gc",
}
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


# --------------------------------------------------------------------------- parsed launch
@dataclass
class MegatronLaunch:
    """A Megatron-LM launch, read. ``launch`` holds launcher prefix, program and arguments verbatim."""

    launch: Launch
    env: dict[str, str]
    fixed: dict[str, Any]
    setting: dict[str, Any]
    world_size: int | None
    source: str = "<command>"
    expert_tensor_parallel: int | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # launch-level faults (a flag left without its value)
    device: str | None = None  # the contract's hardware.kind: fp8 recipes follow it
    read_with: dict[str, Any] = field(default_factory=dict)  # env, args, cwd the script was read with

    @property
    def args(self) -> list[str]:
        return self.launch.args

    def argv(self) -> list[str]:
        return self.launch.argv()


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
    knobs = {k.name: k for k in knobs_for(FRAMEWORK)}
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
    elif "--fp8-recipe" not in {it.flag for it in items}:
        s["fp8_recipe"] = "delayed"  # Megatron's default recipe once --fp8-format is given
    if vp_layers is not None:
        L, pp = fixed.get("num_layers"), s["pipeline_parallel"]
        if not L or L % (pp * vp_layers):
            raise MegatronLaunchError(
                f"{_VP_LAYERS} {vp_layers}: {L} layers are not divisible by pp {pp} * {vp_layers}; "
                f"use --num-virtual-stages-per-pipeline-rank instead")
        s["virtual_pipeline"] = L // (pp * vp_layers)
    for name, k in knobs.items():
        sp = k.spelling.get(FRAMEWORK, "")
        if sp.startswith(ENV_PREFIX) and sp[len(ENV_PREFIX):] in env:
            raw = env[sp[len(ENV_PREFIX):]]
            if k.kind == "int":
                try:
                    s[name] = int(raw)
                except ValueError:
                    raise MegatronLaunchError(f"{sp[len(ENV_PREFIX):]}={raw!r} is not an integer") from None
            else:
                if raw not in k.domain:
                    raise MegatronLaunchError(
                        f"{sp[len(ENV_PREFIX):]}={raw!r} is not one of {', '.join(map(str, k.domain[1:]))}; "
                        f"the tuner cannot represent it")
                s[name] = raw
    return s, etp


def parse_megatron_argv(argv: list[str], *, env: Mapping[str, str] | None = None, source: str = "<command>",
                        script_vars: Mapping[str, Any] | None = None, sbatch: list[str] | None = None,
                        line: int | None = None) -> MegatronLaunch:
    """Read an expanded Megatron-LM command (launcher + pretrain script + arguments)."""
    launch = split_launcher(list(argv), env=dict(env or {}), sbatch=sbatch, line=line)
    if not launch.program or not (_ENTRY.search(launch.program[-1]) or launch.program[0] == "-m"):
        prog = " ".join(launch.program) or "(nothing)"
        raise MegatronLaunchError(f"{source}: expected a pretrain_*.py program after the launcher, found {prog}")
    items = split_items(launch.args)
    full_env = dict(env or {})
    fixed = _read_fixed(items)
    setting, etp = _read_setting(items, full_env, fixed)
    world = launch.world_size
    if world is None and script_vars is not None and ("torchrun" in launch.kinds or "srun" in launch.kinds):
        world = world_from_variables(dict(script_vars))  # e.g. --nproc_per_node $(nvidia-smi ...) but WORLD_SIZE=16
    if world:
        setting["data_parallel"] = data_parallel(world, setting["tensor_parallel"], setting["pipeline_parallel"],
                                                 setting["context_parallel"])
    return MegatronLaunch(launch=launch, env=full_env, fixed=fixed, setting=setting, world_size=world,
                          source=source, expert_tensor_parallel=etp)


def _pick_launch(commands, source: str):
    cands = []
    for c in commands:
        try:
            la = split_launcher(c.argv)
        except Exception:  # noqa: BLE001 - a command we do not understand is not the launch
            continue
        if la.program and _ENTRY.search(la.program[-1]):
            cands.append(c)
    if not cands:
        raise MegatronLaunchError(f"{source}: no `torchrun/srun/python ... pretrain_*.py` command found; "
                                  "the launch must call Megatron's pretrain script")
    return cands[-1]


def parse_megatron(text: str, *, path: str = "<command>", env: Mapping[str, str] | None = None,
                   args: list[str] | None = None, cwd: str | Path | None = None) -> MegatronLaunch:
    """Read a Megatron-LM launch script or command line (text). ``env`` seeds the script's
    environment (default empty); ``args`` are the script's $1, $2, ...; ``cwd`` is its $PWD."""
    try:
        res = interpret_script(text, path=path, env=dict(env or {}), args=args,
                               cwd=None if cwd is None else str(cwd))
    except ScriptError as e:
        raise MegatronLaunchError(str(e)) from None
    try:
        cmd = _pick_launch(res.commands, path)
    except MegatronLaunchError as e:
        if res.exit_line is not None:
            raise MegatronLaunchError(f"{e} (the script exits at line {res.exit_line} before launching: "
                                      "set the variables it checks there, e.g. with env=)") from None
        raise
    launch_env = {**res.exported, **cmd.env}
    out = parse_megatron_argv(cmd.argv, env=launch_env, source=path, script_vars=res.variables,
                              sbatch=res.sbatch, line=cmd.line)
    out.problems = unfilled_flags(text, cmd.argv, res.variables, args)
    out.read_with = {"env": dict(env or {}), "args": list(args or []), "cwd": None if cwd is None else str(cwd)}
    return out


def parse_megatron_file(path: str | Path, *, env: Mapping[str, str] | None = None,
                        args: list[str] | None = None, cwd: str | Path | None = None) -> MegatronLaunch:
    p = Path(path)
    return parse_megatron(p.read_text(), path=str(p), env=env, args=args, cwd=cwd)


# --------------------------------------------------------------------------- emit
def _megatron_defaults() -> dict[str, Any]:
    return {k.name: k.default for k in knobs_for(FRAMEWORK)} | FRAMEWORK_DEFAULTS[FRAMEWORK]


def _set_value(it: Item, value: Any) -> list[str]:
    if "=" in it.tokens[0] and it.tokens[0].startswith("--"):
        return [f"{it.flag}={value}"]
    return [it.tokens[0], str(value)]


def emit_megatron_args(args: list[str], setting: Mapping[str, Any], *, num_layers: int | None = None) -> list[str]:
    """Program arguments for ``setting`` (catalog names; knobs it omits keep their current value).

    Knob flags are rewritten in place; every other token is kept as it was."""
    items = split_items(args)
    fixed = _read_fixed(items)
    cur, _ = _read_setting(items, {}, fixed)
    d = _megatron_defaults()
    s = {**cur, **{k: v for k, v in setting.items() if v is not None}}
    L = num_layers or fixed.get("num_layers")
    full = s["recompute_granularity"] == "full"
    fp8 = s["fp8_recipe"] != "none"
    emitted: set[str] = set()
    out: list[str] = []

    def wants(name: str) -> bool:
        if name in ("recompute_method", "recompute_num_layers"):
            return full  # required with full recompute, rejected with selective
        if name == "virtual_pipeline":
            return s[name] > 1
        if name == "fp8_recipe":
            return fp8
        return s[name] != d[name]

    for it in items:
        f = it.flag
        if f in _INT_KNOBS or f in _CHOICE_KNOBS:
            name = _INT_KNOBS[f] if f in _INT_KNOBS else _CHOICE_KNOBS[f][0]
            if name in emitted:
                continue  # a repeated flag (the last one wins in argparse): state it once
            if name in _ONLY_WHEN_WANTED and not wants(name):
                continue  # e.g. --recompute-method without full recompute is rejected by Megatron
            # any other value flag stays where it is, with the new value (a default included)
            out.extend(_set_value(it, s[name]))
            emitted.add(name)
        elif f == _VP_LAYERS:
            pp, vp = s["pipeline_parallel"], s["virtual_pipeline"]
            if vp > 1 and L and L % (pp * vp) == 0 and "virtual_pipeline" not in emitted:
                out.extend(_set_value(it, L // (pp * vp)))
                emitted.add("virtual_pipeline")
        elif f == _RECOMPUTE_ACT:
            if s["recompute_granularity"] == "selective" and "recompute_granularity" not in emitted:
                out.extend(it.tokens)
                emitted.add("recompute_granularity")
        elif f == _FP8_FORMAT:
            if fp8 and "fp8_format" not in emitted:
                out.extend(it.tokens)
                emitted.add("fp8_format")
        elif f in COUPLED_FLAGS:
            if COUPLED_FLAGS[f][0](s, args):
                out.extend(it.tokens)  # its condition holds: kept as written
        elif f in _BOOL_KNOBS:
            name = _BOOL_KNOBS[f]
            if s[name] and name not in emitted:
                out.extend(it.tokens)
                emitted.add(name)
        else:
            out.extend(it.tokens)
    # append what the launch did not say
    for k in knobs_for(FRAMEWORK):
        name = k.name
        sp = k.spelling.get(FRAMEWORK)
        if name in emitted or not sp or sp.startswith(ENV_PREFIX) or not wants(name):
            continue
        if name == "recompute_granularity" and s[name] == "none":
            continue
        if name == "fp8_recipe":
            if "fp8_format" not in emitted:
                out.extend([_FP8_FORMAT, "hybrid"])
            if s[name] != "delayed":
                out.extend(["--fp8-recipe", s[name]])
            continue
        if k.kind == "bool":
            out.append(sp)
        else:
            out.extend([sp, str(s[name])])
    return out


def knob_env(setting: Mapping[str, Any], base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a setting: NCCL env knobs set (default = unset) and, when TP or CP > 1,
    CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron requires it before Blackwell)."""
    env = dict(base_env or {})
    for k in knobs_for(FRAMEWORK):
        sp = k.spelling.get(FRAMEWORK, "")
        if not sp.startswith(ENV_PREFIX) or k.name not in setting:
            continue
        var = sp[len(ENV_PREFIX):]
        v = setting[k.name]
        if v == k.default:
            env.pop(var, None)
        else:
            env[var] = str(v)
    if setting.get("tensor_parallel", 1) > 1 or setting.get("context_parallel", 1) > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def emit_megatron(parsed: MegatronLaunch, setting: Mapping[str, Any], *, launcher: str | None = None,
                  time_limit_s: float = 600, extra_env: Mapping[str, str] | None = None) -> LaunchSpec:
    """The launch for ``setting``: same launcher, program and unrelated flags; knob flags rewritten.

    ``launcher`` None keeps the original launcher prefix; "torchrun" or "srun" builds a fresh one
    for the same node and process counts."""
    s = {**parsed.setting, **dict(setting)}
    args = emit_megatron_args(parsed.args, s, num_layers=parsed.fixed.get("num_layers"))
    env = knob_env(s, parsed.env)
    env.update(extra_env or {})
    la = parsed.launch
    nodes = la.nnodes or 1
    procs = la.nproc_per_node or (la.ntasks // nodes if la.ntasks else 1)
    prefix = list(la.launcher)
    if launcher == "torchrun":
        prefix = ["torchrun", f"--nproc-per-node={procs}", f"--nnodes={nodes}"]
    elif launcher == "srun" and "srun" in la.kinds:
        pass  # already an srun launch: every option the user wrote (container, mounts, output) stays
    elif launcher == "srun":
        prefix = ["srun", f"--nodes={nodes}", f"--ntasks-per-node={procs}", "python"]
    elif launcher is not None:
        raise ValueError(f"launcher {launcher!r}: use torchrun, srun or None (keep the original)")
    world = parsed.world_size or procs * nodes
    return LaunchSpec(argv=[*prefix, *la.program, *args], env=env, processes=max(1, procs), nodes=max(1, nodes),
                      devices=max(1, world), time_limit_s=time_limit_s)


# --------------------------------------------------------------------------- validation
def knob_space_for(parsed: MegatronLaunch, *, include_current: bool = True) -> KnobSpace:
    """The catalog space for this launch's workload, world size and device."""
    return space_for_fixed(parsed.fixed, world_size=parsed.world_size, framework=FRAMEWORK,
                           include=parsed.setting if include_current else None,
                           expert_tensor_parallel=parsed.expert_tensor_parallel, device=parsed.device)


def violations(parsed: MegatronLaunch, setting: Mapping[str, Any] | None = None, *, core: bool = True) -> list[str]:
    """Every problem with ``setting`` (default: the launch's own): catalog constraints, then
    megatron-core's TransformerConfig. Messages show the numbers."""
    s = dict(parsed.setting if setting is None else {**parsed.setting, **setting})
    out: list[str] = []
    if parsed.world_size and s.get("data_parallel") is None:
        inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
        out.append(f"world_size({parsed.world_size}) is not divisible by tp({s['tensor_parallel']}) * "
                   f"pp({s['pipeline_parallel']}) * cp({s['context_parallel']}) = {inner}")
    space = space_for_fixed(parsed.fixed, world_size=parsed.world_size, framework=FRAMEWORK, include=s,
                            expert_tensor_parallel=parsed.expert_tensor_parallel, device=parsed.device)
    out.extend(parsed.problems)
    out.extend(v.message for v in check_setting(space, s))
    if core:
        out.extend(megatron_core_check(parsed.fixed, s))
        if not out:  # and the process groups megatron-core would make
            out.extend(megatron_parallel_check(s, world_size=parsed.world_size,
                                               expert_tensor_parallel=parsed.expert_tensor_parallel))
    return out


# --------------------------------------------------------------------------- adapter
def _launch_from_contract(contract: Contract, base_dir: Path | None) -> MegatronLaunch:
    w = contract.workload
    if w.launch:
        p = Path(w.launch)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        if not p.is_file():
            raise MegatronLaunchError(f"workload.launch {w.launch!r} does not exist (looked at {p}); give the "
                                      "launch script's path relative to where infrarsi runs")
        return parse_megatron_file(p, env={**w.script_env, **w.env}, args=w.script_args,
                                   cwd=base_dir if base_dir is not None else Path.cwd())
    if not w.entrypoint:
        raise MegatronLaunchError("workload: set launch (a Megatron launch script) or entrypoint "
                                  "(e.g. \"torchrun --nproc-per-node 8 pretrain_gpt.py\") with [workload.args]")
    argv = shlex.split(w.entrypoint)
    for key, val in w.args.items():
        flag = "--" + key.replace("_", "-")
        if val is True:
            argv.append(flag)
        elif val is False or val is None:
            continue
        else:
            argv.extend([flag, *str(val).split()] if key in ("data_path",) else [flag, str(val)])
    return parse_megatron_argv(argv, env=w.env, source="contract workload")


class MegatronAdapter(Adapter):
    """Megatron-LM through its launch script: catalog knobs, rewritten launches, log parsing."""

    name = FRAMEWORK

    def __init__(self, base_dir: str | Path | None = None) -> None:
        self.base_dir = Path(base_dir) if base_dir else None
        self._cache: dict[str, MegatronLaunch] = {}

    def parsed(self, contract: Contract) -> MegatronLaunch:
        key = contract.model_dump_json(include={"workload", "hardware"})
        if key not in self._cache:
            parsed = _launch_from_contract(contract, self.base_dir)
            parsed.device = contract.hardware.kind
            if parsed.world_size is None:  # the launch does not say: the contract's devices do
                parsed.world_size = contract.hardware.devices
                st = parsed.setting
                st["data_parallel"] = data_parallel(parsed.world_size, st["tensor_parallel"], st["pipeline_parallel"],
                                                    st["context_parallel"])
            self._cache[key] = parsed
        return self._cache[key]

    def knob_space(self, contract: Contract) -> KnobSpace:
        return scoped_space(knob_space_for(self.parsed(contract)), contract, "Megatron")

    def launch(self, contract: Contract, setting: Mapping[str, Any], *, patches: Mapping[str, str] | None = None) -> LaunchSpec:
        parsed = self.parsed(contract)
        extra = {"INFRARSI_PATCHES": json.dumps(dict(patches), sort_keys=True)} if patches else {}
        s = {**parsed.setting, **contract.baseline, **dict(setting)}
        if parsed.world_size and "data_parallel" not in setting:  # None when it does not divide (checked below)
            s["data_parallel"] = data_parallel(parsed.world_size, s["tensor_parallel"], s["pipeline_parallel"],
                                               s["context_parallel"])
        spec = emit_megatron(parsed, s, time_limit_s=contract.invariants.timing.timeout_s, extra_env=extra)
        if parsed.problems:
            raise MegatronLaunchError("; ".join(parsed.problems))
        rejected = check_megatron(parsed, s)  # megatron-core's own word, before any launch
        if rejected:
            raise FrameworkRejected("; ".join(rejected))
        return spec

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        fixed = self.parsed(contract).fixed if (contract.workload.launch or contract.workload.entrypoint) else contract.fixed
        tokens = (fixed.get("global_batch_size") or 0) * (fixed.get("seq_length") or 0) or None
        return parse_megatron_output(stdout, stderr, returncode, warmup_steps=contract.invariants.timing.warmup_steps,
                                     measured_steps=contract.invariants.timing.measured_steps,
                                     tokens_per_step=tokens, peak_flops=contract.hardware.peak_flops)


def parse_megatron_output(stdout: str, stderr: str, returncode: int | None, *, warmup_steps: int,
                          measured_steps: int, tokens_per_step: int | None = None,
                          peak_flops: float | None = None) -> ParsedRun:
    """Status, metrics and evidence of a finished Megatron run (logs read by :mod:`.megatron_log`)."""
    text = stdout + "\n" + stderr
    log = megatron_log.parse_log(text)
    metrics = megatron_log.to_metrics(log, warmup_steps=warmup_steps, measured_steps=measured_steps,
                                      tokens_per_step=tokens_per_step, peak_flops=peak_flops)
    failure = megatron_log.classify_failure(text)
    if failure is not None:
        status, reason, evidence = failure
        return ParsedRun(status=status, metrics=_without_step_time(metrics), evidence=evidence, reason=reason)
    if returncode not in (0, None):
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
        return ParsedRun(status=TrialStatus.CRASH, metrics=_without_step_time(metrics), evidence=tail,
                         reason=f"exit code {returncode}")
    if metrics.step_time_s is None:
        return ParsedRun(status=TrialStatus.CRASH, metrics=metrics, reason=(
            f"the log has {len(log.iterations)} iteration lines; the measured window ends at iteration "
            f"{warmup_steps + measured_steps}"))
    return ParsedRun(status=TrialStatus.OK, metrics=metrics)


def _without_step_time(m: Metrics) -> Metrics:
    return m.model_copy(update={"step_time_s": None})
