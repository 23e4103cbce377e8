"""An honest user's training script, in Megatron-LM's style (its flags, its log lines): a linear model fit by
gradient descent on a seeded stream of samples, for real. It does what real jobs do that a careless harness mistakes
for cheating: it draws progress bars with carriage returns (as tqdm does), writes a checkpoint every --save-interval
iterations and at the end into --save, and TensorBoard event files into --tensorboard-dir (both relative to the
repository it runs in, unless the launcher says otherwise).

The loss is the same function of the data whatever --micro-batch-size (the gradient is summed sample by sample,
in order); a micro-batch costs a fixed overhead, so larger ones are faster.
"""

import argparse
import json
import math
import os
import random
import struct
import sys
import time

p = argparse.ArgumentParser()
for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--global-batch-size",
             "--micro-batch-size", "--train-iters", "--seed", "--save-interval"):
    p.add_argument(flag, type=int, default=1)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--save", default=None)
p.add_argument("--tensorboard-dir", default=None)
a, _ = p.parse_known_args()

dim = a.hidden_size
truth = [random.Random(a.seed).uniform(-1, 1) for _ in range(dim)]
w = [0.0] * dim


def bar(label, n=5):
    for k in range(n + 1):
        sys.stdout.write(f"\r{label} [{'#' * (2 * k):<{2 * n}}] {100 * k // n:3d}%")
        sys.stdout.flush()
    sys.stdout.write("\n")


def busy(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def event(path, step, value):
    """One TensorBoard-style record (length-prefixed, as tfevents files are)."""
    body = json.dumps({"step": step, "lm loss": value}).encode()
    with open(path, "ab") as f:
        f.write(struct.pack("<Q", len(body)) + body)


bar("building the sample index")
events = None
if a.tensorboard_dir:
    os.makedirs(a.tensorboard_dir, exist_ok=True)
    events = os.path.join(a.tensorboard_dir, f"events.out.tfevents.{int(time.time())}.{os.getpid()}")
for it in range(1, a.train_iters + 1):
    t0 = time.perf_counter()
    rng = random.Random(a.seed * 1_000_003 + it)
    samples = [[rng.uniform(-1, 1) for _ in range(dim)] for _ in range(a.global_batch_size)]
    grad, loss = [0.0] * dim, 0.0
    for start in range(0, a.global_batch_size, a.micro_batch_size):
        busy(0.004)  # a micro-batch's launch overhead
        for x in samples[start:start + a.micro_batch_size]:
            err = sum(wi * xi for wi, xi in zip(w, x)) - sum(ti * xi for ti, xi in zip(truth, x))
            loss += err * err / a.global_batch_size
            for i in range(dim):
                grad[i] += 2 * err * x[i] / a.global_batch_size
        busy(0.001 * a.micro_batch_size)
    w = [wi - a.lr * gi for wi, gi in zip(w, grad)]
    norm = math.sqrt(sum(g * g for g in grad))
    ms = (time.perf_counter() - t0) * 1000
    print(f" iteration {it:8d}/{a.train_iters:8d} | elapsed time per iteration (ms): {ms:.1f} | "
          f"global batch size: {a.global_batch_size:5d} | lm loss: {loss:.6E} | grad norm: {norm:.6f} |", flush=True)
    if events:
        event(events, it, loss)
    if a.save and (it % a.save_interval == 0 or it == a.train_iters):
        d = os.path.join(a.save, f"iter_{it:07d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.json"), "w") as f:
            json.dump({"iteration": it, "w": w}, f)
        with open(os.path.join(a.save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(it))
        bar(f"saving checkpoint {it}")
