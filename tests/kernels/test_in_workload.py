"""The shipped candidates drop into the embedded training workload without changing what it computes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from infrarsi.kernels import verdicts
from infrarsi.kernels.loader import KERNELS_ROOT, sha256_of

TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
        "--vocab-size", "128", "--global-batch-size", "2", "--micro-batch-size", "2", "--train-iters", "3"]
# one variant of each op's shipped file (FILE@VARIANT: the file's VARIANTS, kernels/loader.py)
CANDIDATES = {"rmsnorm": "triton_rows.py@rows16", "swiglu": "triton_tiles.py@b1024", "rope": "triton_rows.py@rows16",
              "cross_entropy": "triton_vocab.py@v4096", "add_rmsnorm": "triton_rows.py@rows16"}


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
    paths = {op: f"{KERNELS_ROOT / op / name}" for op, name in CANDIDATES.items()}  # PATH@VARIANT
    f = verdicts.record(tmp_path, {p: {"op": op, "verdict": "pass", "sha256": sha256_of(p)} for op, p in paths.items()})
    flags = [f for op, p in paths.items() for f in ("--kernel", f"{op}={p}")]
    got = _losses(flags, {verdicts.ENV: str(f), "INFRARSI_SPOT_EVERY": "1"})
    assert all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(got, ref)), (got, ref)


def _refused(kernel: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", **env_extra}
    return subprocess.run([sys.executable, "-m", "infrarsi.workloads.minigpt", *TINY, "--kernel", kernel],
                          capture_output=True, text=True, env=env, timeout=600)


def test_the_workload_runs_only_the_variant_that_was_verified(tmp_path):
    """--kernel rmsnorm=FILE@VARIANT: the verdict of @rows16 does not let @rows4 of the same file run, and a
    variant the file does not declare is one line naming it and the variants it has."""
    path = KERNELS_ROOT / "rmsnorm" / "triton_rows.py"
    f = verdicts.record(tmp_path, {f"{path}@rows16": {"op": "rmsnorm", "verdict": "pass", "sha256": sha256_of(path)}})
    pins = json.dumps(verdicts.pins_of(f))
    out = _refused(f"rmsnorm={path}@rows4", {verdicts.ENV: str(f), verdicts.PINS_ENV: pins})
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"{verdicts.REFUSED}: rmsnorm={path}@rows4 was not a verified candidate of this run" in out.stderr
    out = _refused(f"rmsnorm={path}@rows8", {verdicts.ENV: str(f), verdicts.PINS_ENV: pins})
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and "has no variant 'rows8'; use one of rows4, rows16" in last, out.stderr[-2000:]
