"""minigpt: the embedded training workload. A real decoder-only transformer, trained for real.

RMSNorm, RoPE, SwiGLU, causal attention, AdamW, on a deterministic, seeded, learnable token stream.
It runs on the CPU at seconds per step and on a GPU unchanged. Its command line uses Megatron-LM's flag
names for every knob it shares with Megatron, and it prints Megatron's log lines, so one parser
(``infrarsi.adapters.megatron.log``) serves it and real Megatron-LM::

    python -m infrarsi.workloads.minigpt --num-layers 4 --hidden-size 256 --num-attention-heads 8 \
        --seq-length 256 --global-batch-size 16 --micro-batch-size 4 --train-iters 6
    torchrun --standalone --nproc-per-node 2 -m infrarsi.workloads.minigpt ...   # data parallel (gloo DDP)

What each knob really changes here:
- micro-batch size vs gradient accumulation at a fixed global batch (GEMM shapes, activation memory);
- activation recompute none / selective (attention core) / full (whole layers, uniform or block);
- data parallel over processes (torchrun, DDP on gloo), with or without overlapped grad reduce;
- intra-op threads; bf16 (CPU autocast) vs fp32; torch.compile on/off; fused vs foreach AdamW;
- attention implementation: SDPA (``--attention-backend flash|fused|auto``) vs explicit math (``unfused``);
- per-op implementation: the built-in reference or a kernel candidate (``--kernel rmsnorm=PATH``, or
  ``rmsnorm=PATH@VARIANT`` for one of the file's named settings).

Memory capacity: when ``INFRARSI_MEMORY_CAP_BYTES`` is set, the process limits its data segment to it with
RLIMIT_DATA before building anything. An allocation past the cap then fails inside the allocator
("DefaultCPUAllocator: can't allocate memory", or MemoryError), exactly where a GPU allocator would
raise "CUDA out of memory": a real OOM, not a simulated one. The memory report line gives max RSS as
"max allocated" and the peak data segment (what the cap governs) as "max reserved".

The loss is the same function of the data whatever the knobs (same init, same samples per iteration;
micro-batch losses are averaged over the accumulation steps, DDP averages over ranks), so the
contract's loss invariant can compare traces across settings.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import resource
import sys
import time
from contextlib import nullcontext

from ..procmem import peak_data_bytes, peak_rss_bytes, status_kib
from ..transformer import minigpt_ffn, training_flops

MB = 2**20


# --------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    from infrarsi.kernels.ops import OPS  # the op table (light: no torch)

    p = argparse.ArgumentParser(prog="python -m infrarsi.workloads.minigpt", description=__doc__.split("\n")[0])
    a = p.add_argument
    # model (Megatron names)
    a("--num-layers", type=int, default=4)
    a("--hidden-size", type=int, default=256)
    a("--num-attention-heads", type=int, default=8)
    a("--ffn-hidden-size", type=int, default=None, help="default: 8/3 * hidden, rounded up to 64 (SwiGLU)")
    a("--seq-length", type=int, default=256)
    a("--vocab-size", type=int, default=512)
    # batch and schedule
    a("--micro-batch-size", type=int, default=1)
    a("--global-batch-size", type=int, default=16)
    a("--train-iters", type=int, default=8)
    a("--lr", type=float, default=1e-3)
    a("--weight-decay", type=float, default=0.01)
    a("--clip-grad", type=float, default=1.0)
    a("--seed", type=int, default=1234)
    # memory savers
    a("--recompute-granularity", choices=["full", "selective"], default=None)
    a("--recompute-method", choices=["uniform", "block"], default=None)
    a("--recompute-num-layers", type=int, default=1)
    # precision, kernels, runtime
    a("--bf16", action="store_true")
    a("--attention-backend", choices=["auto", "flash", "fused", "unfused", "local"], default="auto",
      help="unfused = explicit softmax(QK^T)V (stores the S x S probabilities); the others use SDPA")
    a("--overlap-grad-reduce", action="store_true", help="reduce gradients in backward hooks (DDP buckets)")
    a("--intra-op-threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    a("--torch-compile", action="store_true", help="torch.compile the model")
    a("--adam-impl", choices=["foreach", "fused"], default="foreach")
    a("--kernel", action="append", default=[], metavar="OP=PATH[@VARIANT]",
      help=f"use a kernel candidate for OP ({', '.join(OPS)}): a file, or "
           "FILE@VARIANT for one of its VARIANTS")
    # logging (Megatron names)
    a("--log-interval", type=int, default=1)
    a("--log-throughput", action="store_true")
    a("--timing-log-level", type=int, choices=[0, 1, 2], default=0)
    return p


# --------------------------------------------------------------------------- memory cap
def apply_memory_cap() -> int | None:
    """Limit this process's data segment to INFRARSI_MEMORY_CAP_BYTES (RLIMIT_DATA). Returns the cap."""
    raw = os.environ.get("INFRARSI_MEMORY_CAP_BYTES")
    if not raw:
        return None
    cap = int(float(raw))
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    return cap


