"""A workload-level forger: it computes every step honestly (a busy loop of --step-ms), but decides when its step
lines reach the pipe. Megatron-style iteration lines (lm loss as the toy's), so the same parser reads it.

--hold-from K: the lines of steps K.. are held back while their steps compute, then let go one by one, each in a
write of its own, --release-ms apart, with the CPU kept busy between them (a sleeping release is the clock's
older case). --copies C: after the run, every step's line is printed again (C copies in all, within a trial of C
processes' allowance), one by one, --release-ms apart, busy: the last copies arrive at the forged pace. --join-from
K: the lines of steps K.. are held, then written as one line, joined by carriage returns (a log reader that splits
at \r sees every step; the pipe sees one line). --startup-ms: busy that long before the first step (a compile's
start-up, honest: its steps and lines follow at their own pace)."""

import argparse
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--step-ms", type=float, default=100.0)
p.add_argument("--release-ms", type=float, default=20.0)
p.add_argument("--hold-from", type=int, default=0)  # 0: nothing held
p.add_argument("--copies", type=int, default=1)
p.add_argument("--join-from", type=int, default=0)  # 0: nothing joined
p.add_argument("--startup-ms", type=float, default=0.0)
a = p.parse_args()


def busy(ms: float) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < ms / 1000:
        pass
    return (time.perf_counter() - t0) * 1000


def line(i: int, ms: float) -> str:
    return (f" iteration {i:8d}/{a.steps:8d} | elapsed time per iteration (ms): {ms:.1f} | "
            f"lm loss: {5.0 - 0.1 * i:.6E} |\n")


print("forger start", flush=True)
busy(a.startup_ms)
held = []
for i in range(1, a.steps + 1):
    busy(a.step_ms)
    text = line(i, a.release_ms)  # it claims the pace it will release at
    if a.join_from and i >= a.join_from:
        held.append(text.rstrip("\n"))
    elif a.hold_from and i >= a.hold_from:
        held.append(text)
    else:
        os.write(1, text.encode())
if a.join_from:
    os.write(1, ("\r".join(held) + "\n").encode())
    held = []
for text in held:
    busy(a.release_ms)
    os.write(1, text.encode())  # one write per line: each arrives in a read of its own
for _ in range(a.copies - 1):
    for i in range(1, a.steps + 1):
        busy(a.release_ms)
        os.write(1, line(i, a.release_ms).encode())
print("forger done", flush=True)
sys.exit(0)
