"""Benchmark: which torchtitan 0.2.2 settings beat torchtitan's defaults on this CPU, and at what memory.

Runs the job of ``contracts/torchtitan-cpu.toml`` (llama3 debugmodel, 2 ranks, global batch 16 x seq 512)
through the torchtitan adapter, the runner and the local executor -- exactly as ``infrarsi run`` does,
under the contract's memory cap -- for each setting below, interleaved with the baseline (B S1 B S2 B
...), so each setting is compared with the baseline runs just before and after it (slow drifts of a
shared machine cancel). Prints one row per setting: step time (median of the contract's window), its
ratio to the neighbouring baselines, the peak data segment per rank, the status, and the step-1 and
last losses.

    .venv/bin/python scripts/bench_torchtitan_cpu.py                 # every setting, once each
    .venv/bin/python scripts/bench_torchtitan_cpu.py --only ac_none ac_none_lb4 --repeats 2

The load of the machine (1-minute load average, before and after) is printed with the table: on a
shared 2-core machine it decides how much the figures can be trusted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infrarsi.adapters.torchtitan import TorchtitanAdapter  # noqa: E402
from infrarsi.contract.model import load_contract  # noqa: E402
from infrarsi.execute import make_executor  # noqa: E402
from infrarsi.execute.record import RunRecord  # noqa: E402
from infrarsi.execute.runner import Runner  # noqa: E402

SETTINGS: dict[str, dict] = {
    "ac_none": {"recompute_granularity": "none"},
    "ac_none_lb4": {"recompute_granularity": "none", "micro_batch_size": 4},
    "ac_full": {"recompute_granularity": "full"},
    "lb4": {"micro_batch_size": 4},
    "fp32_params": {"bf16": False},
    "compile": {"torch_compile": True},
    "ddp": {"data_parallel_replicate": 2},
    "tp2": {"tensor_parallel": 2, "data_parallel": 1, "sequence_parallel": True},
    "threads2": {"intra_op_threads": 2},
    "ac_none_fp32": {"recompute_granularity": "none", "bf16": False},
    "ac_none_ddp": {"recompute_granularity": "none", "data_parallel_replicate": 2},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contract", default=str(ROOT / "contracts" / "torchtitan-cpu.toml"))
    ap.add_argument("--only", nargs="*", choices=sorted(SETTINGS), help="settings to run (default: all)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each setting (each between two baselines)")
    args = ap.parse_args()
    os.chdir(ROOT)  # the job file's paths are relative to the repository root
    c = load_contract(args.contract)
    base = dict(c.baseline)
    names = args.only or list(SETTINGS)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            Runner(RunRecord(Path(tmp) / "run"), make_executor(),
                   TorchtitanAdapter(base_dir=Path(args.contract).resolve().parent), c) as r:
        prev = r.submit(base).result()
        baselines = [prev]
        for name in names:
            for _ in range(args.repeats):
                t = r.submit({**base, **SETTINGS[name]}).result()
                nxt = r.submit(base).result()
                baselines.append(nxt)
                around = [b.metrics.step_time_s for b in (prev, nxt) if b.metrics.step_time_s]
                rows.append((name, t, statistics.mean(around) if around else None))
                print(f"  {name}: {t.status.value} {t.metrics.step_time_s or float('nan'):.3f} s/step "
                      f"(baselines around it {', '.join(f'{a:.3f}' for a in around)})", file=sys.stderr, flush=True)
                prev = nxt
    load1 = os.getloadavg()[0]
    cap = c.hardware.memory_capacity_gib
    print(f"torchtitan 0.2.2 on this CPU: {c.name}, cap {cap:.2f} GiB per rank, {len(rows)} settings runs + "
          f"{len(baselines)} baseline runs in {time.monotonic() - t0:.0f} s; load average {load0:.1f} -> {load1:.1f} "
          f"on {os.cpu_count()} cores")
    bt = [b.metrics.step_time_s for b in baselines if b.metrics.step_time_s]
    bm = max((b.metrics.peak_memory_bytes or 0) for b in baselines) / 2**30
    print(f"baseline (the job file: FSDP 2, local batch 8, selective AC, bf16, 1 thread): median "
          f"{statistics.median(bt):.3f} s/step over {len(bt)} runs (min {min(bt):.3f}, max {max(bt):.3f}), "
          f"peak {bm:.2f} GiB")
    print(f"{'setting':<14} {'status':<8} {'s/step':>7} {'vs base':>8} {'peak GiB':>9} {'loss 1':>8} {'loss N':>8}")
    for name, t, around in rows:
        st = t.metrics.step_time_s
        ratio = f"{around / st:.2f}x" if st and around else "-"
        mem = f"{t.metrics.peak_memory_bytes / 2**30:.2f}" if t.metrics.peak_memory_bytes else "-"
        l1 = f"{t.metrics.losses[0]:.4f}" if t.metrics.losses else "-"
        ln = f"{t.metrics.losses[-1]:.4f}" if t.metrics.losses else "-"
        print(f"{name:<14} {t.status.value:<8} {st or float('nan'):>7.3f} {ratio:>8} {mem:>9} {l1:>8} {ln:>8}"
              + (f"  {t.reason[:70]}" if t.reason else ""))


if __name__ == "__main__":
    main()
