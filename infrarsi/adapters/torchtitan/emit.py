"""Rewrite a torchtitan launch for a setting: ``--section.field`` overrides on the command line (the job file
and every unrelated argument kept byte for byte, the activation-checkpoint subcommand last), a derived
copy of the job file for what the command line cannot say, and the launch spec."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...trial import LaunchSpec
from ...knobs.catalog import knobs_for
from ...transformer import data_parallel
from .configs import _BOOL_FIELDS_02, _BOOL_FIELDS_03, _FP8_CONVERTERS, _INT_FIELDS, _SUBCOMMAND
from .spelling import SPELLING

# Knobs written at their own field as they are, besides the field tables by kind (configs.py).
_AT_OWN_FIELD = ("fsdp_reshard_after_forward", "bf16", "data_parallel_replicate")
from .launch import Override, TorchtitanLaunch, TorchtitanLaunchError, split_overrides


def _field_for(style: str, knob_name: str) -> str | None:
    for table in (_INT_FIELDS, _BOOL_FIELDS_02 if style == "toml" else _BOOL_FIELDS_03):
        for key, name in table.items():
            if name == knob_name:
                return key
    return SPELLING.get(knob_name) if knob_name in _AT_OWN_FIELD else None


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
    derived = data_parallel(parsed.world_size, s["tensor_parallel"], s["pipeline_parallel"],
                            s["context_parallel"]) if parsed.world_size else None
    if shard <= 0 and derived:
        dp = derived  # the degree torchtitan will resolve -1 to
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
    from ...launch.toml_edit import set_values

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
                    time_limit_s: float = 600) -> LaunchSpec:
    """The launch for ``setting``. A bare TOML file gets ``torchrun --nproc-per-node=W -m
    torchtitan.train --job.config_file FILE``; W is the world size (required then)."""
    s = {**parsed.setting, **dict(setting)}
    world = parsed.world_size or world_size
    derived = data_parallel(world, s["tensor_parallel"], s["pipeline_parallel"], s["context_parallel"]) if world else None
    if "data_parallel" not in setting and derived:
        s["data_parallel"] = derived  # a setting that leaves DP out keeps the world size
    env = dict(parsed.env)
    knobs = knobs_for(SPELLING)
    for var, name in SPELLING.env_vars(knobs).items():
        k = next(k for k in knobs if k.name == name)
        if k.name in s:
            if s[k.name] == k.default:
                env.pop(var, None)
            else:
                env[var] = str(s[k.name])
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
