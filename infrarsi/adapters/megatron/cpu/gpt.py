"""A training loop over megatron-core's GPTModel, as Megatron-LM's ``pretrain_gpt.py`` runs it, for real.

    torchrun --nproc-per-node 2 launchers/pretrain_gpt_cpu.py --num-layers 4 --hidden-size 256 \\
        --num-attention-heads 8 --seq-length 256 --vocab-size 512 --global-batch-size 8 --micro-batch-size 2 \\
        --tensor-model-parallel-size 2 --sequence-parallel --train-iters 3

It is started by ``launchers/pretrain_gpt_cpu.py`` (which, on a machine without a GPU, first installs the CPU
shims that megatron-core needs). The model, its config, DDP and optimizer are built by
:mod:`.model` from the command line, with Megatron-LM's flag names and defaults; each iteration is
Megatron-LM's ``train_step``: zero the grad buffers, ``get_forward_backward_func()`` over the micro-batches
(no pipelining, 1F1B, or the interleaved schedule with virtual stages; tensor, sequence, pipeline, expert and
data parallelism, the distributed optimizer, selective or full recompute, MoE with the allgather or alltoall
token dispatcher), then ``optimizer.step()``.

Initialisation: megatron-core draws each tensor-parallel shard from a stream of its own and each pipeline stage
builds only its layers, so the initial weights depend on the layout, and so would the loss trace the contract's
referee compares. With Megatron-LM's ``--use-cpu-initialization`` the full weights are drawn on the CPU and split
(no dependence on TP); the loop then also draws each transformer layer after seeding the generator with the seed and
the layer's global number (no dependence on PP or virtual stages: the embedding is drawn first and the output layer
right after the last layer, as with one stage). Expert weights still depend on EP (a rank draws only its experts).

Data: the embedded workload's learnable token stream (:func:`infrarsi.workloads.minigpt.batch_for`): the
global batch of an iteration is the same samples whatever the layout; a data-parallel rank takes its slice.

It prints Megatron-LM's log lines, which :mod:`infrarsi.adapters.megatron.log` reads: one iteration line per
iteration (from the rank Megatron prints from: the last pipeline stage, first tensor and data rank) and, on every
rank, a memory line whose "max reserved" is the process's peak data segment on the CPU (what RLIMIT_DATA, the
memory cap of a CPU trial, limits) or the CUDA caching allocator's peak on a GPU.

Not on the CPU: context parallelism (megatron-core's attention for it is Transformer Engine's; the local
``DotProductAttention`` asserts CP = 1), fp8 (TE), ``--moe-grouped-gemm`` (TE or the grouped_gemm package).
Each is refused with a one-line error.
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import time

from ....procmem import peak_data_bytes, peak_rss_bytes, status_kib

MB = 2**20


class Refused(SystemExit):
    pass


def _refuse(args) -> str | None:
    """Why this command line cannot train here, or None."""
    import torch

    if torch.cuda.is_available():
        return None
    return cpu_refusal(args)


def cpu_refusal(args) -> str | None:
    """Why this command line cannot train on the CPU (gloo, no Transformer Engine), or None. The estimate of a CPU
    contract and the adapter's launch of a CPU trial refuse the same settings up front."""
    if args.context_parallel_size > 1:
        return ("--context-parallel-size > 1 needs Transformer Engine's attention (megatron-core's local "
                "DotProductAttention asserts context_parallel_size == 1); it cannot train on the CPU")
    if args.fp8_format or args.fp8_recipe:
        return "--fp8-format needs Transformer Engine and an fp8 GPU; drop it to train on the CPU"
    if args.moe_grouped_gemm:
        return "--moe-grouped-gemm needs Transformer Engine or the grouped_gemm package; drop it on the CPU"
    etp = args.expert_tensor_parallel_size or args.tensor_model_parallel_size  # megatron-core: expert TP = TP
    if args.num_experts and args.moe_token_dispatcher_type == "alltoall" and etp > 1:
        # the alltoall dispatcher gathers each expert-TP rank's routed tokens, a different count per rank: an
        # uneven all_gather, which gloo refuses ("ProcessGroupGloo::allgather: invalid tensor size")
        return (f"--moe-token-dispatcher-type alltoall with expert tensor parallelism {etp} gathers uneven token "
                "counts, which gloo cannot; on the CPU use --moe-token-dispatcher-type allgather or "
                "--expert-tensor-parallel-size 1")
    from .model import fused_attention

    if fused_attention(args) and args.attention_dropout > 0:
        return (f"--attention-backend {args.attention_backend} runs torch's CPU flash attention, which has no "
                f"dropout; add --attention-dropout 0.0 (or use --attention-backend local)")
    return None


