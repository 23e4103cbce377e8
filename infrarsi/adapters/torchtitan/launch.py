"""Read a torchtitan launch in either config era: a 0.2.x TOML job file (optionally with ``--section.field``
overrides, or through run_train.sh's CONFIG_FILE) or a 0.3.x ``--module M --config C`` command line, into
a :class:`TorchtitanLaunch`: resolved field values, the fixed workload (Megatron names) and the setting
(catalog knob names)."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...knobs.catalog import knobs_for
from ...transformer import data_parallel
from ...launch.bash import ScriptError
from ...launch.chain import Followed, follow
from ...launch.command import (Launch, flag_variables, split_launcher, unfilled_flags, user_environment,
                               world_from_variables)
from .configs import (
    _AC_MODES, _BOOL_FIELDS_02, _BOOL_FIELDS_03, _FP8_CONVERTERS, _INT_FIELDS, _SUBCOMMAND, CONFIGS_03, DEFAULTS_02,
    DEFAULTS_03, FLAVORS,
)
from .spelling import SPELLING


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
    chain: Followed | None = None  # the scripts read to reach the launch command, with their texts
    knob_vars: dict[str, tuple[str, ...]] = field(default_factory=dict)  # TP -> (tensor_parallel,): `--...degree $TP`

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

    s: dict[str, Any] = {k.name: k.default for k in knobs_for(SPELLING)}
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
    derived = data_parallel(world, s["tensor_parallel"], s["pipeline_parallel"], s["context_parallel"]) if world else None
    if shard > 0:
        s["data_parallel"] = rep * shard
    elif derived and derived % rep == 0:  # world = tp x pp x cp x (rep x shard)
        s["data_parallel"] = derived
    else:
        s["data_parallel"] = None
    s["data_parallel_replicate"] = rep  # HSDP's replicas (1: FSDP over every data-parallel rank)
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
    knobs = {k.name: k for k in knobs_for(SPELLING)}
    for var, name in SPELLING.env_vars(list(knobs.values())).items():
        k = knobs[name]
        if var in env:
            raw = env[var]
            try:
                s[k.name] = int(raw) if k.kind == "int" else raw
            except ValueError:
                raise TorchtitanLaunchError(f"{var}={raw!r} is not an integer") from None
            if s[k.name] not in k.domain and k.kind != "int":
                raise TorchtitanLaunchError(f"{var}={raw!r} is not one of {', '.join(map(str, k.domain[1:]))}")


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
                          line: int | None = None, also_from: tuple[str, ...] = ()) -> TorchtitanLaunch:
    """Read an expanded torchtitan command (torchrun ... -m torchtitan.train ..., or run_train.sh). A relative job
    file is read from ``base_dir``, else from the first of ``also_from`` that holds it (a chain's folders)."""
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
        if not p.is_file() and not Path(toml_path).is_absolute():
            p = next((Path(d) / toml_path for d in also_from if (Path(d) / toml_path).is_file()), p)
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
                     args: list[str] | None = None, cwd: str | Path | None = None,
                     files: Mapping[str, str] | None = None) -> TorchtitanLaunch:
    """Read a torchtitan launch from text: a TOML job file (0.2.x) or a script/command line, through the scripts it
    runs (:mod:`infrarsi.launch.chain`; ``files``: their texts, read instead of the disk's). ``args``
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
        fol = follow(text, path=path, env={**user_environment(), **dict(env or {})}, args=args,
                     cwd=None if cwd is None else str(cwd), claims=_claims, files=files)
    except ScriptError as e:
        raise TorchtitanLaunchError(str(e)) from None
    cmd = fol.command
    if cmd is None:
        raise TorchtitanLaunchError(f"{path}: no `torchrun ... -m torchtitan.train` or run_train.sh command found"
                                    + (f" ({fol.missed[0]})" if fol.missed else ""))
    res = fol.result
    base = base_dir if base_dir is not None else (Path(path).parent if path != "<command>" else None)
    # a chain's job file: from the launch's folder, else the working folder and the folders of the scripts read
    also = (str(cwd) if cwd is not None else os.getcwd(), *(os.path.dirname(os.path.abspath(f)) for f in fol.files))
    out = parse_torchtitan_argv(cmd.argv, env=fol.env, base_dir=base, script_vars=res.variables, source=path,
                                line=cmd.line, also_from=also if fol.hops else ())
    if out.world_size is None and world_size:
        out = with_world(out, world_size)
    out.problems = unfilled_flags(fol.text, cmd.argv, res.variables, fol.args)
    out.read_with = {"env": dict(env or {}), "args": list(args or []), "cwd": None if cwd is None else str(cwd)}
    out.chain = fol
    from .equivalence import flag_knobs

    out.knob_vars = flag_variables(list(fol.files.values()), flag_knobs())
    return out


def _claims(argv: list[str]) -> bool:
    """Whether a command is a torchtitan launch: ``-m torchtitan.train`` or run_train.sh after the launcher."""
    prog = split_launcher(argv).program
    return prog[:2] == ["-m", "torchtitan.train"] or (bool(prog) and os.path.basename(prog[0]) == "run_train.sh")


def with_world(p: TorchtitanLaunch, world: int) -> TorchtitanLaunch:
    """``p`` read again for ``world`` ranks (its fixed values and setting depend on the world size: the data
    parallel degree, the global batch), for a launch that did not say its world size; changes ``p`` and returns it."""
    fixed, setting, notes = _read(p.style, p.values, world)
    _env_knobs(setting, p.env)
    p.fixed, p.setting, p.world_size = fixed, setting, world
    return p


def parse_torchtitan_file(path: str | Path, *, env: Mapping[str, str] | None = None,
                          world_size: int | None = None, args: list[str] | None = None,
                          cwd: str | Path | None = None) -> TorchtitanLaunch:
    """A launch file: a job file (read by its absolute path), or a script whose relative paths (the job file it
    names) resolve against ``cwd``, the folder it runs from, as the shell resolves them (default: its own folder)."""
    p = Path(path)
    if p.suffix == ".toml":
        p = p.resolve()  # a bare job file is launched by its absolute path, from wherever the trial runs
    base = p.parent if p.suffix == ".toml" or cwd is None else Path(cwd)
    return parse_torchtitan(p.read_text(), path=str(p), env=env, base_dir=base, world_size=world_size,
                            args=args, cwd=cwd)