# --------------------------------------------------------------------------- data
def batch_for(iteration: int, start: int, count: int, *, seq: int, vocab: int, seed: int):
    """Samples ``start .. start+count`` of an iteration's global batch: (count, seq+1) int64 tokens.

    A fixed random Markov chain (each token has 4 likely successors) generates every sample from a seed
    that depends only on (seed, iteration, sample index): the data is the same whatever the micro-batch
    size, accumulation or data-parallel split, and it is learnable (loss falls from log(vocab))."""
    import torch

    g = torch.Generator().manual_seed(seed * 7919 + 17)
    succ = torch.randint(0, vocab, (vocab, 4), generator=g)  # successors of each token
    choice, noise, rand_tok = [], [], []
    for i in range(start, start + count):
        gi = torch.Generator().manual_seed(((seed * 1_000_003 + iteration) * 10_007 + i) & 0x7FFF_FFFF)
        choice.append(torch.randint(0, 4, (seq + 1,), generator=gi))
        noise.append(torch.rand(seq + 1, generator=gi) < 0.1)  # 10% uniform noise tokens
        rand_tok.append(torch.randint(0, vocab, (seq + 1,), generator=gi))
    choice, noise, rand_tok = torch.stack(choice), torch.stack(noise), torch.stack(rand_tok)  # (count, seq+1)
    tok = torch.empty(count, seq + 1, dtype=torch.long)
    tok[:, 0] = rand_tok[:, 0]
    for t in range(1, seq + 1):
        tok[:, t] = torch.where(noise[:, t], rand_tok[:, t], succ[tok[:, t - 1], choice[:, t]])
    return tok


# --------------------------------------------------------------------------- ops (reference) and candidates
def load_kernels(specs: list[str]) -> dict:
    """``["rmsnorm=kernels/rmsnorm/x.py@rows16", ...]`` -> {op: object with forward(...)}: each file re-hashed against
    the run's recorded verdict, and its calls spot-checked against the reference (infrarsi.kernels.insitu)."""
    if not specs:
        return {}
    from infrarsi.kernels.insitu import load_for_training

    return load_for_training(specs)


