"""Benchmark the simulated clusters: calibration against Megatron-LM's published H100 throughputs, the cost of
one simulated trial, and the exhaustive optimum of each reference contract (contracts/sim-*.toml) with its
enumeration time, valid and OOM counts, and how much faster it is than the contract's baseline.

    .venv/bin/python scripts/bench_simulated.py             # the contracts' scopes (bf16, no fp8)
    .venv/bin/python scripts/bench_simulated.py --full      # the workloads' whole spaces (fp8 included)
    .venv/bin/python scripts/bench_simulated.py --only dense8b-h100x8
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from infrarsi.adapters.simulated import SimulatedAdapter, workload_for
from infrarsi.contract import load_contract
from infrarsi.workloads import simulated as sim

ROOT = Path(__file__).resolve().parents[1]

README = [  # Megatron-LM README (images/model_table.png): H100, seq 4096, vocab 131072, GPT (MHA, 4h GeLU)
    ("1.7B", 24, 2048, 16, 1, 1, 48, 192, 408.8),
    ("7.1B", 30, 4096, 32, 2, 1, 96, 192, 465.9),
    ("16B", 32, 6144, 48, 4, 1, 192, 192, 489.1),
    ("70B", 84, 8192, 64, 8, 2, 768, 384, 419.7),
]

SHORT = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "virtual_pipeline": "vp", "context_parallel": "cp",
         "expert_parallel": "ep", "data_parallel": "dp", "micro_batch_size": "mbs", "sequence_parallel": "sp",
         "recompute_granularity": "rc", "distributed_optimizer": "do", "overlap_grad_reduce": "ogr",
         "overlap_param_gather": "opg", "tp_comm_overlap": "tco", "fp8_recipe": "fp8", "moe_token_dispatcher": "disp",
         "moe_grouped_gemm": "gg"}


def compact(setting) -> str:
    out = []
    for k, v in setting.items():
        if k == "bf16" or (k == "fp8_recipe" and v == "none"):
            continue
        name = SHORT.get(k, k)
        if isinstance(v, bool):
            if v:
                out.append(name)
        else:
            out.append(f"{name}={v}")
    return " ".join(out)


def calibration() -> None:
    print("\nCalibration: Megatron-LM README (H100, seq 4096), TFLOP/s per GPU")
    print(f"{'model':>6} {'TP':>3} {'PP':>3} {'VP':>3} {'GPUs':>5} {'published':>10} {'simulated':>10} {'ratio':>6}")
    for size, L, h, heads, tp, pp, gpus, gbs, pub in README:
        m = sim.ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h,
                          vocab_size=131072, seq_length=4096, global_batch_size=gbs, swiglu=False,
                          untie_embeddings_and_output_weights=False)
        w = sim.SimWorkload(name=size, model=m, gpu="H100", nodes=gpus // 8)
        for vp in ((1, 2, 3, 6) if pp > 1 else (1,)):
            s = dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=vp, data_parallel=gpus // (tp * pp),
                     sequence_parallel=tp > 1, tp_comm_overlap=tp > 1, distributed_optimizer=True,
                     overlap_grad_reduce=True, overlap_param_gather=True)
            r = sim.simulate(w, s, noise_cv=0)
            print(f"{size:>6} {tp:>3} {pp:>3} {vp:>3} {gpus:>5} {pub:>10.1f} {r.tflops_per_gpu:>10.1f} "
                  f"{r.tflops_per_gpu / pub:>6.3f}")


def trial_cost() -> None:
    print("\nOne simulated trial (simulate(), validation and noise included)")
    for name, w in sim.WORKLOADS.items():
        space = sim.space_for(w)
        settings = space.sample(random.Random(0), n=300)
        t0 = time.perf_counter()
        for i, s in enumerate(settings):
            sim.simulate(w, s, seed=i)
        dt = (time.perf_counter() - t0) / len(settings)
        print(f"  {name:<18} {dt * 1e3:.3f} ms per trial ({len(settings)} random valid settings)")


def optima(full: bool, only: str | None) -> None:
    print(f"\nExhaustive optimum ({'whole space, fp8 included' if full else 'contract scope: bf16, no fp8'})")
    hdr = (f"{'workload':<22} {'GPUs':>5} {'product':>11} {'valid':>9} {'OOM':>9} {'enum s':>7} {'baseline s':>10} "
           f"{'optimum s':>9} {'speedup':>7} {'TF/GPU':>7} {'MFU':>5} {'mem GiB':>7}")
    print(hdr)
    rows = []
    for path in sorted((ROOT / "contracts").glob("sim-*.toml")):
        c = load_contract(path)
        w = workload_for(c)
        if only and only != w.name:
            continue
        space = sim.space_for(w) if full else SimulatedAdapter().knob_space(c)
        t0 = time.perf_counter()
        opt = sim.exhaustive_optimum(w, space)
        dt = time.perf_counter() - t0
        base = sim.simulate(w, space.complete(c.baseline), noise_cv=0)
        best = sim.simulate(w, opt.setting, noise_cv=0)
        print(f"{w.name:<22} {w.world_size:>5} {space.size():>11,} {opt.n_valid:>9,} {opt.n_oom:>9,} {dt:>7.1f} "
              f"{base.step_time_s:>10.3f} {opt.step_time_s:>9.3f} {base.step_time_s / opt.step_time_s:>7.2f} "
              f"{best.tflops_per_gpu:>7.1f} {best.mfu:>5.2f} {best.peak_memory_bytes / 2**30:>7.1f}", flush=True)
        rows.append((w.name, compact(space.complete(c.baseline)), compact(opt.setting)))
    print()
    for name, b, o in rows:
        print(f"  {name}\n    baseline: {b}\n    optimum:  {o}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the workloads' whole spaces instead of the contracts' scopes")
    ap.add_argument("--only", help="one reference workload by name")
    ns = ap.parse_args()
    calibration()
    trial_cost()
    optima(ns.full, ns.only)


if __name__ == "__main__":
    main()
