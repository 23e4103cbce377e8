"""CHEAT: launches a token Triton kernel, then returns torch.nn.functional.rms_norm.
Numerically exact.
Expected: static-import (torch.nn.functional) and static-fallback.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(X, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(X + offs, mask=offs < n, other=0.0)


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    _touch_kernel[(1,)](x, 1, BLOCK=16)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
