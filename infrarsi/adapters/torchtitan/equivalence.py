"""torchtitan launches compared by torchtitan's own config code.

The user's launch and the emitted one are each parsed by ``ConfigManager().parse_args`` (0.2.x in this process;
0.3.x from its own target directory, in a subprocess: :func:`.check.torchtitan03_configs`), flattened to
``"section.field"`` values, and compared field by field. Two derived values are compared as torchtitan resolves
them: ``derived.dp_shard`` (``ParallelDims``' shard degree, ``-1`` resolved from the world size) and
``derived.global_batch_size`` (the global batch, ``-1`` meaning local batch x replicate x shard). The raw
fields may change with the layout; the global batch never may.

A field may differ only when a knob the setting changed owns it, or when it is an output location the run
points into its trial directory (dump folder, checkpoint folder, TensorBoard, traces, memory snapshots); the
job file's path may differ (its content is what is compared: a derived copy holds what a command line
cannot say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...knobs.catalog import knobs_for
from ..equivalence import changed_knobs, differences, flatten, raise_if_different
from .spelling import SPELLING

OUTPUTS = frozenset({
    # 0.2.x
    "cfg.job.dump_folder", "cfg.job.save_config_file", "cfg.profiling.save_traces_folder",
    "cfg.profiling.save_memory_snapshot_folder", "cfg.metrics.save_tb_folder", "cfg.checkpoint.folder",
    "cfg.comm.save_traces_folder",
    # 0.3.x
    "cfg.dump_folder", "cfg.profiler.save_traces_folder", "cfg.profiler.save_memory_snapshot_folder",
    "cfg.debug.save_config_file",
    # the job file's path (its content is compared), wandb's folder
    "cfg.job.config_file", "env.WANDB_DIR",
})
_LAYOUT = ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "data_parallel_replicate")

# "section.field" (a key ending in "." owns every field under it) -> the knobs whose change may change it.
_FIELD_KNOBS: dict[str, tuple[str, ...]] = {
    "parallelism.tensor_parallel_degree": ("tensor_parallel",),
    "parallelism.pipeline_parallel_degree": ("pipeline_parallel",),
    "parallelism.context_parallel_degree": ("context_parallel",),
    "parallelism.expert_parallel_degree": ("expert_parallel",),
    "parallelism.data_parallel_shard_degree": _LAYOUT,
    "parallelism.data_parallel_replicate_degree": ("data_parallel_replicate", "data_parallel"),
    "parallelism.fsdp_reshard_after_forward": ("fsdp_reshard_after_forward",),
    "parallelism.enable_async_tensor_parallel": ("async_tp",),
    "parallelism.enable_sequence_parallel": ("sequence_parallel", "tensor_parallel"),  # inert at TP 1
    "compile.enable_async_tensor_parallel": ("async_tp",),
    "compile.enable": ("torch_compile",),
    "training.local_batch_size": ("micro_batch_size",),
    "training.global_batch_size": ("micro_batch_size", *_LAYOUT),  # raw; derived.global_batch_size is compared
    "training.enable_cpu_offload": ("cpu_offload",),
    "training.mixed_precision_param": ("bf16",),
    "training.disable_cuda_graphs": ("pipeline_parallel",),  # 0.3 refuses PP > 1 with CUDA graphs
    "activation_checkpoint.": ("recompute_granularity",),
    "activation_checkpoint": ("recompute_granularity",),
    "model.converters": ("fp8_recipe",),
    "quantize.linear.float8.": ("fp8_recipe",),
    "quantize.linear.mx.": ("fp8_recipe",),
}


def owners() -> dict[str, tuple[str, ...]]:
    own = {f"cfg.{k}": v for k, v in _FIELD_KNOBS.items()}
    own["derived.dp_shard"] = _LAYOUT
    for var, name in SPELLING.env_vars(knobs_for(SPELLING)).items():
        own[f"env.{var}"] = (name,)
    own["env.OMP_NUM_THREADS"] = ("intra_op_threads",)
    own["env.INFRARSI_PATCHES"] = ("kernel",)
    own["env.CONFIG_FILE"] = ("fp8_recipe",)  # run_train.sh's job file: a derived copy when converters empty
    return own


def _global_batch(flat: Mapping[str, Any]) -> Any:
    gbs = flat.get("cfg.training.global_batch_size")
    if isinstance(gbs, int) and gbs > 0:
        return gbs
    local, rep, shard = (flat.get(k) for k in ("cfg.training.local_batch_size",
                                               "cfg.parallelism.data_parallel_replicate_degree", "derived.dp_shard"))
    return local * rep * shard if all(isinstance(x, int) for x in (local, rep, shard)) else None


def reading_02(args: list[str] | None, env: Mapping[str, str], world: int | None) -> dict[str, Any]:
    """The 0.2.x reading of the arguments after ``-m torchtitan.train`` (``cfg.*``, ``derived.*``, ``env.*``)."""
    from ..base import FrameworkRejected
    from .check import torchtitan_config

    out: dict[str, Any] = {f"env.{k}": v for k, v in env.items()}
    if args is None:
        out["cfg"] = "(no job file)"
        return out
    try:
        cfg = torchtitan_config(args)
    except FrameworkRejected as e:
        out["cfg"] = str(e)
        return out
    out.update({f"cfg.{k}": v for k, v in flatten(cfg).items()})
    if world:
        from torchtitan.distributed import ParallelDims

        p = cfg.parallelism
        try:
            dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                                cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                                pp=p.pipeline_parallel_degree, ep=p.expert_parallel_degree,
                                etp=p.expert_tensor_parallel_degree, world_size=world)
            out["derived.dp_shard"] = dims.dp_shard
        except (AssertionError, ValueError) as e:
            out["derived.dp_shard"] = f"ParallelDims: {e}"
    out["derived.global_batch_size"] = _global_batch(out)
    return out


def reading_03(config: Mapping[str, Any] | None, refused: list[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The 0.3.x reading (from :func:`.check.torchtitan03_configs`) in the same shape."""
    out: dict[str, Any] = {f"env.{k}": v for k, v in env.items()}
    for k, v in (config or {}).items():
        out[k if k.startswith("derived.") else f"cfg.{k}"] = v
    if refused and config is None:
        out["cfg"] = refused[0]
    out["derived.global_batch_size"] = _global_batch(out)
    return out


