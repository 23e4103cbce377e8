"""One fake training step of a Megatron job's model, as ranks of its world, in a process of its own.

    python -m infrarsi.adapters.megatron.estimate.step < job.json > result.json

The job is ``{"argv": [...pretrain_gpt.py arguments...], "world": N, "ranks": "auto" | [r, ...]}`` (and
``"all_micro_batches": true`` to run every micro-batch instead of the cap below). For each
rank this process becomes that rank of a ``fake`` process group of N ranks (every collective returns at once
with the right shapes; a p2p receive gives an empty tensor of the announced shape), builds the model exactly as
the CPU training loop does (:mod:`infrarsi.adapters.megatron.cpu.model`: megatron-core's process groups,
TransformerConfig, local layer spec, GPTModel chunks per virtual stage, Float16Module, DDP, optimizer) inside
``FakeTensorMode`` (tensors have shapes and dtypes, no data), and runs Megatron-LM's ``train_step`` once:
zero the grad buffers, ``get_forward_backward_func()`` over the micro-batches, ``optimizer.step()``. An
optimizer step with zero gradients runs first, creating Adam's state, so the priced step is a steady one.
:class:`~.fake.StorageTracker` counts storages by category and keeps the peak; :class:`~.fake.
Shadows` gives MoE dispatch its sizes under balanced routing.

Micro-batches: the schedule runs ``min(M, cap)`` of the M micro-batches per iteration, where ``cap`` is 2
without pipelining, PP + 1 with the 1F1B schedule and 2 x PP with the interleaved one: the schedule then has
reached its steady state, holding as many micro-batches in flight as it ever will (PP - rank on a 1F1B rank;
the interleaved warm-up of 2 (PP - rank - 1) + (VP - 1) PP chunk passes); more micro-batches repeat the same
pattern with the same buffers (the test suite checks this against the full count).

"auto" ranks: the first pipeline stage (rank 0: embedding, the most micro-batches in flight), the last (the
output layer and the loss's logits) and, for MoE, the stage with the most MoE layers (the most experts: every
expert-parallel rank holds num_experts / EP experts per MoE layer); tensor, context and data rank 0 of each.

The shims of :mod:`infrarsi.adapters.megatron.cpu.shims` are installed: fake tensors here are CPU tensors, so the
step runs the code path the CPU training loop runs. One more is needed under fake tensors: ``Module._apply``
(``Float16Module``'s ``.bfloat16()``, ``.cuda()``) swaps a fake parameter for its converted copy with
``torch.utils.swap_tensors``, which swaps the two objects' ``__dict__`` too (megatron-core's attributes on its
parameters, ``allreduce``, ``tensor_model_parallel``, ``sequence_parallel``, ... were lost: expert parameters
then landed in the dense gradient buffer) and refuses tensors with weak references (FakeTensorMode keeps one to
many of them). For a fake tensor the converted copy is set as its data instead, what ``_apply`` does for real
parameters: the parameter object and its attributes stay. And
collectives of Python objects (``all_gather_object``, which megatron-core's optimizer uses to check that every
rank has the same parameter groups) give every rank this rank's object: the fake group carries no data, and
the ranks estimated are symmetric in what they exchange that way. megatron-core's local gradient norm without
apex/TE (``local_multi_tensor_l2_norm``) builds a tensor from a Python list of per-tensor norms, which needs
their values; the same norm of the stacked norms is used instead (a handful of scalars either way). DDP's
bucket collectives run under ``torch.distributed._coalescing_manager``, whose batched ops
(``allreduce_coalesced_``, ``reduce_scatter_tensor_coalesced_``) have no fake kernel; they run one by one (the
same in-place collectives on the same bucket buffers). FakeTensorMode's dispatch cache keys an op on its
arguments, and a process group cannot be compared (``__eq__`` is not implemented for it): collectives bypass it.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from contextlib import contextmanager
from typing import Any


def _set_data_where_swap_refused() -> None:
    """See the module doc: set_data instead of swap_tensors for fake tensors (and the other fake-world fixes)."""
    import torch

    swap = torch.utils.swap_tensors
    if getattr(swap, "infrarsi", False):
        return

    from torch._subclasses.fake_tensor import FakeTensor

    def swap_or_set(t1, t2):
        if isinstance(t1, FakeTensor) and isinstance(t2, torch.Tensor):
            t1.data = t2.data
            return None
        return swap(t1, t2)

    swap_or_set.infrarsi = True
    torch.utils.swap_tensors = swap_or_set

    import copy

    import torch.distributed as dist

    def all_gather_object(object_list, obj, group=None):
        for i in range(len(object_list)):
            object_list[i] = copy.deepcopy(obj)

    dist.all_gather_object = all_gather_object

    import megatron.core.optimizer.clip_grads as clip_grads

    def l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
        norms = [torch.norm(t) for tl in tensor_lists for t in tl]
        total = torch.norm(torch.stack(norms)) if norms else torch.zeros(())
        return total.float().reshape(1), None

    clip_grads.l2_norm_impl = l2_norm

    import contextlib

    import megatron.core.distributed.param_and_grad_buffer as pgb

    class _OneByOne:
        def wait(self):
            pass

    @contextlib.contextmanager
    def one_by_one(group=None, device=None, async_ops=False):
        yield _OneByOne()

    pgb._coalescing_manager = one_by_one

    from torch._subclasses.fake_tensor import FakeTensorMode, _BypassDispatchCache

    validate = FakeTensorMode._validate_cache_key

    def validate_cache_key(self, func, args, kwargs):
        if getattr(func, "namespace", "") in ("c10d", "_c10d_functional"):
            raise _BypassDispatchCache("a process group argument")
        return validate(self, func, args, kwargs)

    FakeTensorMode._validate_cache_key = validate_cache_key


def say(text: str) -> None:
    """A progress line for the parent (``infrarsi estimate`` shows it while the step runs)."""
    sys.stderr.write(f"progress: {text}\n")
    sys.stderr.flush()


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("megatron").setLevel(logging.ERROR)


@contextmanager
def fake_rank(world: int, rank: int):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        from megatron.core import parallel_state as ps
        from megatron.core.num_microbatches_calculator import destroy_num_microbatches_calculator
        from megatron.core.transformer.moe.moe_utils import clear_aux_losses_tracker

        clear_aux_losses_tracker()
        destroy_num_microbatches_calculator()
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def process_groups() -> int:
    """How many process groups this rank is a member of (the default group included): on the CPU each gloo group
    holds its own threads, whose stacks count in the process's data segment."""
    from torch.distributed.distributed_c10d import _world

    return len(_world.pg_map)


