"""Benchmark: the Megatron estimate (megatron-core's model, faked) vs real CPU peaks; at scale, vs Megatron's formula.

    python scripts/bench_estimate_megatron.py --calibrate   # the CPU constants for what tensors do not show
    python scripts/bench_estimate_megatron.py --small       # real 2- and 4-process CPU trials vs the estimate
    python scripts/bench_estimate_megatron.py --scale       # DeepSeek-V2-Lite and Llama-3-70B on 64-512 ranks

--small runs each setting of SMALL for real, as the Megatron adapter launches a trial of contracts/megatron-cpu.toml
(dense) or contracts/megatron-cpu-moe.toml (MoE), uncapped, 3 iterations (the peak comes at the second, when Adam's
state exists), and compares the busiest rank's reported peak (the memory line's "max reserved": the peak data
segment RLIMIT_DATA caps) with the estimate of the busiest rank. Errors are (estimate - measured) / measured; rank
order is the share of setting pairs whose order by memory the estimate gets right (pairs whose measured peaks differ
by under 2% are ties, skipped). Measurements are cached in --cache (a killed benchmark resumes); --fresh ignores it.
The settings used to fit the constants (--calibrate: CALIBRATE) are not in SMALL.

--scale estimates the shipped GPU contracts at several world sizes and prints, beside each, Megatron-LM's own
theoretical memory formula (infrarsi/estimate/megatron_formula.py) for the same setting. Wall times are on the
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
# Fit the CPU constants (overhead.py): a bare rank at two group counts (a tiny model: a few MiB of tensors) and two
# transient-heavy settings of the shipped model. Not in SMALL.
TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "2", "--seq-length", "32",
        "--max-position-embeddings", "32", "--vocab-size", "256", "--micro-batch-size", "1", "--global-batch-size", "2"]
CALIBRATE = [
    ("bare DP2", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False}, TINY),
    ("bare TP2 PP2 (4 proc)", DENSE, 4, {"pipeline_parallel": 2}, TINY + ["--num-layers", "2"]),
    ("DP2 mbs 2, local attn", DENSE, 2, {"tensor_parallel": 1, "sequence_parallel": False,
                                         "attention_backend": "local"}, []),
    ("TP2 SP mbs 4, local attn", DENSE, 2, {"micro_batch_size": 4, "attention_backend": "local"}, []),
    ("MoE EP2 mbs 1", MOE, 2, {"micro_batch_size": 1}, []),
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
    """``argv`` with each ``--flag value`` of ``extra`` replacing the flag's value (appended when absent)."""
    out = list(argv)
    for flag, val in zip(extra[::2], extra[1::2]):
        if flag in out:
            out[out.index(flag) + 1] = val
        else:
            out += [flag, val]
    return out


def measured(contract, setting: dict, extra: list[str], *, iters: int = 3) -> dict:
    """Per-rank peaks (bytes) of a real, uncapped run of ``setting``, launched as a trial."""
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
    return {"ranks": {str(r): v * MiB for r, v in log.max_reserved_mb.items()}, "wall_s": round(time.time() - t0, 1)}


def estimated(contract, setting: dict, extra: list[str]):
    from infrarsi.adapters.megatron import MegatronAdapter
    from infrarsi.estimate.megatron import from_step, launch_argv, run_step

    argv, world, _ = launch_argv(contract, {**contract.baseline, **setting}, adapter=MegatronAdapter())
    argv = _override(argv, extra)
    out = run_step({"argv": argv, "world": world, "ranks": "auto"})
    return from_step(out, contract, argv=argv, world=world)


def pairs_right(est: list[float], meas: list[float], tie: float = 0.02) -> tuple[int, int]:
    right = total = 0
    for i, j in itertools.combinations(range(len(est)), 2):
        if abs(meas[i] - meas[j]) <= tie * max(meas[i], meas[j]):
            continue
        total += 1
        right += (est[i] - est[j]) * (meas[i] - meas[j]) > 0
    return right, total


def _measure_all(rows, cache_path: Path, fresh: bool) -> dict:
    cache = {} if fresh else _cache(cache_path)
    for name, path, procs, setting, *extra in rows:
        if name not in cache:
            print(f"  measuring {name} ...", flush=True)
            cache[name] = measured(contract_for(path, procs), setting, extra[0] if extra else [])
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1))
    return cache


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


