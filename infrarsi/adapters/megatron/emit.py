"""Megatron-LM launches written for a setting: knob flags rewritten where they stand, the rest kept.

A knob's flag is replaced in place (``--flag=v`` stays in that form), removed when the new value is the
default of a switch or a value flag Megatron rejects without its companion (``--recompute-method`` without
full recompute), or appended at the end; every other token is kept byte for byte, unknown flags included.
Environment knobs (NCCL) go into the launch's environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...trial import LaunchSpec
from ...knobs.catalog import knobs_for
from .args import (_BOOL_KNOBS, _CHOICE_KNOBS, _FP8_FORMAT, _INT_KNOBS, _ONLY_WHEN_WANTED, _RECOMPUTE_ACT,
                            _VP_LAYERS, COUPLED_FLAGS, Item, _read_fixed, _read_setting, split_items)
from .spelling import SPELLING

if TYPE_CHECKING:
    from .launch import MegatronLaunch


def _megatron_defaults() -> dict[str, Any]:
    return {k.name: k.default for k in knobs_for(SPELLING)} | dict(SPELLING.defaults)


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
            return full  # required with full recompute, refused with selective, inert without recompute
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
            inert = (name in ("recompute_method", "recompute_num_layers") and s["recompute_granularity"] == "none"
                     and s[name] == cur[name])  # read by nothing without recompute: kept as the user wrote it
            if name in _ONLY_WHEN_WANTED and not wants(name) and not inert:
                continue  # e.g. --recompute-method with selective recompute is refused by Megatron
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
    for k in knobs_for(SPELLING):
        name = k.name
        sp = SPELLING.get(name)
        if name in emitted or not sp or not wants(name):
            continue
        if name == "recompute_granularity" and s[name] == "none":
            continue
        if name == "fp8_recipe":
            if "fp8_format" not in emitted:
                out.extend([_FP8_FORMAT, "hybrid"])
            if s[name] != "delayed":
                out.extend([sp, s[name]])
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
    knobs = knobs_for(SPELLING)
    by_name = {k.name: k for k in knobs}
    for var, name in SPELLING.env_vars(knobs).items():
        if name not in setting:
            continue
        k, v = by_name[name], setting[name]
        if v == k.default:
            env.pop(var, None)
        else:
            env[var] = str(v)
    if setting.get("tensor_parallel", 1) > 1 or setting.get("context_parallel", 1) > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return env


def emit_megatron(parsed: MegatronLaunch, setting: Mapping[str, Any], *, launcher: str | None = None,
                  time_limit_s: float = 600) -> LaunchSpec:
    """The launch for ``setting``: same launcher, program and unrelated flags; knob flags rewritten.

    ``launcher`` None keeps the original launcher prefix; "torchrun" or "srun" builds a fresh one
    for the same node and process counts."""
    s = {**parsed.setting, **dict(setting)}
    args = emit_megatron_args(parsed.args, s, num_layers=parsed.fixed.get("num_layers"))
    env = knob_env(s, parsed.env)
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