def micro_cap(args) -> int:
    pp = args.pipeline_model_parallel_size
    if pp == 1:
        return 2
    return 2 * pp if args.virtual_pipeline_model_parallel_size else pp + 1


def stage_layers(args, config) -> list[dict[str, int]]:
    """Per pipeline rank: its transformer layers and MoE layers (over its virtual stages)."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    pattern = args.moe_layer_pattern or [0] * args.num_layers
    vp = args.virtual_pipeline_model_parallel_size
    out = []
    for pp_rank in range(args.pipeline_model_parallel_size):
        layers = moe = 0
        for stage in (range(vp) if vp else [None]):
            off = get_transformer_layer_offset(config, vp_stage=stage, pp_rank=pp_rank)
            n = get_num_layers_to_build(config, vp_stage=stage, pp_rank=pp_rank)
            layers += n
            moe += sum(pattern[off:off + n])
        out.append({"layers": layers, "moe_layers": moe})
    return out


def auto_ranks(args, world: int, stages: list[dict[str, int]]) -> dict[int, list[str]]:
    """rank -> why it is estimated (see the module doc)."""
    pp = args.pipeline_model_parallel_size
    per_stage = world // pp
    why: dict[int, list[str]] = {0: ["first pipeline stage"]}
    why.setdefault((pp - 1) * per_stage, []).append("last pipeline stage")
    if args.num_experts:
        most = max(range(pp), key=lambda r: (stages[r]["moe_layers"], -r))
        why.setdefault(most * per_stage, []).append("most experts")
    return why


def one_rank(args, world: int, rank: int, *, all_micro_batches: bool = False) -> dict[str, Any]:
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, model_parallel_cuda_manual_seed
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ..cpu.model import (initialize_parallel, model_chunks, num_microbatches, transformer_config,
                                            wrap)
    from .fake import Shadows, StorageTracker

    t0 = time.perf_counter()
    say(f"rank {rank} of {world}: building megatron-core's model, DDP and optimizer (fake tensors)")
    with fake_rank(world, rank):
        initialize_parallel(args)
        groups = process_groups()
        dp = ps.get_data_parallel_world_size()
        n_micro = num_microbatches(args, dp)
        n_sim = n_micro if all_micro_batches else min(n_micro, micro_cap(args))
        init_num_microbatches_calculator(rank, None, args.micro_batch_size * dp * n_sim, args.micro_batch_size, dp)
        get_cuda_rng_tracker().reset()
        model_parallel_cuda_manual_seed(args.seed)
        config = transformer_config(args, initialize=False)
        stages = stage_layers(args, config)
        with FakeTensorMode(allow_non_fake_inputs=True), Shadows():
            chunks = model_chunks(args, config)
            ddp, opt = wrap(args, config, chunks)
            for m in ddp:
                m.train()
            opt.step()  # zero gradients: Adam's state exists before the priced step, as in any step after the first
            tracker = StorageTracker()
            params = [p for m in ddp for p in m.parameters()]
            tracker.register("Parameter", params)
            tracker.register("Parameter", [b for m in ddp for b in torch.nn.Module.buffers(m)])
            grad_buffers = _ddp_buffers(ddp)
            tracker.register("Gradient", [b.grad_data for b in grad_buffers])
            tracker.register("Parameter", [b.param_data for b in grad_buffers if b.param_data is not None])
            tracker.register("Optstate", _optimizer_tensors(opt))
            state_bytes = dict(tracker.current)
            say(f"rank {rank}: stepping {n_sim} of {n_micro} micro-batches and the optimizer "
                f"({time.perf_counter() - t0:.0f} s so far)")
            fwd_bwd = get_forward_backward_func()
            with tracker:
                for m in ddp:
                    m.zero_grad_buffer()
                opt.zero_grad()
                iters = [_batches(args, n_sim) for _ in ddp]
                fwd_bwd(forward_step_func=_forward_step, data_iterator=iters if len(iters) > 1 else iters[0],
                        model=ddp if len(ddp) > 1 else ddp[0], num_microbatches=n_sim, seq_length=args.seq_length,
                        micro_batch_size=args.micro_batch_size, forward_only=False)
                tracker.phase = "Temp"
                opt.step()
                tracker.phase = None
        pp_rank = ps.get_pipeline_model_parallel_rank()
        local_params = sum(p.numel() for p in params)
        experts = 0
        if args.num_experts:
            experts = stages[pp_rank]["moe_layers"] * (args.num_experts // args.expert_model_parallel_size)
        out = {"rank": rank, "pp_rank": pp_rank, "peak": tracker.peak_snapshot, "state": state_bytes,
               "micro_batches": n_micro, "micro_batches_run": n_sim, "params": int(local_params),
               "layers": stages[pp_rank]["layers"], "moe_layers": stages[pp_rank]["moe_layers"],
               "local_experts": experts, "data_parallel": dp, "stages": stages, "process_groups": groups,
               "heap": tracker.heap_peaks(),
               "wall_s": round(time.perf_counter() - t0, 2)}
        del chunks, ddp, opt, tracker, params, grad_buffers
    say(f"rank {rank}: done in {out['wall_s']:.0f} s")
    return out


_MODULE_KINDS = (  # parameter name -> module kind, first match (megatron-core's GPTModel names)
    ("embedding.", "embedding"), ("output_layer.", "output_layer"), (".router.", "router"),
    (".shared_experts.", "shared_experts"), (".experts.", "experts"), (".self_attention.", "attention"),
    (".mlp.", "mlp"), ("", "norms"),
)


def module_params(args, world: int = 1) -> dict[str, int]:
    """This model's parameters by module kind (embedding, attention, mlp, router, experts, shared experts,
    output layer, norms) on rank 0 of ``world``: megatron-core's GPTModel chunks built under FakeTensorMode (shapes
    only, no memory), as the estimate and the CPU loop build them."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, model_parallel_cuda_manual_seed
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ..cpu.model import initialize_parallel, model_chunks, transformer_config

    out = {kind: 0 for _, kind in _MODULE_KINDS}
    with fake_rank(world, 0):
        initialize_parallel(args)
        get_cuda_rng_tracker().reset()
        model_parallel_cuda_manual_seed(args.seed)
        config = transformer_config(args, initialize=False)
        with FakeTensorMode(allow_non_fake_inputs=True):
            for chunk in model_chunks(args, config):
                for name, p in chunk.named_parameters():
                    kind = next(k for pat, k in _MODULE_KINDS if pat in f".{name}")
                    out[kind] += p.numel()
    return out


