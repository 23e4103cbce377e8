"""Verify (and on a GPU, time) every shipped kernel candidate; print one table.

    .venv/bin/python scripts/bench_kernels.py              # all ops; fresh verification, no cache
    .venv/bin/python scripts/bench_kernels.py --op rope

Columns: verdict, verifier wall and CPU seconds (this process and the verifier's child process together;
the CPU Triton interpreter without a GPU), cases,
and on a GPU the median forward time of candidate / eager reference / torch.compile, the speedup,
and bandwidth as a fraction of the measured peak, with the suspect flags of `infrarsi kernels bench`.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton


def _cpu() -> float:
    """CPU seconds of this process plus its finished children (the verifier's child process)."""
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default=None, help="one op (default: all)")
    p.add_argument("--cached", action="store_true", help="reuse cached verdicts (default: verify afresh)")
    args = p.parse_args()
    if not args.cached:
        os.environ["INFRARSI_CACHE"] = tempfile.mkdtemp(prefix="infrarsi-bench-")

    from infrarsi.kernels import OPS, list_candidates
    from infrarsi.kernels.verify import verify
    from infrarsi.kernels.bench import bench, has_gpu

    gpu = has_gpu()
    header = f"{'op':14s} {'candidate':22s} {'verdict':7s} {'wall s':>7s} {'cpu s':>6s} {'cases':>5s}"
    if gpu:
        header += f" {'cand ms':>8s} {'eager ms':>8s} {'comp ms':>8s} {'speedup':>7s} {'%peak':>6s}  suspect"
    print(header)
    print("-" * len(header))
    for op in [args.op] if args.op else OPS:
        for cand in list_candidates(op):  # every variant of every shipped file: FILE@VARIANT
            t0, c0 = time.perf_counter(), _cpu()
            r = verify(cand)
            wall, cpu = time.perf_counter() - t0, _cpu() - c0
            line = f"{op:14s} {cand.name:22s} {r.verdict:7s} {wall:7.2f} {cpu:6.2f} {len(r.cases):5d}"
            if gpu and r.passed:
                b = bench(cand)
                comp = f"{b.compiled_ms:8.4f}" if b.compiled_ms else f"{'n/a':>8s}"
                line += (f" {b.candidate_ms:8.4f} {b.reference_ms:8.4f} {comp} {b.speedup_vs_reference:7.2f}"
                         f" {100 * b.fraction_of_peak:6.1f}  {'; '.join(b.rejected + b.suspect) or '-'}")
            print(line, flush=True)
            for reason in r.reasons[:3]:
                print(f"{'':16s}{reason[:150]}")
    if not gpu:
        print("no CUDA GPU: timing columns skipped (verification ran on the CPU Triton interpreter)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
