"""The pre-flight estimate for minigpt: the workload's own model and its own training step, faked.

The model is ``infrarsi.workloads.minigpt.build_model`` with the very argv the adapter launches, so every knob
that changes the model or its memory (micro-batch, recompute granularity/method/layers, attention backend, bf16
autocast, data parallel with or without DDP buckets, the AdamW implementation) acts here as it does in a trial.
The step mirrors ``minigpt.main``: zero grads, gradient accumulation over micro-batches, the flat gradient
all-reduce (or DDP's), grad-norm clipping, AdamW. Two iterations: the first creates the optimizer state, the
second is the one at which a real run peaks (state + accumulated grads + one micro-batch's activations); two
micro-batches of it stand for all of them, since the accumulated gradients are the same buffers from the second on.
The first iteration's forward is skipped: zero gradients and one optimizer step create the same state.

What it does not model: torch.compile (estimated eager) and kernel candidates (the reference ops run instead;
they compute the same tensors).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ..contract.model import Contract
from ..fakestep.overhead import unseen_bytes
from ..fakestep.result import Estimate, EstimateError
from ..fakestep.track import Device, Hooks, fake_world, tracked_step

if TYPE_CHECKING:
    from ..adapters.minigpt import MiniGPTAdapter

MODULE = "infrarsi.workloads.minigpt"


def workload_args(contract: Contract, setting: Mapping[str, Any], *,
                  adapter: MiniGPTAdapter) -> tuple[argparse.Namespace, int]:
    """The argparse namespace a trial of ``setting`` runs with, and its process count (from the adapter's argv)."""
    from ..workloads.minigpt import build_parser

    spec = adapter.launch(contract, setting)
    argv = list(spec.argv)
    if MODULE not in argv:
        raise EstimateError(f"minigpt launch does not run {MODULE}: {' '.join(argv[:6])} ...")
    args = build_parser().parse_args(argv[argv.index(MODULE) + 1:])
    args.kernel = []  # kernel candidates compute the reference's tensors; the reference runs under fake tensors
    return args, int(spec.processes)


def estimate(contract: Contract, setting: Mapping[str, Any], *, adapter: MiniGPTAdapter, device: Device | None = None,
             unseen_gib: float | None = None) -> Estimate:
    """Per-rank peak of one minigpt trial of ``setting`` (completed against ``adapter``'s space)."""
    full = adapter.knob_space(contract).complete(dict(setting))
    args, world = workload_args(contract, full, adapter=adapter)
    per_rank = args.micro_batch_size * world
    if args.global_batch_size % per_rank:
        raise EstimateError(f"global batch {args.global_batch_size} is not divisible by micro batch "
                            f"{args.micro_batch_size} x data parallel {world} = {per_rank}; pick a micro_batch_size "
                            f"that divides {args.global_batch_size // world}")
    n_micro = args.global_batch_size // per_rank
    overlap = bool(args.overlap_grad_reduce and world > 1)

    def meta():
        import torch

        from ..workloads.minigpt import build_model

        with torch.device("meta"):
            return build_model(args, {})

    def build(model):
        import torch

        model.to_empty(device="cpu")
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95),
                                fused=args.adam_impl == "fused", foreach=args.adam_impl == "foreach")
        return model, opt

    def step(model, opt, hooks: Hooks) -> None:
        import torch

        from ..workloads.minigpt import all_reduce_grads

        fwd = model
        if overlap:
            from torch.nn.parallel import DistributedDataParallel as DDP

            fwd = DDP(model, init_sync=False)
        amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16 else nullcontext
        # warm-up: AdamW creates its state at the first step; zero gradients get it there without a forward
        for p_ in model.parameters():
            p_.grad = torch.zeros_like(p_)
        opt.step()
        micro = min(n_micro, 2)
        with hooks.priced():
            opt.zero_grad(set_to_none=True)
            loss_sum = torch.zeros(())
            for m in range(micro):
                hooks.reset()
                data = torch.empty((args.micro_batch_size, args.seq_length + 1), dtype=torch.long)
                sync = nullcontext() if (m == micro - 1 or not hasattr(fwd, "no_sync")) else fwd.no_sync()
                with sync:
                    with amp():
                        loss = fwd(data[:, :-1], data[:, 1:]) / n_micro
                    loss.backward()
                loss_sum += loss.detach()
            if world > 1 and not overlap:  # the blocking path: one flat all-reduce of every gradient
                all_reduce_grads(model, world)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            opt.step()

    with fake_world(world):
        tr = tracked_step(meta, build, step, device=device)
    # the priced step covers 2 of n_micro micro-batches (1 when n_micro = 1): scale its compute to the whole step
    step_s = None if tr.step_time_s is None else tr.step_time_s * n_micro / min(n_micro, 2)
    transient = tr.tracked.get("Activation", 0) + tr.tracked.get("Temp", 0)
    unseen, source = unseen_bytes(contract, threads=args.intra_op_threads, bf16=bool(args.bf16),
                                  transient_bytes=transient, override_gib=unseen_gib)
    notes = ["torch.compile estimated eager"] if args.torch_compile else []
    layout = {"data_parallel": world, "ddp_buckets": overlap, "micro_batch_size": args.micro_batch_size,
              "grad_accumulation": n_micro, "recompute": args.recompute_granularity or "none",
              "attention": args.attention_backend, "dtype": "bf16 autocast" if args.bf16 else "fp32",
              "adam": args.adam_impl}
    return Estimate(framework="minigpt", world_size=world, layout=layout, tracked=tr.tracked, unseen_bytes=unseen,
                    unseen_source=source, step_time_s=step_s,
                    step_time_note="" if device else "no device peaks known: no roofline time",
                    wall_s=tr.wall_s, notes=tuple(notes))