def _ddp_buffers(ddp: list) -> list:
    """megatron-core DDP's param-and-grad buffers (its instance attribute ``buffers`` shadows Module.buffers)."""
    return [b for m in ddp for b in (*m.__dict__.get("buffers", []), *m.__dict__.get("expert_parallel_buffers", []))]


def _optimizer_tensors(opt) -> list:
    import torch

    out = []
    for o in getattr(opt, "chained_optimizers", [opt]):
        inner = getattr(o, "optimizer", None)
        if inner is None:
            continue
        for group in inner.param_groups:
            out.extend(group["params"])
        for st in inner.state.values():
            out.extend(v for v in st.values() if isinstance(v, torch.Tensor))
    return out


def _batches(args, n: int):
    import torch

    for _ in range(n):
        tokens = torch.zeros((args.micro_batch_size, args.seq_length), dtype=torch.long)
        pos = torch.arange(args.seq_length).unsqueeze(0).expand(args.micro_batch_size, -1)
        yield tokens, tokens.clone(), torch.ones(args.micro_batch_size, args.seq_length), pos


def _forward_step(data_iterator, model):
    from ..cpu.gpt import forward_step

    return forward_step(data_iterator, model)


def prepare() -> None:
    """The imports and shims every job needs (the slow part of a start: done before the job is read, so that a
    parent can start this process while it still reads the launch)."""
    _quiet()
    from ..cpu.shims import install_cpu_fixes
    from ..cpu.model import eager_fusions

    install_cpu_fixes()
    eager_fusions()
    _set_data_where_swap_refused()