def build_model(args, kernels: dict):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def rmsnorm(x, w, eps=1e-6):
        if "rmsnorm" in kernels:
            return kernels["rmsnorm"].forward(x, w, eps)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    def add_rmsnorm(x, residual, w, eps=1e-6):
        if "add_rmsnorm" in kernels:
            return kernels["add_rmsnorm"].forward(x, residual, w, eps)
        h = x + residual
        return rmsnorm(h, w, eps), h

    def swiglu(gate, up):
        if "swiglu" in kernels:
            return kernels["swiglu"].forward(gate, up)
        return F.silu(gate) * up

    def rope(x, cos, sin):  # x: (B, S, nh, hd); cos/sin: (S, hd)
        if "rope" in kernels:
            return kernels["rope"].forward(x, cos, sin)
        x1, x2 = x.chunk(2, dim=-1)
        rot = torch.cat((-x2, x1), dim=-1)
        return x * cos[None, :, None, :] + rot * sin[None, :, None, :]

    def cross_entropy(logits, target):
        if "cross_entropy" in kernels:
            return kernels["cross_entropy"].forward(logits, target, -100)
        return F.cross_entropy(logits.float(), target, ignore_index=-100)

    h, nh, L = args.hidden_size, args.num_attention_heads, args.num_layers
    hd = h // nh
    ffn = args.ffn_hidden_size or minigpt_ffn(h)
    unfused = args.attention_backend == "unfused"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.Parameter(torch.ones(h))
            self.norm2 = nn.Parameter(torch.ones(h))
            self.qkv = nn.Linear(h, 3 * h, bias=False)
            self.proj = nn.Linear(h, h, bias=False)
            self.gate_up = nn.Linear(h, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, h, bias=False)
            self.selective = args.recompute_granularity == "selective"

        def core_attention(self, q, k, v):  # (B, nh, S, hd) each
            if unfused:
                s = q.shape[-2]
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B, nh, S, S): the memory-hungry part
                mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
                att = att.masked_fill(mask, float("-inf")).softmax(-1)
                return att @ v
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward(self, x, cos, sin):  # x: (B, S, h)
            B, S, _ = x.shape
            q, k, v = self.qkv(rmsnorm(x, self.norm1)).view(B, S, 3, nh, hd).unbind(2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, nh, S, hd)
            if self.selective and self.training:  # Megatron's selective recompute: the attention core only
                y = checkpoint(self.core_attention, q, k, v, use_reentrant=False)
            else:
                y = self.core_attention(q, k, v)
            y = self.proj(y.transpose(1, 2).reshape(B, S, h))
            n2, x = add_rmsnorm(y, x, self.norm2)
            gate, up = self.gate_up(n2).chunk(2, dim=-1)
            return x + self.down(swiglu(gate, up))

    class MiniGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab_size, h)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.norm = nn.Parameter(torch.ones(h))
            self.head = nn.Linear(h, args.vocab_size, bias=False)
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(torch.arange(args.seq_length).float(), inv)  # (S, hd/2)
            self.register_buffer("cos", torch.cat((ang.cos(), ang.cos()), -1), persistent=False)
            self.register_buffer("sin", torch.cat((ang.sin(), ang.sin()), -1), persistent=False)

        def full_recompute(self, i: int) -> bool:
            if args.recompute_granularity != "full" or not self.training:
                return False
            n = max(1, args.recompute_num_layers)
            return args.recompute_method != "block" or i < n

        def forward(self, tokens, targets):  # (B, S) int64 each -> scalar loss
            x = self.embed(tokens)
            n = max(1, args.recompute_num_layers)
            i = 0
            while i < L:
                if self.full_recompute(i) and args.recompute_method != "block":
                    group = list(self.blocks[i:i + n])  # uniform: checkpoint chunks of n layers

                    def run(x, group=group):
                        for b in group:
                            x = b(x, self.cos, self.sin)
                        return x

                    x = checkpoint(run, x, use_reentrant=False)
                    i += len(group)
                    continue
                if self.full_recompute(i):
                    x = checkpoint(self.blocks[i], x, self.cos, self.sin, use_reentrant=False)
                else:
                    x = self.blocks[i](x, self.cos, self.sin)
                i += 1
            logits = self.head(rmsnorm(x, self.norm))
            return cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    return MiniGPT()


# --------------------------------------------------------------------------- training
def model_flops_per_step(args, n_params_matmul: int) -> float:
    """Training FLOPs per iteration: 6 N T for the matmuls plus causal attention 6 L S^2 h (half of 12,
    the causal discount), T = tokens per iteration: ``infrarsi.transformer.training_flops``, the formula
    the report states, on the parameters this process really built."""
    return training_flops(matmul_params=n_params_matmul, tokens=args.global_batch_size * args.seq_length,
                          layers=args.num_layers, seq=args.seq_length, attn_width=args.hidden_size)


