"""The trial as a process (what the adapter launches): Megatron-LM's log lines for one setting, or a CUDA
out-of-memory traceback and exit code 1. The one word of that format that names the framework, the training
program's file in the traceback's frame, is the simulated adapter's to state (``--oom-frame``, in its launch)."""

from __future__ import annotations

import argparse
import datetime
import json
import math
import random
import sys
from collections.abc import Sequence

from .hardware import GiB, MiB
from .layout import _Layout, _layout, model_flops_per_iteration, param_counts
from .memory import FRAGMENTATION, MemoryBreakdown, _memory, _stage_params
from .optimum import exhaustive_optimum
from .space import space_for
from .step_time import _step_time
from .trial import DEFAULT_NOISE_CV, _noise, check_setting, simulate
from .workload import SimWorkload, get_workload


def _fmt_gib(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def _oom_point(w: SimWorkload, lay: _Layout, mem: MemoryBreakdown) -> tuple[float, float, float, str]:
    """Where an over-capacity run fails: (bytes it tried to allocate, allocated, reserved before, phase).
    Allocations happen in order -- model and grad buffers, optimizer states, activations layer by layer,
    then the transients -- in chunks of one tensor; the first chunk that does not fit fails."""
    m = w.model
    T = lay.mbs * m.seq_length / lay.cp
    usable = mem.capacity - (mem.device_used - mem.reserved)
    frag = mem.reserved / mem.allocated if mem.allocated else FRAGMENTATION
    emb = m.vocab_size * m.hidden_size / lay.tp
    model_part = mem.weights_and_optimizer * (6.0 / 18.0 if lay.a == 2 else 0.5)
    g = 2 if m.swiglu else 1
    f = m.expert_ffn if m.moe else m.ffn_hidden_size
    act_chunk = max(T * f * g * lay.a / lay.tp, T * m.hidden_size * lay.a)
    steps = [("model setup", model_part, emb * lay.a),
             ("optimizer.step", mem.weights_and_optimizer - model_part, emb * 4 / (lay.dp * lay.cp if lay.do else 1)),
             ("forward", mem.activations, act_chunk),
             ("backward", mem.transient, max(mem.largest_alloc, act_chunk))]
    done = 0.0
    for where, total, chunk in steps:
        chunk = max(1.0, min(chunk, total)) if total > 0 else 0.0
        n = math.ceil(total / chunk) if chunk else 0
        for i in range(n):
            size = min(chunk, total - i * chunk)
            if (done + size) * frag > usable:
                reserved = min(done * frag, usable)
                if usable - reserved >= size:  # fragmentation: free space exists but not in one piece
                    reserved = usable - size + 20 * MiB
                return size, done, max(reserved, done), where
            done += size
    return mem.largest_alloc, mem.allocated, min(mem.reserved, usable), "backward"


def _loss(it: int, seed: int, setting_key: str, fp8: bool) -> float:
    """A plausible pre-training loss curve; the same for every setting up to reduction-order noise
    (1e-5 relative), fp8 adds ~0.2%."""
    base = 2.3 + 8.5 * math.exp(-it / 40.0)
    rng = random.Random(f"data:{seed}:{it}")
    base *= 1 + 0.004 * rng.gauss(0, 1)
    jitter = random.Random(f"order:{setting_key}:{it}").gauss(0, 1e-5)
    return base * (1 + jitter + (0.002 if fp8 else 0.0))


def _print_optimum(w: SimWorkload) -> int:
    space = space_for(w)
    space = space.restrict({"fp8_recipe": ["none"]}, keep=space.names)
    opt = exhaustive_optimum(w, space)
    print(f"{w.name}: {w.nodes} node(s) x {w.spec.gpus_per_node} {w.spec.name}; {opt.n_valid} valid settings, "
          f"{opt.n_oom} out of memory")
    if opt.setting is None:
        print("no setting fits in memory")
        return 1
    r = simulate(w, opt.setting, noise_cv=0)
    print(f"optimum: {opt.step_time_s:.3f} s/iteration, {r.tflops_per_gpu:.1f} TFLOP/s/GPU (MFU {r.mfu:.1%}), "
          f"peak {r.peak_memory_bytes / GiB:.1f} GiB of {w.spec.memory_bytes / GiB:.1f} GiB")
    print(json.dumps(opt.setting.to_dict(), sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infrarsi.workloads.simulated",
                                 description="Print the training log of one simulated run (the lines its adapter's "
                                             "log parser reads), or a CUDA out-of-memory traceback and exit 1.")
    ap.add_argument("--workload", required=True, help="a reference name or a JSON object of workload args")
    ap.add_argument("--setting", default="{}", help="JSON object: knob -> value")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--noise-cv", type=float, default=DEFAULT_NOISE_CV)
    ap.add_argument("--rerun", type=int, default=0, help="which rerun of this setting (a fresh noise stream)")
    ap.add_argument("--train-iters", type=int, default=10)
    ap.add_argument("--log-interval", type=int, default=1)
    ap.add_argument("--oom-frame", default="", metavar="PATH",
                    help="the training program's file the out-of-memory traceback names (the adapter that launches "
                         "the run hands it in, with the log format it parses); default: no frame line")
    ap.add_argument("--optimum", action="store_true",
                    help="what-if planning: print the exhaustive optimum (bf16 only) and its memory, then exit")
    ns = ap.parse_args(argv)
    try:
        wl = json.loads(ns.workload) if ns.workload.lstrip().startswith("{") else ns.workload
        w = get_workload(wl)
        if ns.optimum:
            return _print_optimum(w)
        setting = json.loads(ns.setting)
        if not isinstance(setting, dict):
            raise ValueError("--setting must be a JSON object of knob -> value")
        s = check_setting(w, setting)
    except (ValueError, json.JSONDecodeError) as e:
        print(f"AssertionError: this setting cannot be launched: {e}", file=sys.stderr)
        return 1
    lay = _layout(w, s)
    pc = param_counts(w.model)
    print(f"using world size: {w.world_size}, data-parallel size: {lay.dp}, context-parallel size: {lay.cp}, "
          f"tensor-model-parallel size: {lay.tp}, pipeline-model-parallel size: {lay.pp}", flush=True)
    d1, e1, _, _ = _stage_params(w, lay)
    print(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {int(d1 + e1)}", flush=True)
    print(f"simulated cluster: {w.nodes} node(s) x {w.spec.gpus_per_node} {w.spec.name}; model {pc['total'] / 1e9:.2f}B "
          f"parameters ({pc['active'] / 1e9:.2f}B active)", flush=True)
    mem = _memory(w, lay)
    if mem.oom:
        tried, alloc, reserved, where = _oom_point(w, lay, mem)
        in_use = reserved + (mem.device_used - mem.reserved)
        free = max(0.0, mem.capacity - in_use)
        print("[rank0]: Traceback (most recent call last):", file=sys.stderr)
        if ns.oom_frame:
            print(f'[rank0]:   File "{ns.oom_frame}", in train_step ({where})', file=sys.stderr)
        print(f"[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_fmt_gib(tried)}. GPU 0 has a "
              f"total capacity of {_fmt_gib(mem.capacity)} of which {_fmt_gib(free)} is free. Including non-PyTorch "
              f"memory, this process has {_fmt_gib(in_use)} memory in use. Of the allocated memory {_fmt_gib(alloc)} is "
              f"allocated by PyTorch, and {_fmt_gib(reserved - alloc)} is reserved by PyTorch but unallocated. If "
              "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
              "avoid fragmentation.  See documentation for Memory Management  "
              "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)", file=sys.stderr)
        return 1
    base, phases = _step_time(w, lay)
    key = s.key()
    factors = _noise(ns.seed, f"{key}:{ns.rerun}", ns.noise_cv, ns.train_iters)
    flops = model_flops_per_iteration(w.model)
    gbs = w.model.global_batch_size
    now = datetime.datetime(2026, 1, 1, 0, 0, 0)
    for it in range(1, ns.train_iters + 1):
        warm = 2.5 if it == 1 else (1.08 if it == 2 else 1.0)  # allocator / NCCL warm-up
        t = base * factors[it - 1] * warm
        now += datetime.timedelta(seconds=t)
        if it % ns.log_interval:
            continue
        tf = flops / (t * w.world_size) / 1e12
        print(f" [{now.strftime('%Y-%m-%d %H:%M:%S.%f')}] iteration {it:8d}/{ns.train_iters:8d} | consumed samples: "
              f"{it * gbs:12d} | elapsed time per iteration (ms): {t * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): "
              f"{tf:.1f} | learning rate: {3e-4 * min(1.0, it / 100):.6E} | global batch size: {gbs:5d} | lm loss: "
              f"{_loss(it, ns.seed, key, lay.fp8 != 'none'):.6E} | loss scale: 1.0 | grad norm: "
              f"{1.0 + 4.0 * math.exp(-it / 20):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |",
              flush=True)
        if it == 1:
            wo, act = mem.weights_and_optimizer / MiB, mem.activations / MiB
            print(f"Theoretical memory footprints: weight and optimizer={wo:.2f} MB, activation={act:.2f} MB, "
                  f"total={wo + act:.2f} MB", flush=True)
        if it == 1 or it == 2:
            mb = 1.0 / MiB
            alloc_now = (mem.weights_and_optimizer + 0.02 * mem.activations) * mb
            print(f"[Rank 0] (after {it} iterations) memory (MB) | allocated: {alloc_now:.2f} | max allocated: "
                  f"{mem.allocated * mb:.2f} | reserved: {mem.reserved * mb:.2f} | max reserved: {mem.reserved * mb:.2f}",
                  flush=True)
        if it >= 2:
            jit = factors[it - 1]
            print("(min, max) time across ranks (ms):")
            for name, key_ in (("forward-backward", "forward_backward"), ("all-grads-sync", "dp_grad_sync"),
                               ("params-all-gather", "dp_param_gather"), ("optimizer", "optimizer")):
                val = phases[key_] * jit * 1000
                print(f"    {name} {'.' * max(3, 48 - len(name))}: ({val * 0.97:.2f}, {val:.2f})")
    return 0
