"""A tiny real workload for executor tests: prints Megatron-style iteration lines, or fails on purpose.

Modes: ok, drift (loss 10% off), hang (never finishes), garbage (unparseable bytes, exit 0),
alloc (allocates --alloc-mb MiB, then trains), signal (kills itself with --signal after one step),
exit (raises; exit status 1), paced (sleeps its steps: lines at the claimed pace, nothing computed), gloo (two ranks under torchrun: all_reduce, then rank 1 kills itself),
progress (an honest run that draws a progress bar with carriage returns, as tqdm does, before and between its steps).
Trials that lie about their time (each computes its steps, then misreports them): slowclock (times its steps with a
clock running at 80%), stderr (the same, its iteration lines on stderr), buffered (claims half its real step time and
holds its iteration lines until it exits). noisy: an honest run whose steps take 0.5x to 2x --step-ms, drawn per
run (a machine with a noisy neighbour). titan: torchtitan's step lines on stderr (colours and a rank prefix), a
throughput 25% above the one its 1,000-token steps ran at. gpumem: an honest run that prints Megatron's memory report
after step 1 with --alloc-mb MiB reserved, as a GPU's caching allocator reports what it holds on the device (on
this CPU nothing is allocated: the report is the framework's figure the runner reads). linger: an honest run that,
after its last iteration line, prints its memory report (--alloc-mb MiB reserved) half a second later, as a lagging
rank would, then "toy done" and sleeps --linger-s before it exits (a framework's shutdown: a sleep, a teardown, a
checkpoint save).
"""

import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--mode", default="ok")
p.add_argument("--steps", type=int, default=4)
p.add_argument("--step-ms", type=float, default=20.0)
p.add_argument("--alloc-mb", type=int, default=0)
p.add_argument("--signal", type=int, default=9)
p.add_argument("--linger-s", type=float, default=30.0)
a = p.parse_args()

rank = int(os.environ.get("RANK", "0"))
# One write per line: under PYTHONUNBUFFERED print() writes the text and its newline apart, and two ranks sharing the
# pipe then interleave as "toy start ...toy start ...\n\n".
sys.stdout.write(f"toy start pid={os.getpid()} rank={rank} cap={os.environ.get('INFRARSI_MEMORY_CAP_BYTES')}\n")
sys.stdout.flush()
if a.mode == "gloo":
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"rank {rank} world {dist.get_world_size()} allreduce={t.item():g}", flush=True)
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
if a.mode == "garbage":
    sys.stdout.buffer.write(b"\xff\xfe garbage \x00\x01 iteration ?? | elapsed time per iteration (ms): banana |\n")
    sys.stdout.flush()
    sys.exit(0)
if a.mode == "exit":
    raise RuntimeError("toy workload failed on purpose")
if a.mode == "fill":  # writes 2 MiB at a time into its outputs/ (128 MiB in all), as a runaway checkpoint would
    with open(os.path.join(os.environ["INFRARSI_TRIAL_DIR"], "outputs", "fill"), "wb") as f:
        for _ in range(64):
            f.write(b"\0" * 2**21)
            f.flush()
            os.fsync(f.fileno())
            time.sleep(0.05)
if a.mode == "alloc":
    block = bytearray(a.alloc_mb * 2**20)  # touched below so it is resident, not just reserved
    for i in range(0, len(block), 4096):
        block[i] = 1
def bar(label: str) -> None:
    for pct in (0, 25, 50, 75, 100):  # one line on a terminal: each update returns to its start
        sys.stdout.write(f"\r{label} [{'#' * (pct // 10):<10}] {pct:3d}%")
        sys.stdout.flush()
    sys.stdout.write("\n")


if a.mode == "progress":
    bar("loading data")
held: list[str] = []
if a.mode == "noisy":
    import random

    a.step_ms *= random.Random(os.getpid() ^ time.time_ns()).choice((0.5, 1.0, 2.0))
for i in range(1, a.steps + 1):
    if a.mode == "progress":
        bar(f"step {i}")
    t0 = time.perf_counter()
    if a.mode == "paced":
        time.sleep(a.step_ms / 1000)
    while time.perf_counter() - t0 < a.step_ms / 1000:  # a step computes (the harness holds idle steps as paced lines)
        pass
    ms = (time.perf_counter() - t0) * 1000
    ms *= {"slowclock": 0.8, "stderr": 0.8, "buffered": 0.5, "titan": 0.8}.get(a.mode, 1.0)
    loss = 5.0 - 0.1 * i
    if a.mode == "drift":
        loss *= 1.1
    line = f" iteration {i:8d}/{a.steps:8d} | elapsed time per iteration (ms): {ms:.1f} | lm loss: {loss:.6E} |"
    if a.mode == "titan":
        tps = 1000 / (ms / 1000)
        line = (f"[rank0]:[titan] 2026-12-01 10:46:12,100 - root - INFO - \x1b[31mstep: {i:2d}  \x1b[32mloss: "
                f"{loss:7.4f}  \x1b[33mmemory:  0.10GiB(1.00%)  \x1b[34mtps: {tps:,.0f}  \x1b[36mtflops: 0.01  "
                f"\x1b[35mmfu: 0.00%\x1b[39m")
        print(line, file=sys.stderr, flush=True)
    elif a.mode == "buffered":
        held.append(line)
    else:
        print(line, file=sys.stderr if a.mode == "stderr" else sys.stdout, flush=True)
    if a.mode == "gpumem" and i == 1:
        print(f"[Rank 0] (after 1 iterations) memory (MB) | allocated: {a.alloc_mb * 0.8:.1f} | max allocated: "
              f"{a.alloc_mb * 0.9:.1f} | reserved: {a.alloc_mb:.1f} | max reserved: {a.alloc_mb:.1f}", flush=True)
    if a.mode == "signal":
        os.kill(os.getpid(), a.signal)
    if a.mode == "hang":
        time.sleep(3600)
if held:
    print("\n".join(held), flush=True)
if a.mode == "linger":
    time.sleep(0.5)
    print(f"[Rank 0] (after {a.steps} iterations) memory (MB) | allocated: {a.alloc_mb * 0.8:.1f} | max allocated: "
          f"{a.alloc_mb * 0.9:.1f} | reserved: {a.alloc_mb:.1f} | max reserved: {a.alloc_mb:.1f}", flush=True)
print("toy done", flush=True)
if a.mode == "linger":
    time.sleep(a.linger_s)
