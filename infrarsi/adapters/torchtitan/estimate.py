"""The pre-flight estimate for torchtitan (0.2.x): torchtitan's own model, config and parallelize code, faked.

For a contract's job and a setting, the job's command line is emitted exactly as a trial's (the adapter's
``emit_torchtitan``), parsed by torchtitan's own ``ConfigManager`` into its ``JobConfig``, and then the steps of
``torchtitan.train.Trainer.__init__`` and ``train_step`` run on rank 0 of a fake process group of the world size:

- the model class and flavour args of the train spec (``llama3_args["8B"]``, ``update_from_config``), built on
  the meta device under the job's ``training.dtype``;
- ``ParallelDims`` from ``[parallelism]`` and its device mesh; the train spec's ``parallelize_fn``
  (``parallelize_llama``: TP + loss parallel, activation checkpointing none/selective/full, FSDP2 with the
  mixed-precision param/reduce dtypes and reshard policy, HSDP, or DDP);
- ``to_empty`` inside ``FakeTensorMode``, the train spec's optimizers (``build_optimizers``), its loss;
- two steps (the first creates the optimizer state) of: gradient accumulation over micro-batches,
  ``clip_grad_norm_``, optimizer step; under ``FSDPMemTracker`` when FSDP-sharded, else ``MemTracker``.

torchtitan picks its device type at import (``tools/utils.py``: the available accelerator, else "cuda"); with no
GPU here the mesh is built on "cpu", which changes no shape. Not estimated: pipeline parallelism (the schedule
runs stages on other ranks; say so rather than guess), torch.compile (estimated eager), float8 converters.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ...fakestep.overhead import MiB, unseen_bytes
from ...fakestep.result import Estimate, EstimateError
from ...fakestep.track import Device, Hooks, fake_world, tracked_step

if TYPE_CHECKING:
    from ...contract.model import Contract
    from .adapter import TorchtitanAdapter

TRAIN_MODULE = "torchtitan.train"

# A rank of torchtitan.train on the CPU (torchtitan 0.2.2, 2 ranks on gloo, its tokenizer and dataloader, 1 thread,
# bf16 parameters), by scripts/bench_estimate.py --calibrate-torchtitan: the process's base and the allocator's
# fragmentation per byte of the tracked categories it follows. Temporaries only (the logits-sized buffers of the
# loss, 64 MiB at local batch 8, seq 512, vocab 2048). Its unseen bytes follow the local batch (1572, 1583, 1606,
# 1597-1648 MiB at local batch 1/seq 32, 2, 4, 8) but not the activations AC keeps (AC none keeps 230 MiB more than
# selective and has 15 MiB less unseen): fitted per byte of activations + temporaries (0.144) instead, AC none came
# out 2.5% high against the baseline.
RANK_BASE = 1570.8 * MiB
RANK_FRAGMENTATION = 0.858
FRAGMENTING = ("Temp",)
MEASURED_BY = "scripts/bench_estimate.py --calibrate-torchtitan (torchtitan 0.2.2, torch 2.13.0 CPU, 2 cores)"


def cpu_rank(transient_bytes: float) -> tuple[float, str]:
    """(bytes, where they come from) no tracker sees in a torchtitan.train rank on the CPU."""
    base, f = RANK_BASE, RANK_FRAGMENTATION
    return base + f * transient_bytes, (
        f"measured: a torchtitan.train rank (2 ranks on gloo, 1 thread, bf16; other thread counts and fp32 not "
        f"measured) {base / MiB:.0f} MiB + allocator {f:.2f} x {transient_bytes / MiB:.0f} MiB transient "
        f"({MEASURED_BY})")


def _require():
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        raise EstimateError("torchtitan is not installed; install the extra: pip install -e '.[torchtitan]' "
                            "(torchtitan==0.2.2)") from None


def job_args(contract: Contract, setting: Mapping[str, Any], *, adapter: TorchtitanAdapter) -> list[str]:
    """The torchtitan arguments a trial of ``setting`` runs with (after ``-m torchtitan.train``), as ``adapter``
    launches it."""
    ad = adapter
    parsed = ad.parsed(contract)
    if parsed.style != "toml":
        raise EstimateError("the estimate runs torchtitan 0.2.x (a TOML job file); this launch is in the 0.3 "
                            "command-line style, whose model code cannot train on this torch")
    argv = list(ad.trial_form(contract, ad.launch(contract, setting), setting).argv)  # as a trial runs it
    if TRAIN_MODULE in argv:
        return argv[argv.index(TRAIN_MODULE) + 1:]
    if "--job.config_file" in argv:
        return argv[argv.index("--job.config_file"):]
    raise EstimateError(f"cannot find torchtitan's arguments in the launch: {' '.join(argv[:8])} ...")


def job_config(args: list[str]):
    _require()
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(list(args))


def estimate(contract: Contract, setting: Mapping[str, Any], *, adapter: TorchtitanAdapter,
             device: Device | None = None, unseen_gib: float | None = None) -> Estimate:
    cfg = job_config(job_args(contract, setting, adapter=adapter))
    e = estimate_job(cfg, world_size=int(contract.hardware.devices), device=device)
    transient = sum(e.tracked.get(c, 0) for c in FRAGMENTING)
    unseen, source = unseen_bytes(contract, threads=None, bf16=cfg.training.mixed_precision_param == "bfloat16",
                                  transient_bytes=transient, override_gib=unseen_gib,
                                  rank=lambda: cpu_rank(transient))
    return dataclasses.replace(e, unseen_bytes=unseen, unseen_source=source)


def estimate_job(cfg: Any, *, world_size: int, device: Device | None = None,
                 unseen: tuple[float, str] = (0.0, "none added")) -> Estimate:
    """Per-rank peak of one step of torchtitan ``JobConfig`` ``cfg`` on ``world_size`` ranks."""
    _require()
    import torch
    import torchtitan.distributed.parallel_dims as tt_parallel_dims
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.protocols.train_spec import get_train_spec
    from torchtitan.tools import utils as tt_utils

    logging.getLogger("torchtitan").setLevel(logging.WARNING)  # its info lines per module would flood the output
    p, t = cfg.parallelism, cfg.training
    if p.pipeline_parallel_degree > 1:
        raise EstimateError(f"parallelism.pipeline_parallel_degree = {p.pipeline_parallel_degree}: pipeline stages "
                            "are not estimated; estimate with pipeline_parallel_degree = 1")
    if cfg.model.converters:
        raise EstimateError(f"model.converters = {cfg.model.converters}: float8/quantized converters are not "
                            "estimated; drop them for the estimate")
    try:
        dims = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                            cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=1,
                            ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world_size)
    except AssertionError as e:
        raise EstimateError(f"parallel degrees do not fit {world_size} ranks: {e}") from None
    spec = get_train_spec(cfg.model.name)
    if cfg.model.flavor not in spec.model_args:
        raise EstimateError(f"model.flavor = {cfg.model.flavor!r} is not a {cfg.model.name} flavour; "
                            f"known: {sorted(spec.model_args)}")
    margs = copy.deepcopy(spec.model_args[cfg.model.flavor])  # update_from_config mutates torchtitan's table
    margs.update_from_config(cfg)
    batch = (dims.dp_replicate * dims.dp_shard) if dims.dp_enabled else 1
    gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * batch
    if gbs % (t.local_batch_size * batch):
        raise EstimateError(f"training.global_batch_size {gbs} is not a multiple of local batch "
                            f"{t.local_batch_size} x data parallel {batch}; pick a local_batch_size that divides "
                            f"{gbs // batch}")
    accum = gbs // (t.local_batch_size * batch)
    state: dict[str, Any] = {}
    # Multi-tensor (foreach/fused) Adam over DTensor shards inflates under fake tensors: DTensor's sharding
    # propagation of a whole parameter list materializes global-shape fake tensors that the tracker counts (34x
    # the state on 8 ranks). The step runs per parameter ("for-loop") instead, and the foreach implementation's
    # own temporaries (torch's _multi_tensor_adam: one fp32 copy of the local state, exp_avg_sq_sqrt) are added
    # at the optimizer-step moment; fused Adam has none.
    impl = cfg.optimizer.implementation
    dtensor = dims.fsdp_enabled or dims.tp_enabled or dims.cp_enabled
    if dtensor and impl != "for-loop":
        cfg.optimizer.implementation = "for-loop"

    def meta():
        # torchtitan chose "cuda" at import when no GPU is visible; the mesh's device type changes no shape
        tt_parallel_dims.device_type = "cpu"
        state["mesh"] = dims.build_mesh()
        with torch.device("meta"), tt_utils.set_default_dtype(TORCH_DTYPE_MAP[t.dtype]):
            model = spec.model_cls(margs)
        return spec.parallelize_fn(model, dims, cfg)

    def build(model):
        model.to_empty(device="cpu")
        model.train()
        opts = spec.build_optimizers_fn([model], cfg.optimizer, dims)
        state["loss_fn"] = spec.build_loss_fn(cfg, parallel_dims=dims)
        state["opts"] = opts
        return model, opts.optimizers[0]

    def step(model, opt, hooks: Hooks) -> None:
        opts, loss_fn = state["opts"], state["loss_fn"]
        amp = dist_utils.maybe_enable_amp(dims, t.mixed_precision_param, "cpu")
        loss_parallel = dims.tp_enabled and not p.disable_loss_parallel
        train_context = dist_utils.get_train_context(loss_parallel)
        for it, micro in ((1, 1), (2, min(accum, 2))):
            with hooks.priced() if it == 2 else nullcontext():
                opts.zero_grad()
                for _ in range(micro):
                    hooks.reset()
                    inputs = torch.empty((t.local_batch_size, t.seq_len), dtype=torch.long)
                    labels = torch.empty((t.local_batch_size, t.seq_len), dtype=torch.long)
                    with train_context(), amp:
                        pred = model(inputs)
                        loss = loss_fn(pred, labels) / float(gbs * t.seq_len)
                        del pred
                    with train_context():
                        loss.backward()
                dist_utils.clip_grad_norm_(list(model.parameters()), t.max_norm, foreach=not dtensor)
                if dtensor and impl == "foreach":
                    local = sum(_local(p_).numel() * 4 for p_ in model.parameters())
                    hooks.peak_with({"Temp": local})
                opts.step()

    with fake_world(world_size):
        tr = tracked_step(meta, build, step, device=device)
    step_s = None if tr.step_time_s is None else tr.step_time_s * accum / min(accum, 2)
    ac = cfg.activation_checkpoint.mode
    layout = {"world": world_size, "dp_shard": dims.dp_shard, "dp_replicate": dims.dp_replicate, "tp": dims.tp,
              "cp": dims.cp, "fsdp": dims.fsdp_enabled, "ac": ac if ac != "selective" else
              f"selective ({cfg.activation_checkpoint.selective_ac_option})", "local_batch": t.local_batch_size,
              "seq_len": t.seq_len, "grad_accumulation": accum, "param_dtype": t.mixed_precision_param,
              "reduce_dtype": t.mixed_precision_reduce, "model": f"{cfg.model.name} {cfg.model.flavor}"}
    cfg.optimizer.implementation = impl
    notes = ["torch.compile estimated eager"] if cfg.compile.enable else []
    return Estimate(framework="torchtitan", world_size=world_size, layout=layout, tracked=tr.tracked,
                    unseen_bytes=unseen[0], unseen_source=unseen[1], step_time_s=step_s,
                    step_time_note="" if device else "no device peaks known: no roofline time", wall_s=tr.wall_s,
                    notes=tuple(notes))


def _local(p: Any) -> Any:
    """A parameter's local shard (DTensor) or itself."""
    return p.to_local() if hasattr(p, "to_local") else p