def other_ranks(args, world: int) -> dict[int, list[str]]:
    """The "auto" ranks (:func:`auto_ranks`) from the model config alone, no step run."""
    from ..cpu.model import initialize_parallel, transformer_config

    with fake_rank(world, 0):
        initialize_parallel(args)
        return auto_ranks(args, world, stage_layers(args, transformer_config(args, initialize=False)))


def run(job: dict[str, Any]) -> dict[str, Any]:
    """The job's result. ``"ranks"``: a list, ``"auto"`` (rank 0, then the others :func:`auto_ranks` names),
    or its two halves for two processes side by side: ``"auto-first"`` (rank 0) and ``"auto-others"``."""
    from ..cpu.model import MegatronArgsError, parse

    prepare()
    try:
        parsed = parse(list(job["argv"]), strict=False)
    except MegatronArgsError as e:
        return {"error": str(e)}
    args, world = parsed.args, int(job["world"])
    inner = args.tensor_model_parallel_size * args.pipeline_model_parallel_size * args.context_parallel_size
    if world % inner:
        return {"error": f"world size {world} is not divisible by TP {args.tensor_model_parallel_size} x PP "
                         f"{args.pipeline_model_parallel_size} x CP {args.context_parallel_size} = {inner}"}
    if job.get("params_only"):
        return {"params": module_params(args, world)}
    ranks = job.get("ranks", "auto")
    full = bool(job.get("all_micro_batches"))  # every micro-batch of the step, not the capped count (tests)
    results, why = [], {}
    if ranks in ("auto-first", "auto-others"):
        why = other_ranks(args, world)
        ranks = [0] if ranks == "auto-first" else [r for r in why if r != 0]
    elif ranks == "auto":
        first = one_rank(args, world, 0, all_micro_batches=full)
        results.append(first)
        why = auto_ranks(args, world, first["stages"])
        ranks = [r for r in why if r != 0]
        if ranks:
            say(f"{len(ranks)} more rank(s) to step: " + "; ".join(f"{r} ({', '.join(why[r])})" for r in ranks))
    for r in ranks:
        results.append(one_rank(args, world, int(r), all_micro_batches=full))
    for res in results:
        res["why"] = why.get(res["rank"], [])
    return {"ranks": results, "unknown_flags": list(parsed.unknown), "vocab": args.vocab_source,
            "padded_vocab": args.padded_vocab_size}


def main() -> int:
    try:
        prepare()
        job = json.load(sys.stdin)
        out = run(job)
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        import traceback

        tb = traceback.extract_tb(e.__traceback__)
        where = next((f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(tb)
                      if "megatron/core" in f.filename), "")
        if "INFRARSI_DEBUG" in __import__("os").environ:
            traceback.print_exc()
        out = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}" + (f" (at {where})" if where else "")}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
