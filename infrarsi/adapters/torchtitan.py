"""torchtitan: read a launch in either config style, rewrite it for any setting, read its logs.

Two styles exist:

- 0.2.x: a TOML job file (``[parallelism]``, ``[training]``, ``[activation_checkpoint]``,
  ``[compile]``, ``[quantize.linear.float8]``, ...) given as ``--job.config_file FILE`` (or
  ``CONFIG_FILE=FILE ./run_train.sh``), optionally followed by ``--section.field VALUE`` overrides.
- 0.3.x: ``--module M --config C`` (a Python config function) plus ``--section.field VALUE``
  overrides (``_`` and ``-`` spellings both accepted) and, last of all, the activation-checkpoint
  subcommand ``activation-checkpoint:{none,selective,full,memory-budget}``.

A config function's own values (``llama3_70b`` sets TP 8 and full recompute) come from a table of
the functions torchtitan ships (:data:`CONFIGS_03`); model dimensions come from a table of model
flavors (:data:`FLAVORS`). torchtitan fields map onto the same fixed names as Megatron:
``training.seq_len`` -> ``seq_length``, ``training.global_batch_size`` (or local batch x DP when it is
-1) -> ``global_batch_size``, ``training.steps`` -> ``train_iters``.

:func:`emit_torchtitan` never edits the TOML file: it rewrites or appends ``--section.field``
overrides on the command line (keeping the activation-checkpoint subcommand last), so the job file
and every unrelated argument survive byte for byte. When a setting changes the local batch or the DP
degree and the job derives the global batch (``global_batch_size = -1``), the fixed global batch is
written explicitly, so the workload does not change.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract.model import Contract
from ..execute.spec import LaunchSpec
from ..execute.trial import Metrics, TrialStatus
from ..knobs import Constraint, KnobSpace
from ..knobs.catalog import ENV_PREFIX, check_setting, knobs_for, space_for_fixed
from . import torchtitan_trial
from .framework_check import FrameworkRejected, check_torchtitan
from .base import Adapter, ParsedRun, scoped_space
from .bash import ScriptError, interpret_script
from .launch_script import Launch, split_launcher, unfilled_flags, world_from_variables

FRAMEWORK = "torchtitan"
GiB = 2**30

# Model flavors: (model name, flavor) -> fixed workload arguments (Megatron names).
FLAVORS: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "debugmodel"): dict(num_layers=6, hidden_size=256, num_attention_heads=16, num_query_groups=16, vocab_size=2048),
    ("llama3", "8B"): dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                           ffn_hidden_size=14336, vocab_size=128256),
    ("llama3", "70B"): dict(num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8,
                            ffn_hidden_size=28672, vocab_size=128256),
    ("llama3", "405B"): dict(num_layers=126, hidden_size=16384, num_attention_heads=128, num_query_groups=8,
                             ffn_hidden_size=53248, vocab_size=128256),
    ("deepseek_v3", "16B"): dict(num_layers=27, hidden_size=2048, num_attention_heads=16, num_query_groups=16,
                                 ffn_hidden_size=10944, moe_ffn_hidden_size=1408, num_experts=64, moe_router_topk=6,
                                 vocab_size=102400),
    ("deepseek_v3", "671B"): dict(num_layers=61, hidden_size=7168, num_attention_heads=128, num_query_groups=128,
                                  ffn_hidden_size=18432, moe_ffn_hidden_size=2048, num_experts=256, moe_router_topk=8,
                                  vocab_size=129280),
}

# 0.3.x: the Trainer.Config defaults every config function starts from ("section.field" -> value).
DEFAULTS_03: dict[str, Any] = {
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "training.steps": 10000, "training.enable_cpu_offload": False, "training.mixed_precision_param": "bfloat16",
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_sequence_parallel": True, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.expert_parallel_degree": 1,
    "compile.enable": False, "compile.enable_async_tensor_parallel": False, "compile.components": ["model", "loss"],
    "activation_checkpoint.mode": "selective", "fp8": "none",
}
# 0.3.x config functions torchtitan ships: model flavor and the values they set.
CONFIGS_03: dict[str, dict[str, Any]] = {
    "llama3_debugmodel": {"model": ("llama3", "debugmodel"), "training.local_batch_size": 8, "training.seq_len": 2048,
                          "training.steps": 10},
    "llama3_8b": {"model": ("llama3", "8B"), "training.local_batch_size": 1, "training.seq_len": 8192,
                  "training.steps": 1000},
    "llama3_8b_mxfp8": {"model": ("llama3", "8B"), "training.local_batch_size": 1, "training.seq_len": 8192,
                        "training.steps": 1000, "compile.enable": True, "compile.components": ["model"],
                        "fp8": "mxfp8"},
    "llama3_70b": {"model": ("llama3", "70B"), "training.local_batch_size": 8, "training.seq_len": 8192,
                   "training.steps": 1000, "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full"},
    "llama3_405b": {"model": ("llama3", "405B"), "training.local_batch_size": 2, "training.seq_len": 8192,
                    "training.steps": 3000, "parallelism.tensor_parallel_degree": 8, "activation_checkpoint.mode": "full",
                    "compile.enable": True, "compile.enable_async_tensor_parallel": True, "fp8": "tensorwise"},
    "deepseek_v3_16b": {"model": ("deepseek_v3", "16B"), "training.local_batch_size": 4, "training.seq_len": 4096,
                        "training.steps": 1000, "parallelism.expert_parallel_degree": 8, "compile.enable": True,
                        "compile.components": ["loss"]},
}
# 0.2.x ([job] TOML) defaults for the fields the adapter reads.
DEFAULTS_02: dict[str, Any] = {
    "model.name": "llama3", "model.flavor": "debugmodel", "model.converters": [],
    "training.local_batch_size": 8, "training.global_batch_size": -1, "training.seq_len": 2048,
    "training.steps": 10000, "training.enable_cpu_offload": False, "training.mixed_precision_param": "bfloat16",
    "parallelism.data_parallel_replicate_degree": 1, "parallelism.data_parallel_shard_degree": -1,
    "parallelism.fsdp_reshard_after_forward": "default", "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_async_tensor_parallel": False, "parallelism.pipeline_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1, "parallelism.expert_parallel_degree": 1,
    "compile.enable": False, "compile.components": ["model", "loss"], "activation_checkpoint.mode": "selective",
}

_INT_FIELDS = {
    "parallelism.tensor_parallel_degree": "tensor_parallel",
    "parallelism.pipeline_parallel_degree": "pipeline_parallel",
    "parallelism.context_parallel_degree": "context_parallel",
    "parallelism.expert_parallel_degree": "expert_parallel",
    "training.local_batch_size": "micro_batch_size",
}
_BOOL_FIELDS_02 = {
    "training.enable_cpu_offload": "cpu_offload",
    "compile.enable": "torch_compile",
    "parallelism.enable_async_tensor_parallel": "async_tp",
}
_BOOL_FIELDS_03 = {
    "training.enable_cpu_offload": "cpu_offload",
    "compile.enable": "torch_compile",
    "compile.enable_async_tensor_parallel": "async_tp",
    "parallelism.enable_sequence_parallel": "sequence_parallel",
}
_FP8_CONVERTERS = {"float8": "tensorwise", "quantize.linear.float8": "tensorwise", "quantize.linear.mx": "mxfp8",
                   "mx": "mxfp8"}
_SUBCOMMAND = re.compile(r"^activation[-_]checkpoint:([a-z_-]+)$")
_AC_MODES = {"none": "none", "selective": "selective", "full": "full"}


class TorchtitanLaunchError(ValueError):
    """A torchtitan launch that cannot be read; names the field and the fix."""


def _norm(flag: str) -> str:
    """--Section.Field-Name -> section.field_name."""
    return flag.lstrip("-").replace("-", "_")


def _is_value(tok: str) -> bool:
    return (not tok.startswith("-") or re.fullmatch(r"-\.?\d.*", tok) is not None) and not _SUBCOMMAND.match(tok)


@dataclass
class Override:
    """One command-line item: a ``--section.field [values]`` flag, the subcommand, or another word."""

    tokens: list[str]
    key: str | None = None  # normalized section.field (without a no_ prefix)
    negated: bool = False  # --section.no-field
    subcommand: str | None = None

    @property
    def values(self) -> list[str]:
        first = self.tokens[0]
        if "=" in first and first.startswith("--"):
            return [first.split("=", 1)[1], *self.tokens[1:]]
        return self.tokens[1:]


def split_overrides(args: list[str], bool_keys: set[str]) -> list[Override]:
    out: list[Override] = []
    k, n = 0, len(args)
    while k < n:
        tok = args[k]
        m = _SUBCOMMAND.match(tok)
        if m:
            out.append(Override(args[k:], subcommand=m.group(1)))  # it and what follows belong together
            break
        if not tok.startswith("--"):
            out.append(Override([tok]))
            k += 1
            continue
        name = tok.split("=", 1)[0]
        key = _norm(name)
        negated = False
        if "." in key:
            sec, fld = key.rsplit(".", 1)
            bare = "=" not in tok and (k + 1 >= n or not _is_value(args[k + 1]))
            if fld.startswith("no_") and (f"{sec}.{fld[3:]}" in bool_keys or bare):
                key, negated = f"{sec}.{fld[3:]}", True  # --section.no-field: a bool field set false
        if "=" in tok:
            out.append(Override([tok], key=key, negated=negated))
            k += 1
            continue
        if key in bool_keys:
            if k + 1 < n and args[k + 1].lower() in ("true", "false"):
                out.append(Override(args[k:k + 2], key=key, negated=negated))
                k += 2
            else:
                out.append(Override([tok], key=key, negated=negated))
                k += 1
            continue
        j = k + 1
        while j < n and _is_value(args[j]):
            j += 1
        out.append(Override(args[k:j], key=key, negated=negated))
        k = j
    return out


def _coerce(key: str, raw: Any, like: Any) -> Any:
    """A CLI/TOML value as the type of ``like`` (the field's default), or an error naming the field."""
    if isinstance(like, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise TorchtitanLaunchError(f"{key}: {raw!r} is not a boolean; write true or false")
    if isinstance(like, int):
        if isinstance(raw, bool) or isinstance(raw, float):
            raise TorchtitanLaunchError(f"{key}: {raw!r} is not an integer; write e.g. {key.split('.')[-1]} = 2")
        if isinstance(raw, int):
            return raw
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise TorchtitanLaunchError(f"{key}: {raw!r} is not an integer; write e.g. {key.split('.')[-1]} = 2") from None
    if isinstance(like, list):
        if isinstance(raw, list):
            return raw
        return [x for x in str(raw).split(",") if x]
    return raw


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


@dataclass
class TorchtitanLaunch:
    """A torchtitan launch, read. ``launch`` is None when only a TOML file was given."""

    style: str  # "toml" (0.2.x) | "cli" (0.3.x)
    launch: Launch | None
    overrides: list[Override]
    values: dict[str, Any]  # resolved "section.field" values (TOML/config function + overrides)
    fixed: dict[str, Any]
    setting: dict[str, Any]
    world_size: int | None
    env: dict[str, str] = field(default_factory=dict)
    toml_path: str | None = None
    config: str | None = None  # 0.3 --config
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # launch-level faults (a flag left without its value)
    device: str | None = None  # the contract's hardware.kind: fp8 recipes follow it
    base_dir: str | None = None  # where relative job-file paths are read from
    read_with: dict[str, Any] = field(default_factory=dict)  # env, args, cwd the script was read with

    @property
    def bool_keys(self) -> set[str]:
        return set(_BOOL_FIELDS_02 if self.style == "toml" else _BOOL_FIELDS_03)


def _resolve(style: str, base: dict[str, Any], overrides: list[Override], defaults: Mapping[str, Any]) -> dict[str, Any]:
    vals = dict(base)
    for ov in overrides:
        if ov.subcommand is not None:
            mode = ov.subcommand.replace("-", "_")
            vals["activation_checkpoint.mode"] = mode
            continue
        if ov.key is None or "." not in ov.key:
            continue
        like = defaults.get(ov.key)
        if ov.negated:
            vals[ov.key] = False
            continue
        if (like is None or isinstance(like, bool)) and not ov.values and len(ov.tokens) == 1 and "=" not in ov.tokens[0]:
            vals[ov.key] = True  # a bare --section.field is a bool flag
            continue
        raw: Any = ov.values if len(ov.values) != 1 else ov.values[0]
        if like is not None:
            vals[ov.key] = _coerce(ov.key, raw, like)
        else:
            vals[ov.key] = raw
    return vals


def _fp8_of(style: str, vals: Mapping[str, Any]) -> str:
    if style == "cli":
        return vals.get("fp8", "none")
    for conv in vals.get("model.converters") or []:
        if conv in _FP8_CONVERTERS:
            if _FP8_CONVERTERS[conv] == "tensorwise":
                return vals.get("quantize.linear.float8.recipe_name") or vals.get("float8.recipe_name") or "tensorwise"
            return "mxfp8"
    return "none"


def _read(style: str, vals: dict[str, Any], world: int | None) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    notes: list[str] = []
    model = vals.get("model")
    if isinstance(model, tuple):
        name, flavor = model
    else:
        name, flavor = vals.get("model.name", "llama3"), vals.get("model.flavor", "debugmodel")
    fixed: dict[str, Any] = {"model_name": name, "model_flavor": flavor}
    dims = FLAVORS.get((name, flavor))
    if dims:
        fixed.update(dims)
    else:
        notes.append(f"model {name} flavor {flavor} is not in the flavor table; model dimensions are unknown")
    fixed["seq_length"] = vals["training.seq_len"]
    fixed["train_iters"] = vals["training.steps"]
    for src, dst in (("optimizer.lr", "lr"), ("training.dataset", "data_path"), ("debug.seed", "seed"),
                     ("training.seed", "seed")):
        if vals.get(src) is not None:
            fixed[dst] = vals[src]

    s: dict[str, Any] = {k.name: k.default for k in knobs_for(FRAMEWORK)}
    for key, knob_name in _INT_FIELDS.items():
        s[knob_name] = vals[key]
    for key, knob_name in (_BOOL_FIELDS_02 if style == "toml" else _BOOL_FIELDS_03).items():
        s[knob_name] = bool(vals.get(key, False))
    if style == "toml":
        s["sequence_parallel"] = s["tensor_parallel"] > 1  # 0.2.x applies SP whenever TP > 1
    else:
        s["sequence_parallel"] = bool(vals.get("parallelism.enable_sequence_parallel", True)) and s["tensor_parallel"] > 1
    mode = str(vals.get("activation_checkpoint.mode", "selective")).replace("-", "_")
    if mode not in _AC_MODES:
        raise TorchtitanLaunchError(
            f"activation_checkpoint.mode {mode!r} has no catalog equivalent (none, selective, full); "
            "the tuner cannot represent it")
    s["recompute_granularity"] = _AC_MODES[mode]
    s["bf16"] = vals.get("training.mixed_precision_param", "bfloat16") == "bfloat16"
    s["fp8_recipe"] = _fp8_of(style, vals)
    s["fsdp_reshard_after_forward"] = vals.get("parallelism.fsdp_reshard_after_forward", "default")
    rep = int(vals.get("parallelism.data_parallel_replicate_degree", 1))
    shard = int(vals.get("parallelism.data_parallel_shard_degree", -1))
    inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
    if shard > 0:
        s["data_parallel"] = rep * shard
    elif world and world % (inner * rep) == 0:
        s["data_parallel"] = world // inner
    else:
        s["data_parallel"] = None
    # FSDP shards optimizer state over the shard degree: Megatron calls that the distributed optimizer
    s["distributed_optimizer"] = bool(s["data_parallel"]) and s["data_parallel"] // rep > 1
    gbs = int(vals.get("training.global_batch_size", -1))
    if gbs > 0:
        fixed["global_batch_size"] = gbs
    elif s["data_parallel"]:
        fixed["global_batch_size"] = s["micro_batch_size"] * s["data_parallel"]
    else:
        fixed["global_batch_size"] = None
        notes.append("global batch = local batch x DP, and the DP degree is unknown: state the world size")
    return fixed, s, notes


def _env_knobs(s: dict[str, Any], env: Mapping[str, str]) -> None:
    for k in knobs_for(FRAMEWORK):
        sp = k.spelling.get(FRAMEWORK, "")
        if sp.startswith(ENV_PREFIX) and sp[len(ENV_PREFIX):] in env:
            raw = env[sp[len(ENV_PREFIX):]]
            try:
                s[k.name] = int(raw) if k.kind == "int" else raw
            except ValueError:
                raise TorchtitanLaunchError(f"{sp[len(ENV_PREFIX):]}={raw!r} is not an integer") from None
            if s[k.name] not in k.domain and k.kind != "int":
                raise TorchtitanLaunchError(f"{sp[len(ENV_PREFIX):]}={raw!r} is not one of {', '.join(map(str, k.domain[1:]))}")


def parse_toml_job(text: str, *, path: str = "<toml>") -> dict[str, Any]:
    """A 0.2.x job file as flat "section.field" values over the defaults; types checked."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TorchtitanLaunchError(f"{path}: not valid TOML: {e}") from None
    flat = _flatten(data)
    vals = dict(DEFAULTS_02)
    for key, raw in flat.items():
        like = DEFAULTS_02.get(key)
        if like is not None and not isinstance(like, list) and isinstance(raw, str) and not isinstance(like, str):
            raise TorchtitanLaunchError(
                f"{path}: {key} = {raw!r} is a string; write {key.split('.')[-1]} = {raw} (torchtitan only warns, "
                "then fails on the GPU node)")
        vals[key] = _coerce(key, raw, like) if like is not None else raw
    return vals


def _toml_notes(vals: Mapping[str, Any]) -> list[str]:
    notes = []
    if any(k.startswith("float8.") for k in vals):
        notes.append("[float8] is not a torchtitan 0.2 table: use [quantize.linear.float8] and "
                     "model.converters = [\"quantize.linear.float8\"]")
    return notes


def parse_torchtitan_argv(argv: list[str], *, env: Mapping[str, str] | None = None, base_dir: str | Path | None = None,
                          script_vars: Mapping[str, Any] | None = None, source: str = "<command>",
                          line: int | None = None) -> TorchtitanLaunch:
    """Read an expanded torchtitan command (torchrun ... -m torchtitan.train ..., or run_train.sh)."""
    env = dict(env or {})
    launch = split_launcher(list(argv), env=env, line=line)
    prog = launch.program
    world = launch.world_size
    if prog and os.path.basename(prog[0]) == "run_train.sh":
        # NGPU=8 CONFIG_FILE=x.toml ./run_train.sh [overrides] (0.2) / MODULE=.. CONFIG=.. (0.3)
        ngpu = env.get("NGPU", "8")
        world = int(ngpu) if ngpu.isdigit() else None
        extra = []
        if env.get("CONFIG_FILE"):
            extra = ["--job.config_file", env["CONFIG_FILE"]]
        elif env.get("MODULE") or env.get("CONFIG"):
            extra = ["--module", env.get("MODULE", "llama3"), "--config", env.get("CONFIG", "llama3_debugmodel")]
        args = extra + launch.args
    elif prog[:2] == ["-m", "torchtitan.train"] or (prog and prog[-1].endswith("torchtitan/train.py")) or \
            (prog and os.path.basename(prog[0]) == "torchtitan_cpu.py"):  # launchers/: torchtitan.train's arguments
        args = launch.args
    else:
        raise TorchtitanLaunchError(f"{source}: expected `-m torchtitan.train` or run_train.sh after the launcher, "
                                    f"found {' '.join(prog) or '(nothing)'}")
    if world is None and script_vars:
        world = world_from_variables(dict(script_vars))
    probe = split_overrides(args, set(_BOOL_FIELDS_02) | set(_BOOL_FIELDS_03))
    keys = {o.key: o.values for o in probe if o.key}
    toml_path = None
    for k in ("job.config_file",):
        if k in keys:
            toml_path = keys[k][0] if keys[k] else None
    if toml_path:
        p = Path(toml_path)
        if not p.is_absolute() and base_dir is not None:
            p = Path(base_dir) / p
        if not p.is_file():
            raise TorchtitanLaunchError(f"{source}: --job.config_file {toml_path} does not exist (looked at {p})")
        base = parse_toml_job(p.read_text(), path=str(p))
        style, defaults, config = "toml", DEFAULTS_02, None
        notes = _toml_notes(base)
    elif "module" in keys or "config" in keys:
        config = (keys.get("config") or [""])[0]
        base = dict(DEFAULTS_03)
        notes = []
        if config in CONFIGS_03:
            base.update(CONFIGS_03[config])
        else:
            notes.append(f"config {config!r} is not in the table of shipped config functions; its own values "
                         "are unknown, so Trainer.Config defaults are assumed")
        style, defaults = "cli", DEFAULTS_03
    else:
        raise TorchtitanLaunchError(f"{source}: give --job.config_file FILE (0.2.x) or --module M --config C (0.3.x)")
    overrides = split_overrides(args, set(_BOOL_FIELDS_02 if style == "toml" else _BOOL_FIELDS_03))
    vals = _resolve(style, base, overrides, defaults)
    fixed, setting, more = _read(style, vals, world)
    _env_knobs(setting, env)
    # run_train.sh takes the job file / module from the environment: only its own arguments are rewritten
    own = split_overrides(launch.args, set(_BOOL_FIELDS_02 if style == "toml" else _BOOL_FIELDS_03))
    return TorchtitanLaunch(style=style, launch=launch, overrides=own,
                            values=vals, fixed=fixed, setting=setting, world_size=world, env=env,
                            toml_path=toml_path, config=config, notes=notes + more,
                            base_dir=None if base_dir is None else str(base_dir))


def parse_torchtitan(text: str, *, path: str = "<command>", env: Mapping[str, str] | None = None,
                     base_dir: str | Path | None = None, world_size: int | None = None,
                     args: list[str] | None = None, cwd: str | Path | None = None) -> TorchtitanLaunch:
    """Read a torchtitan launch from text: a TOML job file (0.2.x) or a script/command line. ``args``
    are a script's $1, $2, ...; ``cwd`` its $PWD (default: this process's working directory)."""
    if path.endswith(".toml") or re.match(r"^\s*(#.*\n\s*)*\[", text):
        vals = parse_toml_job(text, path=path)
        fixed, setting, notes = _read("toml", vals, world_size)
        _env_knobs(setting, dict(env or {}))
        return TorchtitanLaunch(style="toml", launch=None, overrides=[], values=vals, fixed=fixed, setting=setting,
                                world_size=world_size, env=dict(env or {}), toml_path=path,
                                notes=_toml_notes(vals) + notes,
                                base_dir=None if base_dir is None else str(base_dir))
    try:
        res = interpret_script(text, path=path, env=dict(env or {}), args=args,
                               cwd=None if cwd is None else str(cwd))
    except ScriptError as e:
        raise TorchtitanLaunchError(str(e)) from None
    for cmd in reversed(res.commands):
        la = split_launcher(cmd.argv)
        prog = la.program
        if prog[:2] == ["-m", "torchtitan.train"] or (prog and os.path.basename(prog[0]) == "run_train.sh"):
            base = base_dir if base_dir is not None else (Path(path).parent if path != "<command>" else None)
            out = parse_torchtitan_argv(cmd.argv, env={**res.exported, **cmd.env}, base_dir=base,
                                        script_vars=res.variables, source=path, line=cmd.line)
            if out.world_size is None and world_size:
                out = _with_world(out, world_size)
            out.problems = unfilled_flags(text, cmd.argv, res.variables, args)
            out.read_with = {"env": dict(env or {}), "args": list(args or []), "cwd": None if cwd is None else str(cwd)}
            return out
    raise TorchtitanLaunchError(f"{path}: no `torchrun ... -m torchtitan.train` or run_train.sh command found")


def _with_world(p: TorchtitanLaunch, world: int) -> TorchtitanLaunch:
    fixed, setting, notes = _read(p.style, p.values, world)
    _env_knobs(setting, p.env)
    p.fixed, p.setting, p.world_size = fixed, setting, world
    return p


def parse_torchtitan_file(path: str | Path, *, env: Mapping[str, str] | None = None,
                          world_size: int | None = None, args: list[str] | None = None,
                          cwd: str | Path | None = None) -> TorchtitanLaunch:
    p = Path(path)
    if p.suffix == ".toml":
        p = p.resolve()  # a bare job file is launched by its absolute path, from wherever the trial runs
    return parse_torchtitan(p.read_text(), path=str(p), env=env, base_dir=p.parent, world_size=world_size,
                            args=args, cwd=cwd)


# --------------------------------------------------------------------------- emit
def _field_for(style: str, knob_name: str) -> str | None:
    for table in (_INT_FIELDS, _BOOL_FIELDS_02 if style == "toml" else _BOOL_FIELDS_03):
        for key, name in table.items():
            if name == knob_name:
                return key
    return {"fsdp_reshard_after_forward": "parallelism.fsdp_reshard_after_forward",
            "bf16": "training.mixed_precision_param",
            "data_parallel_replicate": "parallelism.data_parallel_replicate_degree"}.get(knob_name)


def _render(key: str, value: Any, like: Override | None, bool_field: bool) -> list[str]:
    """``--section.field VALUE`` in the spelling ``like`` uses (``-`` or ``_``, ``=`` or a space); a bool is a
    flag (``--section.no-field`` for false), a list one comma-separated word, None ``None``."""
    if isinstance(value, (list, tuple)):
        value = ",".join(value)
    elif value is None:
        value = "None"
    sec, fld = key.rsplit(".", 1)
    hyphen = like is not None and "-" in like.tokens[0].split(".", 1)[-1].split("=")[0]
    name = fld.replace("_", "-") if hyphen else fld
    if bool_field:
        return [f"--{sec}.{name}"] if value else [f"--{sec}.no-{fld.replace('_', '-')}"]
    if like is not None and "=" in like.tokens[0]:
        return [f"--{sec}.{name}={value}"]
    return [f"--{sec}.{name}", str(value)]


_F8 = "quantize.linear.float8"


def _fp8_fields(parsed: TorchtitanLaunch, recipe: str) -> dict[str, Any]:
    """0.2.x fields that give ``recipe``: the converter list, float8's recipe_name (None is tensorwise) and,
    for rowwise, the fp8 all-gather off (torchtitan: "using `float8_config.enable_fsdp_float8_all_gather`
    together with `float8_config.recipe_name` is not supported")."""
    v = parsed.values
    out: dict[str, Any] = {}
    if recipe != parsed.setting["fp8_recipe"]:
        convs = [c for c in (v.get("model.converters") or []) if c not in _FP8_CONVERTERS]
        if recipe == "mxfp8":
            convs.append("quantize.linear.mx")
        elif recipe != "none":
            convs.append(_F8)
        out["model.converters"] = convs
    if recipe in ("tensorwise", "rowwise"):
        name = None if recipe == "tensorwise" else recipe
        if name != v.get(f"{_F8}.recipe_name"):
            out[f"{_F8}.recipe_name"] = name
        if name is not None and v.get(f"{_F8}.enable_fsdp_float8_all_gather"):
            out[f"{_F8}.enable_fsdp_float8_all_gather"] = False
    return out


def emit_torchtitan_args(parsed: TorchtitanLaunch, setting: Mapping[str, Any]) -> list[str]:
    """The command-line arguments after ``-m torchtitan.train`` for ``setting``."""
    s = {**parsed.setting, **{k: v for k, v in setting.items() if v is not None}}
    style = parsed.style
    bool_keys = parsed.bool_keys
    want: dict[str, Any] = {}  # section.field -> value to state (only where it differs from the resolved one)
    for name, value in s.items():
        key = _field_for(style, name)
        if key is None:
            continue
        if name == "sequence_parallel":
            if style == "toml":
                continue  # 0.2.x: SP follows TP
            value = bool(value) or s["tensor_parallel"] <= 1 and bool(parsed.values.get(key, True))
        if name == "bf16":
            value = "bfloat16" if value else "float32"
        cur = parsed.values.get(key)
        if value != cur:
            want[key] = value
    # data parallel: state the shard degree only when the job states it
    rep = int(s.get("data_parallel_replicate", parsed.values.get("parallelism.data_parallel_replicate_degree", 1)))
    shard = int(parsed.values.get("parallelism.data_parallel_shard_degree", -1))
    dp = s.get("data_parallel")
    inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
    if shard <= 0 and parsed.world_size and parsed.world_size % inner == 0:
        dp = parsed.world_size // inner  # the degree torchtitan will resolve -1 to
    if dp and shard > 0 and dp // rep != shard:
        if dp % rep or dp < rep:
            raise TorchtitanLaunchError(
                f"data_parallel {dp} is not a multiple of data_parallel_replicate_degree {rep}: no shard degree "
                f"gives it (torchtitan: \"dp_shard must -1 or >=1\")")
        want["parallelism.data_parallel_shard_degree"] = dp // rep
    # keep the global batch fixed when the job derives it from local batch x DP
    gbs = parsed.fixed.get("global_batch_size")
    if gbs and int(parsed.values.get("training.global_batch_size", -1)) <= 0 and dp and s["micro_batch_size"] * dp != gbs:
        want["training.global_batch_size"] = gbs
    # fp8 (0.2.x: through model.converters)
    if style == "toml":
        want.update(_fp8_fields(parsed, s["fp8_recipe"]))
    job = _derived_job_file(parsed, want)  # what the command line cannot say goes into a copy of the job file
    mode = s["recompute_granularity"]
    ac_changed = mode != parsed.setting["recompute_granularity"]

    out: list[str] = []
    sub: Override | None = None
    done: set[str] = set()
    for ov in parsed.overrides:
        if ov.subcommand is not None:
            sub = ov
            continue
        if job is not None and ov.key == "job.config_file":
            out.extend(_render(ov.key, job, ov, False))
            continue
        if ov.key == "activation_checkpoint.mode" and style == "toml" and ac_changed:
            out.extend(_render(ov.key, mode, ov, False))
            done.add(ov.key)
            continue
        if ov.key in want and ov.key not in done:
            out.extend(_render(ov.key, want[ov.key], ov, ov.key in bool_keys or isinstance(want[ov.key], bool)))
            done.add(ov.key)
            continue
        if ov.key in want and ov.key in done:
            continue  # a repeated flag: the last one would win; state it once
        out.extend(ov.tokens)
    if job is not None and not any(ov.key == "job.config_file" for ov in parsed.overrides):
        out[:0] = ["--job.config_file", job]  # run_train.sh names the job file in CONFIG_FILE: emit_torchtitan moves it
    for key, value in want.items():
        if key not in done:
            out.extend(_render(key, value, None, key in bool_keys or isinstance(value, bool)))
    if style == "toml":
        if ac_changed and "activation_checkpoint.mode" not in done:
            out.extend(["--activation_checkpoint.mode", mode])
        if sub is not None:
            out.extend(sub.tokens)
    else:
        if ac_changed:
            rest = sub.tokens[1:] if sub is not None and mode == parsed.setting["recompute_granularity"] else []
            out.extend([f"activation-checkpoint:{mode}", *rest])
        elif sub is not None:
            out.extend(sub.tokens)
        if (s["pipeline_parallel"] > 1 and not parsed.values.get("training.disable_cuda_graphs")
                and not any(o.key == "training.disable_cuda_graphs" for o in parsed.overrides)):
            # 0.3.x refuses PP > 1 with CUDA graphs: "Set --training.disable_cuda_graphs"
            idx = next((i for i, t in enumerate(out) if _SUBCOMMAND.match(t)), len(out))
            out.insert(idx, "--training.disable_cuda_graphs")
    return out


JOBS_DIR = ".infrarsi/jobs"  # beside the job file: derived copies, named by their content


def _derived_job_file(parsed: TorchtitanLaunch, want: dict[str, Any]) -> str | None:
    """A copy of the job file with the values the command line cannot state (an empty list: tyro reads a list
    as one comma-separated word, and ``--model.converters ''`` is ``['']``, a KeyError in torchtitan), taken
    out of ``want``. Written once beside the job file under :data:`JOBS_DIR`, named by its sha256; None
    when nothing needs it."""
    edits = {k: v for k, v in want.items() if isinstance(v, list) and not v}
    if not edits:
        return None
    if parsed.style != "toml" or not parsed.toml_path:
        raise TorchtitanLaunchError(f"{', '.join(edits)}: an empty list cannot be given on the command line")
    for k in edits:
        del want[k]
    src = Path(parsed.toml_path)
    if not src.is_absolute() and parsed.base_dir:
        src = Path(parsed.base_dir) / src
    from .toml_edit import set_values

    text = set_values(src.read_text(), edits, path=str(src))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    dest = src.resolve().parent / JOBS_DIR / f"{src.stem}.{digest}.toml"
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(dest)
    return str(dest)


def emit_torchtitan(parsed: TorchtitanLaunch, setting: Mapping[str, Any], *, world_size: int | None = None,
                    time_limit_s: float = 600, extra_env: Mapping[str, str] | None = None) -> LaunchSpec:
    """The launch for ``setting``. A bare TOML file gets ``torchrun --nproc-per-node=W -m
    torchtitan.train --job.config_file FILE``; W is the world size (required then)."""
    s = {**parsed.setting, **dict(setting)}
    world = parsed.world_size or world_size
    inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
    if "data_parallel" not in setting and world and world % inner == 0:
        s["data_parallel"] = world // inner  # a setting that leaves DP out keeps the world size
    env = dict(parsed.env)
    for k in knobs_for(FRAMEWORK):
        sp = k.spelling.get(FRAMEWORK, "")
        if sp.startswith(ENV_PREFIX) and k.name in s:
            var = sp[len(ENV_PREFIX):]
            if s[k.name] == k.default:
                env.pop(var, None)
            else:
                env[var] = str(s[k.name])
    env.update(extra_env or {})
    if parsed.launch is None:
        if not world:
            raise TorchtitanLaunchError("a bare TOML job file needs the world size to launch; pass world_size")
        base = TorchtitanLaunch(**{**parsed.__dict__})
        base.overrides = split_overrides(["--job.config_file", parsed.toml_path or ""], parsed.bool_keys)
        args = emit_torchtitan_args(base, s)
        argv = ["torchrun", f"--nproc-per-node={world}", "-m", "torchtitan.train", *args]
        return LaunchSpec(argv=argv, env=env, processes=world, nodes=1, devices=world, time_limit_s=time_limit_s)
    la = parsed.launch
    args = emit_torchtitan_args(parsed, s)
    nodes = la.nnodes or 1
    procs = la.nproc_per_node or (world // nodes if world else 1)
    if la.program and os.path.basename(la.program[0]) == "run_train.sh":
        if args[:1] == ["--job.config_file"] and "CONFIG_FILE" in env:
            env["CONFIG_FILE"], args = args[1], args[2:]
        argv = [*la.launcher, *la.program, *args]
    else:
        argv = la.argv(args)
    return LaunchSpec(argv=argv, env=env, processes=max(1, procs), nodes=max(1, nodes),
                      devices=max(1, world or procs * nodes), time_limit_s=time_limit_s)


# --------------------------------------------------------------------------- space and checks
def knob_space_for(parsed: TorchtitanLaunch, *, include_current: bool = True) -> KnobSpace:
    """The catalog space for this launch: torchtitan's knobs, its defaults, and its own rules
    (0.2.x: SP follows TP; 0.3.x config functions fix fp8 in code)."""
    defaults = {"recompute_granularity": "selective", "bf16": True}
    space = space_for_fixed(parsed.fixed, world_size=parsed.world_size, framework=FRAMEWORK,
                            include=parsed.setting if include_current else None, defaults=defaults,
                            expert_tensor_parallel=1, device=parsed.device)
    rep = int(parsed.values.get("parallelism.data_parallel_replicate_degree", 1))
    knobs = [k.with_domain([d for d in k.domain if d % rep == 0] or list(k.domain)) if k.name == "data_parallel"
             else k for k in space.knobs]
    dp0 = next((k.default for k in knobs if k.name == "data_parallel"), None)
    if dp0:  # the derived knob's default follows the default degrees: FSDP over dp / rep ranks
        knobs = [k.with_domain(k.domain, dp0 // rep > 1) if k.name == "distributed_optimizer" else k for k in knobs]
    cons = list(space.constraints)
    cons += _torchtitan_rules(parsed, rep)
    if parsed.style == "cli":
        knobs = [k.with_domain([parsed.setting["fp8_recipe"]]) if k.name == "fp8_recipe" else k for k in knobs]
    if parsed.style == "toml":
        def sp_follows_tp(s: Mapping[str, Any]) -> str | None:
            tp, sp = s.get("tensor_parallel", 1), s.get("sequence_parallel", False)
            if bool(sp) != (tp > 1):
                return (f"torchtitan 0.2 applies sequence parallelism exactly when TP > 1 "
                        f"(tp = {tp}, sequence_parallel = {sp})")
            return None

        cons.append(Constraint("sp_follows_tp", sp_follows_tp))
        # sequence_parallel has no 0.2 field; it is derived, so it stays in the space for the rule
    return KnobSpace(knobs, cons)


def _torchtitan_rules(parsed: TorchtitanLaunch, rep: int) -> list[Constraint]:
    """The rules torchtitan adds to the catalog's: the replicate degree the job fixes, FSDP's optimizer
    sharding, and async TP (which compiles the model)."""
    components = list(parsed.values.get("compile.components") or ["model", "loss"])
    style = parsed.style

    def dp_covers_replicate(s: Mapping[str, Any]) -> str | None:
        dp = s.get("data_parallel")
        if dp is None or dp % rep == 0:
            return None
        return (f"data_parallel {dp} is not a multiple of the job's data_parallel_replicate_degree {rep}: the shard "
                f"degree would be {dp} / {rep} (torchtitan: \"dp_shard must -1 or >=1\"); choose a multiple of {rep}")

    def optimizer_sharded_by_fsdp(s: Mapping[str, Any]) -> str | None:
        dp = s.get("data_parallel")
        if dp is None:
            return None
        want = dp // rep > 1
        if bool(s.get("distributed_optimizer", want)) != want:
            return (f"torchtitan shards optimizer state exactly when FSDP's shard degree is above 1 (data_parallel "
                    f"{dp} / replicate {rep} = {dp // rep}): distributed_optimizer must be {want}")
        return None

    def async_tp_needs_compiled_model(s: Mapping[str, Any]) -> str | None:
        if not s.get("async_tp"):
            return None
        if style == "toml" and s.get("tensor_parallel", 1) <= 1:
            return None  # 0.2.x: no TP mesh, async TP is inert
        if not s.get("torch_compile") or "model" not in components:
            return (f"async_tp needs torch_compile with 'model' in compile.components (the job compiles "
                    f"{components}; torchtitan: \"Async TP requires 'model' in --compile.components and "
                    f"--compile.enable\")")
        return None

    return [Constraint(fn.__name__, fn) for fn in (dp_covers_replicate, optimizer_sharded_by_fsdp,
                                                    async_tp_needs_compiled_model)]


def violations(parsed: TorchtitanLaunch, setting: Mapping[str, Any] | None = None) -> list[str]:
    s = dict(parsed.setting if setting is None else {**parsed.setting, **setting})
    space = knob_space_for(parsed)
    out: list[str] = list(parsed.problems)
    if parsed.world_size and s.get("data_parallel") is None:
        inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
        out.append(f"world_size({parsed.world_size}) is not divisible by tp({s['tensor_parallel']}) * "
                   f"pp({s['pipeline_parallel']}) * cp({s['context_parallel']}) = {inner}")
    out.extend(v.message for v in check_setting(space, s))
    return out


# --------------------------------------------------------------------------- logs
# The log parser and failure classifier live in .torchtitan_log (re-exported here).
from .torchtitan_log import (StepLog, classify_torchtitan_failure, parse_torchtitan_log,  # noqa: E402,F401
                             parse_torchtitan_output, to_metrics)


# --------------------------------------------------------------------------- adapter
class TorchtitanAdapter(Adapter):
    """torchtitan through its job file or config function and command-line overrides."""

    name = FRAMEWORK

    def __init__(self, base_dir: str | Path | None = None) -> None:
        self.base_dir = Path(base_dir) if base_dir else None
        self._cache: dict[str, TorchtitanLaunch] = {}

    def launch_path(self, contract: Contract) -> Path:
        """``workload.launch``: relative to the contract's folder (``base_dir``) when it is there, else to the
        working directory (where torchtitan runs; the stages build adapters without a base_dir)."""
        p = Path(contract.workload.launch)
        if not p.is_absolute() and self.base_dir is not None and (self.base_dir / p).is_file():
            return self.base_dir / p
        return p

    def parsed(self, contract: Contract) -> TorchtitanLaunch:
        key = contract.model_dump_json(include={"workload", "hardware"})
        if key not in self._cache:
            w = contract.workload
            if w.launch:
                p = self.launch_path(contract)
                if not p.is_file():
                    raise TorchtitanLaunchError(f"workload.launch {w.launch!r} does not exist (looked at {p})")
                out = parse_torchtitan_file(p, env={**w.script_env, **w.env}, world_size=contract.hardware.devices,
                                            args=w.script_args, cwd=self.base_dir or Path.cwd())
            elif w.entrypoint:
                out = parse_torchtitan(w.entrypoint, env=w.env, base_dir=self.base_dir,
                                       world_size=contract.hardware.devices)
            else:
                raise TorchtitanLaunchError("workload: set launch (a TOML job file or launch script) or entrypoint")
            if out.world_size is None:
                out = _with_world(out, contract.hardware.devices)
            out.device = contract.hardware.kind
            self._cache[key] = out
        return self._cache[key]

    def knob_space(self, contract: Contract) -> KnobSpace:
        space = torchtitan_trial.with_runtime_knobs(knob_space_for(self.parsed(contract)), contract)
        return scoped_space(space, contract, "torchtitan")

    def launch(self, contract: Contract, setting: Mapping[str, Any], *, patches: Mapping[str, str] | None = None) -> LaunchSpec:
        parsed = self.parsed(contract)
        full = {**contract.baseline, **dict(setting)}
        spec = emit_torchtitan(parsed, full, world_size=contract.hardware.devices,
                               time_limit_s=contract.invariants.timing.timeout_s)
        if parsed.problems:
            raise TorchtitanLaunchError("; ".join(parsed.problems))
        rejected = check_torchtitan(parsed, spec.argv, env=spec.env, world_size=parsed.world_size or contract.hardware.devices)
        if rejected:  # torchtitan's own word, before any launch
            raise FrameworkRejected("; ".join(rejected))
        return torchtitan_trial.trial_spec(spec, contract, full, patches)  # the launcher, the cap, the threads

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        parsed = self.parsed(contract)
        gbs, seq = parsed.fixed.get("global_batch_size"), parsed.fixed.get("seq_length")
        return parse_torchtitan_output(stdout, stderr, returncode, warmup_steps=contract.invariants.timing.warmup_steps,
                                       measured_steps=contract.invariants.timing.measured_steps,
                                       world_size=parsed.world_size or contract.hardware.devices,
                                       tokens_per_step=(gbs * seq) if gbs and seq else None,
                                       cpu=contract.hardware.kind.lower() == "cpu",
                                       final_step=parsed.fixed.get("train_iters"))
