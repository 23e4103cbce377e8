"""Benchmark: the Megatron estimate (megatron-core's model, faked) vs real CPU peaks; at scale, vs Megatron's formula.

    python scripts/bench_estimate_megatron.py               # held-out shapes: real CPU trials vs the estimate
    python scripts/bench_estimate_megatron.py --calibrate   # fit the CPU constants on other shapes (CALIBRATE)
    python scripts/bench_estimate_megatron.py --small       # the shipped shape's layouts: real trials vs the estimate
    python scripts/bench_estimate_megatron.py --scale       # DeepSeek-V2-Lite and Llama-3-70B on 64-512 ranks

The default table runs each setting of HELDOUT (vocabulary 32k-150k, sequence 512-8192, GQA, GeLU/SwiGLU, 8-64
experts, top-1..8, small enough to run here: 1-2 layers, hidden 64-192) for real and estimates it with the constants
of infrarsi/adapters/megatron/estimate/overhead.py, fitted by --calibrate on CALIBRATE, whose shapes are others. Its
columns split the estimate into the tensors the fake step tracks, the heap's high-water mark over them (computed from the
step's storage sizes, no constant) and the fitted constants; "RSS" is the busiest rank's peak resident set, beside the
peak data segment the table compares.

--small runs each setting of SMALL for real, as the Megatron adapter launches a trial of contracts/megatron-cpu.toml
(dense) or contracts/megatron-cpu-moe.toml (MoE), uncapped, 3 iterations (the peak comes at the second, when Adam's
state exists), and compares the busiest rank's reported peak (the memory line's "max reserved": the peak data
segment RLIMIT_DATA caps) with the estimate of the busiest rank. Errors are (estimate - measured) / measured; rank
order is the share of setting pairs whose order by memory the estimate gets right (pairs whose measured peaks differ
by under 2% are ties, skipped). Measurements and the fake steps' outputs are cached in --cache (a killed benchmark
resumes; a setting whose launch changed is run again); --fresh ignores it. The settings used to fit the constants
(--calibrate: CALIBRATE) are not in SMALL or HELDOUT.

--scale estimates the shipped GPU contracts at several world sizes and prints, beside each, Megatron-LM's own
theoretical memory formula (infrarsi/adapters/megatron/estimate/formula.py) for the same setting. Wall times are on the
shared 2-core machine: noisy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infrarsi.contract.model import load_contract  # noqa: E402
from infrarsi.adapters.base import FrameworkRejected  # noqa: E402
from infrarsi.estimate import EstimateError  # noqa: E402
from infrarsi.estimate.run import anchored  # noqa: E402

MiB = 2**20
GiB = 2**30
DENSE = ROOT / "contracts/megatron-cpu.toml"
MOE = ROOT / "contracts/megatron-cpu-moe.toml"

# (name, contract, processes, setting over the contract's baseline)
SMALL = [
    ("TP2 SP (baseline)", DENSE, 2, {}),
    ("TP2 SP mbs 4", DENSE, 2, {"micro_batch_size": 4}),
    ("TP2 SP full recompute", DENSE, 2, {"recompute_granularity": "full"}),
    ("TP2 SP selective, local attn", DENSE, 2, {"recompute_granularity": "selective", "attention_backend": "local"}),
    ("TP2 no SP", DENSE, 2, {"sequence_parallel": False}),
    ("DP2", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False}),
    ("DP2 dist-opt", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "distributed_optimizer": True}),
    ("DP2 dist-opt mbs 4", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "distributed_optimizer": True,
                                      "micro_batch_size": 4}),
    ("DP2 local attn mbs 1", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "attention_backend": "local",
                                       "micro_batch_size": 1}),
    ("PP2", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "pipeline_parallel": 2}),
    ("PP2 VP3", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "pipeline_parallel": 2,
                           "virtual_pipeline": 3}),
    ("PP2 full recompute", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False, "pipeline_parallel": 2,
                                      "recompute_granularity": "full"}),
    ("TP2 PP2 SP (4 proc)", DENSE, 4, {"pipeline_parallel": 2}),
    ("TP2 DP2 dist-opt (4 proc)", DENSE, 4, {"distributed_optimizer": True}),
    ("PP2 VP3 DP2 dist-opt (4 proc)", DENSE, 4, {"tensor_parallel": 1, "sequence_parallel": False,
                                                 "pipeline_parallel": 2, "virtual_pipeline": 3,
                                                 "distributed_optimizer": True}),
    ("MoE EP2 alltoall", MOE, 2, {}),
    ("MoE EP2 allgather", MOE, 2, {"moe_token_dispatcher": "allgather"}),
    ("MoE EP2 dist-opt selective", MOE, 2, {"distributed_optimizer": True, "recompute_granularity": "selective"}),
    ("MoE EP4 alltoall (4 proc)", MOE, 4, {"expert_parallel": 4}),
    ("MoE EP2 PP2 (4 proc)", MOE, 4, {"pipeline_parallel": 2}),
]
def shape(*, vocab: int, seq: int, layers: int = 2, hidden: int = 128, heads: int = 4, kv: int = 0,
          act: str = "swiglu", experts: int = 0, topk: int = 2, expert_ffn: int = 128, gbs: int = 4) -> list[str]:
    """The flags that give the contract's launch this model shape (``kv``: GQA's query groups, 0 for MHA; ``act``
    "gelu" drops --swiglu); "!--flag" removes a switch."""
    out = ["--num-layers", str(layers), "--hidden-size", str(hidden), "--num-attention-heads", str(heads),
           "--seq-length", str(seq), "--max-position-embeddings", str(seq), "--vocab-size", str(vocab),
           "--global-batch-size", str(gbs)]
    if kv:
        out += ["--group-query-attention", "", "--num-query-groups", str(kv)]
    if act == "gelu":
        out += ["!--swiglu", ""]
    if experts:
        out += ["--num-experts", str(experts), "--moe-router-topk", str(topk), "--moe-ffn-hidden-size", str(expert_ffn)]
        if topk == 1:  # megatron-core's TransformerConfig asks for it
            out += ["--moe-router-pre-softmax", ""]
    return out


# Fit the CPU constants (adapters/megatron/estimate/overhead.py): a bare rank at two group counts (a tiny model: a
# few MiB of tensors), dense shapes with heap-heavy and mmap-heavy steps, and MoE ranks at 4-64 local experts. None is in HELDOUT.
TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "32",
        "--max-position-embeddings", "32", "--vocab-size", "256", "--micro-batch-size", "1", "--global-batch-size", "2"]
TP1 = {"tensor_parallel": 1, "sequence_parallel": False}
CALIBRATE = [
    ("bare DP2", DENSE, 2, TP1, TINY),
    ("bare TP2 PP2 (4 proc)", DENSE, 4, {"pipeline_parallel": 2}, TINY + ["--num-layers", "2"]),
    ("v32k s1024 TP2 SP mbs2", DENSE, 2, {}, shape(vocab=32000, seq=1024)),
    ("v64k s2048 DP2 gelu mbs1", DENSE, 2, {**TP1, "micro_batch_size": 1}, shape(vocab=64000, seq=2048, act="gelu")),
    ("v100k s512 TP2 GQA2 mbs2", DENSE, 2, {}, shape(vocab=100000, seq=512, kv=2)),
    ("v50k s2048 DP2 local attn mbs1", DENSE, 2, {**TP1, "attention_backend": "local", "micro_batch_size": 1},
     shape(vocab=50000, seq=2048)),
    ("v32k s4096 DP2 dist-opt h192 mbs1", DENSE, 2, {**TP1, "distributed_optimizer": True, "micro_batch_size": 1},
     shape(vocab=32000, seq=4096, hidden=192, heads=6)),
    ("v150k s1024 TP2 SP gelu mbs1", DENSE, 2, {"micro_batch_size": 1}, shape(vocab=150000, seq=1024, act="gelu")),
    ("v100k s1024 DP2 dist-opt gelu mbs1", DENSE, 2, {**TP1, "distributed_optimizer": True, "micro_batch_size": 1},
     shape(vocab=100000, seq=1024, act="gelu")),
    ("MoE 8e top2 EP2 v32k s1024", MOE, 2, {}, shape(vocab=32000, seq=1024, experts=8, topk=2)),
    ("MoE 32e top4 EP2 v32k s1024", MOE, 2, {}, shape(vocab=32000, seq=1024, experts=32, topk=4)),
    ("MoE 16e top1 EP2 v50k s2048 mbs1", MOE, 2, {"micro_batch_size": 1},
     shape(vocab=50000, seq=2048, experts=16, topk=1)),
    ("MoE 64e top8 EP2 v32k s512", MOE, 2, {}, shape(vocab=32000, seq=512, experts=64, topk=8)),
]
# The held-out shapes (none fitted on): vocabulary 32k-150k, sequence 512-8192, GQA, GeLU/SwiGLU, 8-64 experts,
# top-1..8, under TP, SP, DP, PP, the distributed optimizer, recompute and EP.
HELDOUT = [
    ("v32k s512 TP2 SP", DENSE, 2, {}, shape(vocab=32000, seq=512)),
    ("v32k s8192 TP2 SP mbs1 h64", DENSE, 2, {"micro_batch_size": 1},
     shape(vocab=32000, seq=8192, hidden=64, layers=1, gbs=2)),
    ("v48k s4096 TP2 SP GQA2 mbs1", DENSE, 2, {"micro_batch_size": 1}, shape(vocab=48000, seq=4096, kv=2)),
    ("v80k s1024 DP2 gelu", DENSE, 2, TP1, shape(vocab=80000, seq=1024, act="gelu")),
    ("v128k s1024 DP2 GQA1", DENSE, 2, TP1, shape(vocab=128000, seq=1024, kv=1)),
    ("v150k s512 DP2 dist-opt", DENSE, 2, {**TP1, "distributed_optimizer": True}, shape(vocab=150000, seq=512)),
    ("v150k s2048 TP2 SP mbs1 h64", DENSE, 2, {"micro_batch_size": 1}, shape(vocab=150000, seq=2048, hidden=64)),
    ("v32k s2048 TP2 no SP gelu", DENSE, 2, {"sequence_parallel": False}, shape(vocab=32000, seq=2048, act="gelu")),
    ("v40k s1024 PP2 4 layers", DENSE, 2, {**TP1, "pipeline_parallel": 2}, shape(vocab=40000, seq=1024, layers=4)),
    ("v64k s1024 TP2 SP full recompute", DENSE, 2, {"recompute_granularity": "full"},
     shape(vocab=64000, seq=1024, layers=3)),
    ("v64k s4096 DP2 selective mbs1 GQA2", DENSE, 2, {**TP1, "recompute_granularity": "selective",
                                                       "micro_batch_size": 1}, shape(vocab=64000, seq=4096, kv=2)),
    ("v32k s1024 DP2 local attn h192", DENSE, 2, {**TP1, "attention_backend": "local"},
     shape(vocab=32000, seq=1024, hidden=192, heads=6)),
    ("v100k s2048 DP2 mbs1 gelu GQA2", DENSE, 2, {**TP1, "micro_batch_size": 1},
     shape(vocab=100000, seq=2048, act="gelu", kv=2)),
    ("v32k s2048 TP2 SP mbs4 h64", DENSE, 2, {"micro_batch_size": 4}, shape(vocab=32000, seq=2048, hidden=64,
                                                                           gbs=8)),
    ("v50k s512 TP2 SP mbs4 3 layers", DENSE, 2, {"micro_batch_size": 4}, shape(vocab=50000, seq=512, layers=3,
                                                                               gbs=8)),
    ("v120k s1024 PP2 VP3 6 layers", DENSE, 2, {**TP1, "pipeline_parallel": 2, "virtual_pipeline": 3},
     shape(vocab=120000, seq=1024, layers=6)),
    ("v32k s1024 TP2 PP2 SP (4 proc)", DENSE, 4, {"pipeline_parallel": 2}, shape(vocab=32000, seq=1024)),
    ("v64k s512 TP2 DP2 dist-opt (4 proc)", DENSE, 4, {"distributed_optimizer": True}, shape(vocab=64000, seq=512)),
    ("v150k s1024 DP2 GQA2 mbs1 h64", DENSE, 2, {**TP1, "micro_batch_size": 1},
     shape(vocab=150000, seq=1024, kv=2, hidden=64)),
    ("v32k s4096 TP2 SP gelu mbs1 h192", DENSE, 2, {"micro_batch_size": 1},
     shape(vocab=32000, seq=4096, act="gelu", hidden=192, heads=6)),
    ("MoE 8e top1 EP2 v32k s512", MOE, 2, {}, shape(vocab=32000, seq=512, experts=8, topk=1)),
    ("MoE 8e top2 EP2 v64k s2048 mbs1", MOE, 2, {"micro_batch_size": 1},
     shape(vocab=64000, seq=2048, experts=8, topk=2)),
    ("MoE 16e top2 EP2 v32k s1024 allgather", MOE, 2, {"moe_token_dispatcher": "allgather"},
     shape(vocab=32000, seq=1024, experts=16, topk=2)),
    ("MoE 16e top4 EP2 v100k s1024 gelu", MOE, 2, {}, shape(vocab=100000, seq=1024, experts=16, topk=4,
                                                            act="gelu")),
    ("MoE 32e top2 EP2 v32k s2048 mbs1 GQA2", MOE, 2, {"micro_batch_size": 1},
     shape(vocab=32000, seq=2048, experts=32, topk=2, kv=2)),
    ("MoE 32e top8 EP2 v48k s512", MOE, 2, {}, shape(vocab=48000, seq=512, experts=32, topk=8)),
    ("MoE 64e top2 EP2 v32k s1024", MOE, 2, {}, shape(vocab=32000, seq=1024, experts=64, topk=2)),
    ("MoE 64e top4 EP2 v32k s1024 dist-opt", MOE, 2, {"distributed_optimizer": True},
     shape(vocab=32000, seq=1024, experts=64, topk=4)),
    ("MoE 16e top2 EP2 v32k s1024 selective 3 layers", MOE, 2, {"recompute_granularity": "selective"},
     shape(vocab=32000, seq=1024, experts=16, topk=2, layers=3)),
    ("MoE 8e top2 EP2 PP2 (4 proc)", MOE, 4, {"pipeline_parallel": 2}, shape(vocab=32000, seq=1024, experts=8)),
    ("MoE 32e top3 EP4 v64k s1024 (4 proc)", MOE, 4, {"expert_parallel": 4},
     shape(vocab=64000, seq=1024, experts=32, topk=3, gbs=8)),
    ("MoE 64e top6 EP2 v150k s512 gelu mbs1", MOE, 2, {"micro_batch_size": 1},
     shape(vocab=150000, seq=512, experts=64, topk=6, act="gelu")),
]


def _cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def contract_for(path: Path, procs: int):
    c = anchored(load_contract(path), path.parent)
    if procs != c.hardware.devices:
        wl = c.workload.model_copy(update={"script_env": {**c.workload.script_env, "NPROC": str(procs)}})
        c = c.model_copy(update={"workload": wl, "hardware": c.hardware.model_copy(update={"devices": procs})})
    return c


def _override(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with each ``--flag value`` of ``extra`` replacing the flag's value (appended when absent); a value ""
    is a switch (``--flag`` alone), a flag "!--flag" removes ``--flag``."""
    out = list(argv)
    for flag, val in zip(extra[::2], extra[1::2]):
        if flag.startswith("!"):
            out = [a for a in out if a != flag[1:]]
        elif flag in out:
            if val != "":
                out[out.index(flag) + 1] = val
        else:
            out += [flag] + ([val] if val != "" else [])
    return out