def batches(args, *, iteration: int, n_micro: int, dp_rank: int):
    """The micro-batches of one iteration for this data-parallel rank: (tokens, labels, loss_mask, positions)."""
    import torch

    from ....workloads.minigpt import batch_for

    pos = torch.arange(args.seq_length).unsqueeze(0).expand(args.micro_batch_size, -1)
    for m in range(n_micro):
        start = (dp_rank * n_micro + m) * args.micro_batch_size
        data = batch_for(iteration, start, args.micro_batch_size, seq=args.seq_length,
                         vocab=args.vocab_size_unpadded, seed=args.seed)
        yield data[:, :-1].contiguous(), data[:, 1:].contiguous(), torch.ones(data.shape[0], args.seq_length), pos


def seed_each_layer(seed: int) -> None:
    """Seed the CPU generator before each transformer layer is built, from ``seed`` and its global layer number."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer, get_transformer_layer_offset

    init = TransformerLayer.__init__

    def __init__(self, config, submodules, layer_number: int = 1, hidden_dropout=None, pg_collection=None,
                 vp_stage=None):
        # megatron-core numbers layers within a stage and adds the stage's offset itself
        number = layer_number + get_transformer_layer_offset(config, vp_stage=vp_stage)
        torch.manual_seed(seed * 1_000_003 + number)
        init(self, config, submodules, layer_number, hidden_dropout=hidden_dropout, pg_collection=pg_collection,
             vp_stage=vp_stage)

    TransformerLayer.__init__ = __init__


def forward_step(data_iterator, model):
    """Megatron-LM's GPT forward step: the model's per-token loss and the loss function over it."""
    from functools import partial

    from .model import loss_func

    tokens, labels, loss_mask, position_ids = next(data_iterator)
    output = model(tokens, position_ids, None, labels=labels)
    return output, partial(loss_func, loss_mask)


def say(line: str) -> None:
    """One log line in one write: ranks share stdout, and a line must not be split by another rank's."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def memory_line(rank: int, iteration: int) -> str:
    import torch

    if torch.cuda.is_available():
        alloc, max_alloc = torch.cuda.memory_allocated() / MB, torch.cuda.max_memory_allocated() / MB
        res, max_res = torch.cuda.memory_reserved() / MB, torch.cuda.max_memory_reserved() / MB
    else:
        alloc, max_alloc = status_kib("VmRSS")["VmRSS"] / 1024.0, peak_rss_bytes() / MB
        res, max_res = status_kib("VmData")["VmData"] / 1024.0, peak_data_bytes() / MB
    return (f"[Rank {rank}] (after {iteration} iterations) memory (MB) | allocated: {alloc:.1f} | "
            f"max allocated: {max_alloc:.1f} | reserved: {res:.1f} | max reserved: {max_res:.1f}")