def run_calibrate(args) -> int:
    """The CPU constants of overhead.py: per gloo group, measured directly (GROUP_PROBE); then least squares over the
    dense CALIBRATE runs: measured peak - tracked - per_group x groups = base + fragmentation x transient; then,
    over the MoE runs, what is left per local expert (MoE layers x experts / EP on the rank: oneDNN kernels and
    heap chunks for the experts' token counts, which change every step)."""
    import numpy as np

    cache = _measure_all(CALIBRATE, Path(args.cache).with_name("calibrate.json"), args.fresh)
    per_group = per_group_bytes()
    print(f"  one gloo process group: {per_group / MiB:.2f} MiB of data segment", flush=True)
    dense, moe = [], []
    for name, path, procs, setting, extra in CALIBRATE:
        e = estimated(contract_for(path, procs), setting, extra)
        m = cache[name]["ranks"]
        for r in e.per_rank:
            if str(r["rank"]) not in m:
                continue
            tracked = sum(r["tracked"].values())
            transient = r["tracked"].get("Activation", 0) + r["tracked"].get("Temp", 0)
            row = ([1.0, transient], m[str(r["rank"])] - tracked - per_group * r["process_groups"], r["local_experts"])
            (moe if r["local_experts"] else dense).append(row)
            print(f"  {name} rank {r['rank']}: measured {m[str(r['rank'])] / MiB:.0f} MiB, "
                  f"tracked {tracked / MiB:.1f}, "
                  f"groups {r['process_groups']}, transient {transient / MiB:.1f} MiB, local experts "
                  f"{r['local_experts']}", flush=True)
    xs, ys = np.array([x for x, _, _ in dense]), np.array([y for _, y, _ in dense])
    coef, *_ = np.linalg.lstsq(xs, ys, rcond=None)
    base, frag = coef
    per_expert = sum(y - coef @ np.array(x) for x, y, _ in moe) / max(1, sum(n for *_, n in moe))
    print(f"base {base / MiB:.1f} MiB, per process group {per_group / MiB:.2f} MiB, fragmentation {frag:.3f} per byte "
          f"of activations + temporaries (least squares over {len(dense)} dense ranks); per local expert "
          f"{per_expert / MiB:.2f} MiB (over {len(moe)} MoE ranks)")
    for x, y, n in dense + moe:
        print(f"  unseen beyond the groups: measured {y / MiB:7.1f} MiB, fitted "
              f"{(coef @ np.array(x) + per_expert * n) / MiB:7.1f} MiB")
    return 0


def run_small(args) -> int:
    rows_in = [r for r in SMALL if not args.only or args.only in r[0]]
    cache = _measure_all(rows_in, Path(args.cache), args.fresh)
    rows = []
    for name, path, procs, setting in rows_in:
        e = estimated(contract_for(path, procs), setting, [])
        m = max(cache[name]["ranks"].values())
        rows.append((name, m, e))
    print("\n| setting | ranks | measured MiB (busiest rank) | estimate MiB | error | tracked: weights / grads / "
          "optim / act / temp MiB | outside tensors MiB | estimate s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    errs = []
    for name, m, e in rows:
        c = e.by_category()
        err = e.peak_bytes / m - 1
        errs.append(err)
        print(f"| {name} | {e.world_size} | {m / MiB:.0f} | {e.peak_bytes / MiB:.0f} | {err:+.1%} | "
              f"{c['parameters'] / MiB:.0f} / {c['gradients'] / MiB:.0f} / {c['optimizer'] / MiB:.0f} / "
              f"{c['activations'] / MiB:.0f} / {c['temporaries'] / MiB:.0f} | {e.unseen_bytes / MiB:.0f} | "
              f"{e.wall_s:.1f} |")
    r, t = pairs_right([e.peak_bytes for _, _, e in rows], [m for _, m, _ in rows])
    within = sum(abs(x) <= 0.10 for x in errs)
    print(f"\n{len(rows)} settings: {within} within 10%; median |error| {statistics.median(map(abs, errs)):.1%}, "
          f"max {max(map(abs, errs)):.1%}; rank order right in {r}/{t} pairs ({r / max(t, 1):.1%})")
    return 0


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
    from infrarsi.estimate.megatron import launch_argv
    from infrarsi.estimate.megatron_formula import theoretical_memory
    from infrarsi.workloads.megatron_model import parse

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
    p.add_argument("--small", action="store_true")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