def measured(contract, setting: dict, extra: list[str], *, iters: int = 3) -> dict:
    """Per-rank peaks (bytes) of a real, uncapped run of ``setting``, launched as a trial: the data segment ("max
    reserved") and the resident set ("max allocated")."""
    from infrarsi.adapters.megatron import MegatronAdapter
    from infrarsi.adapters.megatron.log import parse_log

    ad = MegatronAdapter()
    spec = ad.launch(contract, {**contract.baseline, **setting})
    argv = _override(list(spec.argv), ["--train-iters", str(iters), *extra])
    t0 = time.time()
    p = subprocess.run(argv, cwd=ROOT, env={**os.environ, **spec.env}, capture_output=True, text=True, timeout=1800)
    log = parse_log(p.stdout)
    if p.returncode != 0 or not log.max_reserved_mb:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"the real run failed (exit {p.returncode}): {' | '.join(tail)}")
    return {"ranks": {str(r): v * MiB for r, v in log.max_reserved_mb.items()},
            "rss": {str(r): v * MiB for r, v in log.max_allocated_mb.items()},
            "wall_s": round(time.time() - t0, 1), "argv": argv}


def step_job(contract, setting: dict, extra: list[str]) -> tuple[list[str], int]:
    from infrarsi.adapters.megatron import MegatronAdapter
    from infrarsi.adapters.megatron.estimate.peak import launch_argv

    argv, world, _ = launch_argv(contract, {**contract.baseline, **setting}, adapter=MegatronAdapter())
    return _override(argv, extra), world


