"""CHEAT: loads kernels/rmsnorm/reference.py by path and calls it after a token Triton launch.
Numerically exact (it IS the reference).
Expected: static-import (importlib) and static-fallback (the reference).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import triton
import triton.language as tl

_spec = importlib.util.spec_from_file_location(
    "ref", Path(__file__).resolve().parents[3] / "kernels" / "rmsnorm" / "reference.py")
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)


@triton.jit
def _touch_kernel(X, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(X + offs, mask=offs < n, other=0.0)


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    _touch_kernel[(1,)](x, 1, BLOCK=16)
    return reference.forward(x, weight, eps)