def main(argv: list[str] | None = None, *, extra_args_provider=None) -> int:
    """Train; ``extra_args_provider`` adds a program's own flags (Megatron-LM's ``pretrain(...,
    extra_args_provider=...)``): they are parsed strictly with the rest and not used by the loop."""
    from .model import (MegatronArgsError, eager_fusions, initialize_parallel, model_chunks, num_microbatches,
                                 parse, transformer_config, wrap)

    try:
        args = parse(list(sys.argv[1:] if argv is None else argv), strict=True,
                     extra_args_provider=extra_args_provider).args
    except MegatronArgsError as e:
        print(f"pretrain_gpt.py: error: {e}", file=sys.stderr)
        return 2
    why = _refuse(args)
    if why:
        print(f"pretrain_gpt.py: error: {why}", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist

    if args.intra_op_threads:
        torch.set_num_threads(args.intra_op_threads)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:  # a single process started without torchrun
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"))
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    eager_fusions()
    from megatron.core import parallel_state as ps
    from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    try:
        initialize_parallel(args)
        dp = ps.get_data_parallel_world_size()
        n_micro = num_microbatches(args, dp)
        config = transformer_config(args)
    except (MegatronArgsError, RuntimeError, AssertionError, ValueError) as e:
        print(f"pretrain_gpt.py: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    from torch.distributed.distributed_c10d import _world

    # gloo groups hold threads whose stacks count in the data segment: the estimate's CPU constant counts them
    say(f"[Rank {rank}] process groups: {len(_world.pg_map)}")
    init_num_microbatches_calculator(rank, None, args.global_batch_size, args.micro_batch_size, dp)
    torch.manual_seed(args.seed)
    model_parallel_cuda_manual_seed(args.seed)
    if args.use_cpu_initialization:
        torch.manual_seed(args.seed)  # the tracker's seeding above drew on the CPU generator (shim 3)
        seed_each_layer(args.seed)
    chunks = model_chunks(args, config)
    ddp, opt = wrap(args, config, chunks)
    for m in ddp:
        m.train()
    fwd_bwd = get_forward_backward_func()
    dp_rank = ps.get_data_parallel_rank()
    prints = (ps.is_pipeline_last_stage(ignore_virtual=True) and ps.get_tensor_model_parallel_rank() == 0
              and dp_rank == 0)
    consumed = 0
    on_gpu = torch.cuda.is_available()
    for it in range(1, args.train_iters + 1):
        if on_gpu:  # the data loader's work (Megatron-LM's runs in background workers), before the clock starts:
            # drawn on the host (~25 ms a micro-batch at seq 2048), it would stall the GPU between micro-batches
            ready = [[tuple(t.cuda() for t in mb) for mb in batches(args, iteration=it, n_micro=n_micro,
                                                                    dp_rank=dp_rank)] for _ in ddp]
        t0 = time.perf_counter()
        for m in ddp:
            m.zero_grad_buffer()
        opt.zero_grad()
        iters = ([iter(r) for r in ready] if on_gpu else
                 [batches(args, iteration=it, n_micro=n_micro, dp_rank=dp_rank) for _ in ddp])
        losses = fwd_bwd(forward_step_func=forward_step, data_iterator=iters if len(iters) > 1 else iters[0],
                         model=ddp if len(ddp) > 1 else ddp[0], num_microbatches=n_micro,
                         seq_length=args.seq_length, micro_batch_size=args.micro_batch_size, forward_only=False)
        t_fb = time.perf_counter()
        ok, grad_norm, _ = opt.step()
        if on_gpu:  # the step's kernels done before the clock is read (Megatron-LM's timers too)
            torch.cuda.synchronize()
        step_ms = (time.perf_counter() - t0) * 1000.0
        consumed += args.global_batch_size
        if prints and it % args.log_interval == 0:
            lm = torch.stack([x["lm loss"] for x in losses]).mean() if losses else torch.zeros(())
            if dp > 1:  # the loss Megatron reports: averaged over the data-parallel ranks
                dist.all_reduce(lm, group=ps.get_data_parallel_group())
                lm = lm / dp
            lm_loss = float(lm)
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            say(f" [{stamp}] iteration {it:8d}/{args.train_iters:8d} | consumed samples: {consumed:12d} | "
                f"elapsed time per iteration (ms): {step_ms:.1f} | learning rate: {args.lr:.6E} | "
                f"global batch size: {args.global_batch_size:5d} | lm loss: {lm_loss:.6E} | loss scale: 1.0 | "
                f"grad norm: {float(grad_norm or 0.0):.6E} | number of skipped iterations: {int(not ok):3d} | "
                f"number of nan iterations: {int(not math.isfinite(lm_loss)):3d} |")
            if args.timing_log_level > 0:
                say("(min, max) time across ranks (ms):")
                for name, ms in (("forward-backward", (t_fb - t0) * 1000.0),
                                 ("optimizer", (time.perf_counter() - t_fb) * 1000.0)):
                    say(f"    {name} {'.' * max(3, 48 - len(name))}: ({ms:.2f}, {ms:.2f})")
        elif dp > 1 and ps.is_pipeline_last_stage(ignore_virtual=True) and it % args.log_interval == 0:
            lm = torch.stack([x["lm loss"] for x in losses]).mean() if losses else torch.zeros(())
            dist.all_reduce(lm, group=ps.get_data_parallel_group())  # the printing rank's all-reduce
        if it == 1 or it == args.train_iters:
            say(memory_line(rank, it))
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