def estimated(contract, setting: dict, extra: list[str], steps: dict | None = None):
    """The estimate of ``setting``; ``steps``: fake-step outputs by launch (reused, and this one added)."""
    from infrarsi.adapters.megatron.estimate.peak import from_step, run_step

    argv, world = step_job(contract, setting, extra)
    key = json.dumps([argv, world])
    if steps is None or key not in steps:
        out = run_step({"argv": argv, "world": world, "ranks": "auto"})
        if steps is not None:
            steps[key] = out
    return from_step(steps[key] if steps is not None else out, contract, argv=argv, world=world)


def pairs_right(est: list[float], meas: list[float], tie: float = 0.02) -> tuple[int, int]:
    right = total = 0
    for i, j in itertools.combinations(range(len(est)), 2):
        if abs(meas[i] - meas[j]) <= tie * max(meas[i], meas[j]):
            continue
        total += 1
        right += (est[i] - est[j]) * (meas[i] - meas[j]) > 0
    return right, total


def _measure_all(rows, cache_path: Path, fresh: bool) -> tuple[dict, dict]:
    """(measurements by setting name, fake-step outputs by launch), each setting measured and stepped once: a setting
    whose cached measurement ran another launch is measured again."""
    cache = {} if fresh else _cache(cache_path)
    steps_path = cache_path.with_name(cache_path.stem + ".steps.json")
    steps = {} if fresh else _cache(steps_path)
    for name, path, procs, setting, *extra in rows:
        extra = extra[0] if extra else []
        c = contract_for(path, procs)
        if name not in cache or "error" in cache[name] or cache[name].get("extra", extra) != extra:
            print(f"  measuring {name} ...", flush=True)
            try:
                cache[name] = {**measured(c, setting, extra), "extra": extra}
            except (SystemExit, FrameworkRejected) as e:  # tried again next time; the table says so, the others run
                cache[name] = {"error": str(e), "extra": extra}
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
        if "error" in cache[name]:
            print(f"  {name}: {cache[name]['error']}", flush=True)
            continue
        n = len(steps)
        try:
            estimated(c, setting, extra, steps)
        except EstimateError as e:
            cache[name]["error"] = f"the estimate failed: {e}"
            print(f"  {name}: {cache[name]['error']}", flush=True)
        if len(steps) > n:
            steps_path.write_text(json.dumps(steps))
    return cache, steps


