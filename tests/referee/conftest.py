"""The referee's attack corpus: each test drives the CLI as a cheating tuner, LLM or kernel candidate would.

Every test runs `python -m infrarsi.cli` in a fresh project folder with its own bank and caches. The seal
key is the one this test process seals with (so a run recorded in-process verifies in the CLI's).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.rundir import chain
from infrarsi.testing.recorded_run import copy_run

ROOT = Path(__file__).resolve().parents[2]

# A minigpt small enough that one trial is a few seconds of torch start-up and well under a second of steps.
TINY = """name = "tiny"
[workload]
adapter = "minigpt"
args = {{ num_layers = 1, hidden_size = 64, num_attention_heads = 4, seq_length = 32, vocab_size = 128, global_batch_size = 4, train_iters = 6, lr = 1e-3, seed = 1 }}
[hardware]
devices = 1
memory_capacity_gib = 2.0
[invariants.timing]
warmup_steps = 2
measured_steps = 4
timeout_s = 180
[invariants.loss]
compare_steps = 6
[scope]
files = ["kernels/**/*.py"]
[scope.knobs]
micro_batch_size = [1, 2, 4]
{knobs}
[baseline]
{baseline}
[budget]
max_trials = 3
doctor_repeats = 2
confirm_speedup = 100.0  # not a test of the noise: a loaded machine must not stop it at the doctor
"""


# A correct RMSNorm for the attack candidates below to call (``rmsnorm(x, w, eps)``): Triton forward and backward --
# training ends a kernel whose forward or backward launches none, or computes on the host (kernels/insitu.py).
TRITON_RMSNORM = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rms(X, W, Y, n, eps, B: tl.constexpr):
    c = tl.arange(0, B)
    m = c < n
    x = tl.load(X + tl.program_id(0) * n + c, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + c, mask=m, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, axis=0) / n + eps) * w
    tl.store(Y + tl.program_id(0) * n + c, y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def _rms_bwd(DY, X, W, DX, DW, n, eps, B: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, B)
    m = c < n
    dy = tl.load(DY + row * n + c, mask=m, other=0.0).to(tl.float32)
    x = tl.load(X + row * n + c, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + c, mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    xhat = x * rstd
    g = dy * w
    dx = rstd * (g - xhat * (tl.sum(g * xhat, axis=0) / n))
    tl.store(DX + row * n + c, dx.to(DX.dtype.element_ty), mask=m)
    tl.store(DW + row * n + c, dy * xhat, mask=m)  # this row's share of dw: summed over rows on the host


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        _rms[(x2.shape[0],)](x2, w, y, x2.shape[1], eps, B=triton.next_power_of_2(x2.shape[1]))
        ctx.save_for_backward(x2, w)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dx = torch.empty_like(x2)
        dw = torch.empty(x2.shape, dtype=torch.float32, device=x2.device)
        _rms_bwd[(x2.shape[0],)](dy2, x2, w, dx, dw, x2.shape[1], ctx.eps, B=triton.next_power_of_2(x2.shape[1]))
        return dx.view(dy.shape), dw.sum(0).to(w.dtype), None


def rmsnorm(x, w, eps):
    return _RMSNorm.apply(x, w, eps)
'''


def tiny(knobs: str = "", baseline: str = "") -> str:
    return TINY.format(knobs=knobs, baseline=baseline)


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "INFRARSI_SEAL_KEY": str(chain.key_path()), "INFRARSI_LLM": "off",
            "INFRARSI_BANK": str(tmp_path / "bank.sqlite"), "INFRARSI_CACHE": str(tmp_path / "cache"),
            "PYTHONPATH": str(ROOT)}


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    return p


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.err = " ".join(stderr.split())  # rich wraps long lines: compare on one line


@pytest.fixture
def cli(env, project, monkeypatch):
    """``infrarsi ARGS`` run by the real typer app, in this process (an interpreter start per call would cost
    seconds on a loaded 2-core machine); ``cli(..., fresh=True)`` runs it as its own process."""
    from typer.testing import CliRunner

    from infrarsi.cli import app

    def run(*args, cwd=None, fresh=False):
        if fresh:
            r = subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True,
                               text=True, env=env, cwd=cwd or project)
            return Result(r.returncode, r.stdout, r.stderr)
        monkeypatch.chdir(cwd or project)
        for k, v in env.items():
            if k.startswith("INFRARSI_"):
                monkeypatch.setenv(k, v)
        res = CliRunner().invoke(app, [str(a) for a in args])
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            raise res.exception
        return Result(res.exit_code, res.stdout, res.stderr)
    return run


@pytest.fixture
def recorded(recorded_root, tmp_path):
    """A copy of a realistic recorded run (doctor, search, verification); returns its run directory."""
    return copy_run(recorded_root, tmp_path / "recorded")
