"""Static checks on candidate source: each cheat pattern is named, a clean kernel file passes."""

from __future__ import annotations

import pytest

from infrarsi.kernels.static import static_check

CLEAN = '''
import torch
import triton
import triton.language as tl

@triton.jit
def _k(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.exp(tl.load(X + offs, mask=offs < n)), mask=offs < n)

def forward(x):
    y = torch.empty_like(x)
    _k[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y
'''


def codes(src: str) -> set[str]:
    return {r.split(":", 1)[0] for r in static_check(src)}


def test_clean_candidate_passes():
    assert static_check(CLEAN) == []


@pytest.mark.parametrize("extra, code", [
    ("import time\ntime.perf_counter = lambda: 0.0\n", "static-patch"),
    ("torch.Tensor.sum = lambda *a: 0\n", "static-patch"),
    ("import triton.testing as tt\n", "static-import"),
    ("setattr(torch, 'rsqrt', None)\n", "static-call"),
    ("exec('y = 1')\n", "static-call"),
    ("import importlib\n", "static-import"),
    ("from . import reference\n", "static-import"),
    ("import numpy as np\n", "static-import"),
    ("def g(x):\n    try:\n        return forward(x)\n    except Exception:\n        return x\n", "static-try"),
    ("import contextlib\ndef g(x):\n    with contextlib.suppress(Exception):\n        return forward(x)\n",
     "static-try"),
    ("def g(x):\n    return torch.sigmoid(x)\n", "static-fallback"),
    ("def g(x):\n    return x.rsqrt()\n", "static-fallback"),
    ("import torch.nn.functional as F\ndef g(x):\n    return F.silu(x)\n", "static-fallback"),
])
def test_cheat_pattern_is_named(extra, code):
    assert code in codes(CLEAN + extra)


def test_torch_inside_a_kernel_body_is_named():
    # the CPU interpreter would run this as Python; no GPU compiler would accept it
    src = CLEAN.replace("tl.exp(tl.load(X + offs, mask=offs < n))", "torch.exp(tl.load(X + offs, mask=offs < n))")
    assert "static-kernel" in codes(src)


def test_kernel_math_is_not_host_math():
    # tl.exp inside the @triton.jit body is the kernel itself, not a fallback
    assert "static-fallback" not in codes(CLEAN)


def test_file_without_kernel_or_forward():
    assert codes("import torch\n") == {"static-no-kernel", "static-no-forward"}
    assert codes("def forward(:\n") == {"static-syntax"}
