"""The shipped candidates drop into the embedded training workload without changing what it computes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from infrarsi.kernels import verdicts
from infrarsi.kernels.loader import KERNELS_ROOT, sha256_of

TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--vocab-size", "128", "--global-batch-size", "2", "--micro-batch-size", "2", "--train-iters", "3"]
CANDIDATES = {"rmsnorm": "triton_rows16.py", "swiglu": "triton_b1024.py", "rope": "triton_rows16.py",
              "cross_entropy": "triton_v4096.py", "add_rmsnorm": "triton_rows16.py"}


def _losses(extra: list[str], env_extra: dict | None = None) -> list[float]:
    env = {**os.environ, "TRITON_INTERPRET": "1", **(env_extra or {})}
    out = subprocess.run([sys.executable, "-m", "infrarsi.workloads.minigpt", *TINY, *extra], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"lm loss: ([0-9.Ee+-]+)", out.stdout + out.stderr)]
    assert len(losses) == 3, out.stdout[-2000:]
    return losses


def test_all_five_candidates_keep_the_loss_trace(tmp_path):
    """Pinned to the verdicts of a run (same bytes: they run) and spot-checked on every call."""
    ref = _losses([])
    paths = {op: KERNELS_ROOT / op / name for op, name in CANDIDATES.items()}
    f = verdicts.record(tmp_path, {str(p): {"op": op, "verdict": "pass", "sha256": sha256_of(p)} for op, p in paths.items()})
    flags = [f for op, p in paths.items() for f in ("--kernel", f"{op}={p}")]
    got = _losses(flags, {verdicts.ENV: str(f), "INFRARSI_SPOT_EVERY": "1"})
    assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(got, ref)), (got, ref)