def all_reduce_grads(model, world: int) -> None:
    """The blocking data-parallel gradient sync (overlap_grad_reduce off): every gradient in one flat buffer,
    one all-reduce, the mean copied back. The flat buffer (4 bytes x parameters in fp32) is freed on return.
    The pre-flight estimate (``infrarsi/estimate/minigpt.py``) runs this same function."""
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cap = apply_memory_cap()

    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo" if not torch.cuda.is_available() else "nccl")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if args.intra_op_threads:
        torch.set_num_threads(args.intra_op_threads)

    # Preconditions, in Megatron's words and arithmetic.
    per_rank = args.micro_batch_size * world
    if args.global_batch_size % per_rank:
        print(f"AssertionError: global batch size ({args.global_batch_size}) is not divisible by micro batch size "
              f"({args.micro_batch_size}) times data parallel size ({world})", file=sys.stderr)
        return 2
    if args.hidden_size % args.num_attention_heads:
        print(f"AssertionError: hidden size ({args.hidden_size}) must be divisible by num attention heads "
              f"({args.num_attention_heads})", file=sys.stderr)
        return 2
    n_micro = args.global_batch_size // per_rank  # gradient accumulation steps per rank

    kernels = load_kernels(args.kernel)
    torch.manual_seed(args.seed)
    model = build_model(args, kernels).to(device)
    n_matmul = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and "embed" not in name)
    flops_per_step = model_flops_per_step(args, n_matmul)
    fwd = torch.compile(model) if args.torch_compile else model
    if world > 1 and args.overlap_grad_reduce:
        from torch.nn.parallel import DistributedDataParallel as DDP

        fwd = DDP(fwd)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                            betas=(0.9, 0.95), fused=args.adam_impl == "fused", foreach=args.adam_impl == "foreach")
    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16) if args.bf16 else nullcontext()

    model.train()

    timers: dict[str, float] = {}

    def timed(name: str):
        class _T:
            def __enter__(self):
                self.t = time.perf_counter()

            def __exit__(self, *exc):
                timers[name] = timers.get(name, 0.0) + (time.perf_counter() - self.t) * 1000.0

        return _T()

    consumed = 0
    for it in range(1, args.train_iters + 1):
        timers.clear()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        for m in range(n_micro):
            with timed("batch-generator"):
                start = (rank * n_micro + m) * args.micro_batch_size
                data = batch_for(it, start, args.micro_batch_size, seq=args.seq_length, vocab=args.vocab_size,
                                 seed=args.seed).to(device)
            sync = nullcontext() if (m == n_micro - 1 or not hasattr(fwd, "no_sync")) else fwd.no_sync()
            with sync:
                with timed("forward-compute"), amp():
                    loss = fwd(data[:, :-1], data[:, 1:]) / n_micro
                with timed("backward-compute"):
                    loss.backward()
            loss_sum += loss.detach()
        if world > 1:
            with timed("grads-all-reduce"):
                if not args.overlap_grad_reduce:  # one blocking all-reduce after the whole backward
                    all_reduce_grads(model, world)
                dist.all_reduce(loss_sum)
                loss_sum /= world
        with timed("optimizer"):
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_ms = (time.perf_counter() - t0) * 1000.0
        consumed += args.global_batch_size
        lm_loss = float(loss_sum)
        if rank == 0 and it % args.log_interval == 0:
            stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            line = (f" [{stamp}] iteration {it:8d}/{args.train_iters:8d} | consumed samples: {consumed:12d} | "
                    f"elapsed time per iteration (ms): {step_ms:.1f} | ")
            if args.log_throughput:
                line += f"throughput per GPU (TFLOP/s/GPU): {flops_per_step / world / (step_ms / 1000.0) / 1e12:.4f} | "
            line += (f"learning rate: {args.lr:.6E} | global batch size: {args.global_batch_size:5d} | "
                     f"lm loss: {lm_loss:.6E} | loss scale: 1.0 | grad norm: {float(grad_norm):.6E} | "  # 7 digits: the loss referee compares it
                     f"number of skipped iterations:   0 | number of nan iterations: {int(not math.isfinite(lm_loss)):3d} |")
            print(line, flush=True)
            if args.timing_log_level > 0:
                print("(min, max) time across ranks (ms):", flush=True)
                for name in ("forward-compute", "backward-compute", "batch-generator", "grads-all-reduce", "optimizer"):
                    if name in timers:
                        print(f"    {name} {'.' * max(3, 48 - len(name))}: ({timers[name]:.2f}, {timers[name]:.2f})", flush=True)
        if it % args.log_interval == 0 or it == args.train_iters:
            if device.type == "cuda":
                alloc, max_alloc = torch.cuda.memory_allocated() / MB, torch.cuda.max_memory_allocated() / MB
                res, max_res = torch.cuda.memory_reserved() / MB, torch.cuda.max_memory_reserved() / MB
            else:
                alloc = status_kib("VmRSS")["VmRSS"] / 1024.0
                max_alloc = peak_rss_bytes() / MB
                res = status_kib("VmData")["VmData"] / 1024.0
                max_res = peak_data_bytes() / MB
            if it == args.train_iters or it == 1:
                print(f"[Rank {rank}] (after {it} iterations) memory (MB) | allocated: {alloc:.1f} | "
                      f"max allocated: {max_alloc:.1f} | reserved: {res:.1f} | max reserved: {max_res:.1f}", flush=True)
    if rank == 0 and cap:
        print(f"memory cap (RLIMIT_DATA): {cap / MB:.1f} MB per process", flush=True)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