def _args(parsed, argv: list[str], env: Mapping[str, str]) -> list[str] | None:
    from .check import torchtitan03_args, torchtitan_args

    return torchtitan_args(parsed, argv, env) if parsed.style == "toml" else torchtitan03_args(parsed, argv, env)


def original_argv(parsed) -> list[str]:
    """The user's launch as a command (a bare job file: the arguments that name it)."""
    if parsed.launch is None:
        return ["--job.config_file", parsed.toml_path or ""]
    return parsed.launch.argv()


def _readings(parsed, launches: list[tuple[list[str], Mapping[str, str]]],
              world: int | None) -> list[tuple[dict[str, Any], list[str]]]:
    """(the framework's reading, its refusals) of each (argv, env) of this launch's style; 0.3 in one
    subprocess. Empty readings where the framework is not installed (then nothing is compared)."""
    jobs = [(_args(parsed, list(a), e), dict(e)) for a, e in launches]
    if parsed.style == "toml":
        from .check import available

        if not available():
            return [({}, []) for _ in jobs]
        return [(reading_02(a, e, world), []) for a, e in jobs]
    from .check import torchtitan03_configs

    got = torchtitan03_configs([(a or [], world) for a, _ in jobs])
    if got is None:
        return [({}, []) for _ in jobs]
    return [(reading_03(g["config"], g["refused"], e), g["refused"]) for g, (_, e) in zip(got, jobs)]


def readings(parsed, launches: list[tuple[list[str], Mapping[str, str]]], world: int | None) -> list[dict[str, Any]]:
    """The framework's reading of each (argv, env) of this launch's style (see :func:`_readings`)."""
    return [r for r, _ in _readings(parsed, launches, world)]


def check_launch(parsed, argv: list[str], env: Mapping[str, str], setting: Mapping[str, Any], *, world: int | None,
                 before: Mapping[str, Any] | None = None) -> tuple[list[str], list[str], dict[str, Any]]:
    """(torchtitan 0.3's refusals of the emitted launch ([] for 0.2: :func:`.check.check_torchtitan` says those),
    the differences from the user's launch, the user's launch's reading for the next call): for 0.3 one
    subprocess answers both."""
    launches = [(argv, env)] if before is not None else [(original_argv(parsed), parsed.env), (argv, env)]
    got = _readings(parsed, launches, world)
    if before is None:
        before = got[0][0]
    after, refused = got[-1]
    changed = changed_knobs(parsed.setting, setting)
    if "INFRARSI_PATCHES" in env:
        changed.add("kernel")
    diffs = differences(before, after, changed=changed, owners=_owners_of(parsed), outputs=OUTPUTS) \
        if before and after else []
    return refused, diffs, dict(before)


def flag_knobs() -> dict[str, tuple[str, ...]]:
    """``--section.field`` (either spelling of the field) -> the knobs that field's value is."""
    out: dict[str, tuple[str, ...]] = {}
    for field, knobs in _FIELD_KNOBS.items():
        if field.endswith("."):
            continue
        sec, _, name = field.rpartition(".")
        for spelled in {field, f"{sec}.{name.replace('_', '-')}"}:
            out[f"--{spelled}"] = knobs
    return out


def _owners_of(parsed) -> dict[str, tuple[str, ...]]:
    """:func:`owners`, and the script variables that carry a knob's value (``export TP=2`` for
    ``--parallelism.tensor_parallel_degree $TP``): they follow their knob."""
    own = owners()
    for var, knobs in getattr(parsed, "knob_vars", {}).items():
        own.setdefault(f"env.{var}", knobs)
    return own


def compare(parsed, argv: list[str], env: Mapping[str, str], setting: Mapping[str, Any], *,
            world: int | None = None, before: Mapping[str, Any] | None = None) -> list[str]:
    """The differences between the user's launch (``parsed``) and the emitted one (``argv``, ``env``) that the
    knobs ``setting`` changed do not explain ([] when it computes the user's job, or when the framework is
    not installed). ``before``: the user's launch's reading, when it is at hand."""
    world = world or parsed.world_size
    changed = changed_knobs(parsed.setting, setting)
    if "INFRARSI_PATCHES" in env:
        changed.add("kernel")
    if before is None:
        before, after = readings(parsed, [(original_argv(parsed), parsed.env), (argv, env)], world)
    else:
        after = readings(parsed, [(argv, env)], world)[0]
    if not before or not after:
        return []
    return differences(before, after, changed=changed, owners=_owners_of(parsed), outputs=OUTPUTS)


def check_equivalent(parsed, argv: list[str], env: Mapping[str, str], setting: Mapping[str, Any], *,
                     world: int | None = None, before: Mapping[str, Any] | None = None) -> None:
    """:func:`compare`, raising :class:`~infrarsi.adapters.equivalence.NotEquivalent` on a difference."""
    raise_if_different(compare(parsed, argv, env, setting, world=world, before=before), "the emitted torchtitan launch")