GROUP_PROBE = """
import os, torch.distributed as dist
from infrarsi.procmem import status_kib
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PORT", "29561"))
dist.init_process_group("gloo", rank=0, world_size=1)
before = status_kib("VmData")["VmData"]
groups = [dist.new_group([0]) for _ in range(16)]
print((status_kib("VmData")["VmData"] - before) * 1024 / 16)
"""


def per_group_bytes() -> float:
    """The data segment one more gloo process group adds to a process (its threads' stacks), measured directly."""
    p = subprocess.run([sys.executable, "-c", GROUP_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return float(p.stdout.strip().splitlines()[-1])


FITTED = ("base", "holes", "comm", "moe", "per_local_expert")


def run_calibrate(args) -> int:
    """The CPU constants of adapters/megatron/estimate/overhead.py: per gloo group, measured directly (GROUP_PROBE);
    then least squares over every measured rank of CALIBRATE: measured peak - tracked peak - heap high-water over it -
    per_group x groups = base + holes x heap-sized transient + moe x [has experts] + per_local_expert x local experts."""
    import numpy as np

    from infrarsi.adapters.megatron.estimate import overhead as om
    from infrarsi.adapters.megatron.estimate.peak import reduced_bytes

    cache, steps = _measure_all(CALIBRATE, Path(args.cache).with_name("calibrate.json"), args.fresh)
    per_group = per_group_bytes()
    print(f"  one gloo process group: {per_group / MiB:.2f} MiB of data segment", flush=True)
    xs, ys, names = [], [], []
    for name, path, procs, setting, extra in CALIBRATE:
        if "error" in cache[name]:
            continue
        e = estimated(contract_for(path, procs), setting, extra, steps)
        m = cache[name]["ranks"]
        for r in e.per_rank:
            if str(r["rank"]) not in m:
                continue
            f = om.features(process_groups=r["process_groups"], local_experts=r["local_experts"], heap=r["heap"],
                            reduced_bytes=reduced_bytes(r, r["tracked"], e.layout["distributed_optimizer"]))
            tracked = sum(r["tracked"].values())
            y = m[str(r["rank"])] - tracked - om.heap_extra(r["heap"]) - per_group * f["per_group"]
            xs.append([f[k] for k in FITTED])
            ys.append(y)
            names.append(f"{name} rank {r['rank']}")
            print(f"  {name} rank {r['rank']}: measured {m[str(r['rank'])] / MiB:.0f} MiB, tracked "
                  f"{tracked / MiB:.1f}, heap high-water over it {om.heap_extra(r['heap']) / MiB:.1f}, groups "
                  f"{r['process_groups']}, heap-sized transient {f['holes'] / MiB:.1f} MiB, local experts "
                  f"{r['local_experts']}", flush=True)
    from scipy.optimize import nnls

    # in MiB (bytes features per MiB): every part is memory held, none negative
    per = np.array([1.0 if k in ("holes", "comm") else MiB for k in FITTED])
    coef, _ = nnls(np.array(xs) / MiB * per, np.array(ys) / MiB)
    fit = {k: c * (1.0 if k in ("holes", "comm") else MiB) for k, c in zip(FITTED, coef)}
    fitted = [sum(fit[k] * x for k, x in zip(FITTED, row)) for row in xs]
    print(f"\nCpuConstants(base={fit['base'] / MiB:.1f} * MiB, per_group={per_group / MiB:.2f} * MiB, "
          f"holes={fit['holes']:.3f}, comm={fit['comm']:.3f}, moe={fit['moe'] / MiB:.1f} * MiB, "
          f"per_local_expert={fit['per_local_expert'] / MiB:.2f} * MiB)  # non-negative least squares over "
          f"{len(ys)} ranks")
    for n, y, f in zip(names, ys, fitted):
        print(f"  {n}: beyond tensors, heap and groups: measured {y / MiB:7.1f} MiB, fitted {f / MiB:7.1f} MiB")
    return 0


def _table(rows_in, cache_path: Path, fresh: bool, *, split: bool) -> int:
    from infrarsi.adapters.megatron.estimate import overhead as om

    cache, steps = _measure_all(rows_in, cache_path, fresh)
    rows = []
    for name, path, procs, setting, *extra in rows_in:
        if "error" in cache[name]:
            continue
        e = estimated(contract_for(path, procs), setting, extra[0] if extra else [], steps)
        busiest = max(cache[name]["ranks"], key=lambda r: cache[name]["ranks"][r])
        rows.append((name, cache[name], busiest, e))
    if split:
        print("\n| setting | ranks | measured MiB (busiest rank) | estimate MiB | error | tensors MiB | heap high-water "
              "over them MiB | constants MiB | RSS MiB (measured) | data segment - RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    else:
        print("\n| setting | ranks | measured MiB (busiest rank) | estimate MiB | error | tracked: weights / grads / "
              "optim / act / temp MiB | outside tensors MiB | estimate s |")
        print("|---|---:|---:|---:|---:|---|---:|---:|")
    errs, gaps = [], []
    for name, m, busiest, e in rows:
        peak = m["ranks"][busiest]
        err = e.peak_bytes / peak - 1
        errs.append(err)
        if split:
            top = max(e.per_rank, key=lambda r: r["peak_bytes"])
            heap = om.heap_extra(top.get("heap"))
            rss = m.get("rss", {}).get(busiest)
            gap = peak - rss if rss else None
            if gap is not None:
                gaps.append(gap)
            print(f"| {name} | {e.world_size} | {peak / MiB:.0f} | {e.peak_bytes / MiB:.0f} | {err:+.1%} | "
                  f"{sum(top['tracked'].values()) / MiB:.0f} | {heap / MiB:.0f} | "
                  f"{(top['unseen_bytes'] - heap) / MiB:.0f} | {rss / MiB if rss else float('nan'):.0f} | "
                  f"{gap / MiB if gap is not None else float('nan'):.0f} |")
        else:
            c = e.by_category()
            print(f"| {name} | {e.world_size} | {peak / MiB:.0f} | {e.peak_bytes / MiB:.0f} | {err:+.1%} | "
                  f"{c['parameters'] / MiB:.0f} / {c['gradients'] / MiB:.0f} / {c['optimizer'] / MiB:.0f} / "
                  f"{c['activations'] / MiB:.0f} / {c['temporaries'] / MiB:.0f} | {e.unseen_bytes / MiB:.0f} | "
                  f"{e.wall_s:.1f} |")
    r, t = pairs_right([e.peak_bytes for *_, e in rows], [m["ranks"][b] for _, m, b, _ in rows])
    within = sum(abs(x) <= 0.10 for x in errs)
    print(f"\n{len(rows)} settings: {within} within 10%; median |error| {statistics.median(map(abs, errs)):.1%}, "
          f"max {max(map(abs, errs)):.1%}; rank order right in {r}/{t} pairs ({r / max(t, 1):.1%})")
    if gaps:
        print(f"peak data segment - peak RSS of the busiest rank: {min(gaps) / MiB:.0f}-{max(gaps) / MiB:.0f} MiB "
              f"(median {statistics.median(gaps) / MiB:.0f})")
    return 0


def run_small(args) -> int:
    return _table([r for r in SMALL if not args.only or args.only in r[0]], Path(args.cache), args.fresh,
                  split=False)


def run_heldout(args) -> int:
    return _table([r for r in HELDOUT if not args.only or args.only in r[0]],
                  Path(args.cache).with_name("heldout.json"), args.fresh, split=True)


LLAMA = ROOT / "contracts/megatron-llama3-70b-h100x64.toml"
DSV2 = ROOT / "contracts/megatron-deepseek-v2-lite-h100x64.toml"
# (contract, nodes of 8 GPUs, setting over the contract's baseline)
SCALE = [
    (LLAMA, 8, {}),
    (LLAMA, 8, {"tensor_parallel": 8}),
    (LLAMA, 8, {"virtual_pipeline": 5, "recompute_granularity": "full"}),
    (LLAMA, 16, {"tensor_parallel": 8, "recompute_granularity": "none"}),
    (LLAMA, 32, {"tensor_parallel": 8, "pipeline_parallel": 8, "virtual_pipeline": 2}),
    (LLAMA, 64, {"tensor_parallel": 8, "recompute_granularity": "full", "micro_batch_size": 2}),
    (DSV2, 8, {}),
    (DSV2, 8, {"recompute_granularity": "none"}),
    (DSV2, 16, {"expert_parallel": 16, "recompute_granularity": "selective"}),
    (DSV2, 32, {"expert_parallel": 32, "moe_token_dispatcher": "allgather"}),
    (DSV2, 64, {"expert_parallel": 64}),
]


def scale_contract(path: Path, nodes: int):
    c = anchored(load_contract(path), path.parent)
    wl = c.workload
    if wl.script_args:  # deepseek_v2_lite.sh NNODES EP ...
        wl = wl.model_copy(update={"script_args": [str(nodes), *wl.script_args[1:]]})
    else:  # llama3_70b_sbatch.sh reads NODES
        wl = wl.model_copy(update={"script_env": {**wl.script_env, "NODES": str(nodes)}})
    return c.model_copy(update={"workload": wl, "hardware": c.hardware.model_copy(update={"devices": 8 * nodes})})


def run_scale(args) -> int:
    """The estimate and Megatron-LM's theoretical formula for each SCALE row (busiest rank, GiB)."""
    from infrarsi.adapters.megatron import MegatronAdapter
    from infrarsi.estimate import estimate
    from infrarsi.adapters.megatron.estimate.peak import launch_argv
    from infrarsi.adapters.megatron.estimate.formula import theoretical_memory
    from infrarsi.adapters.megatron.cpu.model import parse

    print("| model | ranks | layout | estimate: weights / grads / optim / act / temp | + outside | estimate | "
          "busiest | formula: weights+optim / act | formula | formula / estimate | estimate s |")
    print("|---|---:|---|---|---:|---:|---|---|---:|---:|---:|")
    for path, nodes, change in SCALE:
        c = scale_contract(path, nodes)
        setting = {**c.baseline, **change}
        if args.only and args.only not in f"{path.stem}:{8 * nodes}":
            continue
        t0 = time.time()
        adapter = MegatronAdapter()  # the scale rows' contracts carry absolute launches
        e = estimate(c, setting, adapter=adapter)
        wall = time.time() - t0
        argv, world, _ = launch_argv(c, setting, adapter=adapter)
        f = theoretical_memory(parse(argv, strict=False).args, world)
        cat = e.by_category()
        lay = e.layout
        layout = (f"TP{lay['tp']} PP{lay['pp']}" + (f" VP{lay['vp']}" if lay['vp'] > 1 else "") + f" DP{lay['dp']}"
                  + (f" EP{lay['ep']} {lay['dispatcher']}" if "experts" in lay else "")
                  + f" mbs{lay['micro_batch']} {lay['recompute']}" + (" DO" if lay["distributed_optimizer"] else ""))
        top = max(e.per_rank, key=lambda r: r["peak_bytes"])
        model = "DeepSeek-V2-Lite" if path == DSV2 else "Llama-3-70B"
        print(f"| {model} | {world} | {layout} | " + " / ".join(f"{cat[k] / GiB:.1f}" for k in (
            "parameters", "gradients", "optimizer", "activations", "temporaries")) + f" | {e.unseen_bytes / GiB:.2f} | "
              f"{e.peak_bytes / GiB:.1f} | rank {top['rank']} ({top['why']}) | {f.weights_and_optimizer / GiB:.1f} / "
              f"{f.activations / GiB:.1f} | {f.total / GiB:.1f} | {f.total / e.peak_bytes:.2f} | {wall:.0f} |",
              flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calibrate", action="store_true")
    p.add_argument("--small", action="store_true", help="the shipped shape's layouts (SMALL), not the held-out shapes")
    p.add_argument("--scale", action="store_true")
    p.add_argument("--only", default="", help="only settings whose name contains this")
    p.add_argument("--cache", default=str(ROOT / ".infrarsi/bench_estimate/megatron.json"))
    p.add_argument("--fresh", action="store_true")
    args = p.parse_args(argv)
    if args.calibrate:
        run_calibrate(args)
    if args.small:
        run_small(args)
    if args.scale:
        run_scale(args)
    if not (args.calibrate or args.small or args.scale):
        run_heldout(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
