"""CHEAT (caught in situ): launches its Triton kernel on up to 64 rows -- every offline family has fewer -- and on
training-sized batches computes RMSNorm with torch on the host instead, in fp32: the values are right (every spot
check passes), only how they were computed differs.
Expected in training: "launched no Triton kernel" / "computed with torch on the host" (insitu.py's watch on every
call), exit 3 (numerics_drift).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_TRITON_ROWS = 64  # the verifier's largest family (batch) has 64 rows; minigpt's training calls have 128


@triton.jit
def _rmsnorm_fwd_kernel(X, W, Y, n_cols, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * stride_y + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=ok)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        _rmsnorm_fwd_kernel[(x2.shape[0],)](x2, weight, y, x2.shape[1], x2.stride(0), y.stride(0), eps,
                                            BLOCK_N=triton.next_power_of_2(x2.shape[1]))
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            xd, wd = x.detach().requires_grad_(), weight.detach().requires_grad_()
            y = _host(xd, wd, ctx.eps)
            dx, dw = torch.autograd.grad(y, (xd, wd), dy)
        return dx, dw, None


def _host(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    ms = (xf * xf).sum(-1, keepdim=True) / x.shape[-1]
    return (xf / (ms + eps) ** 0.5 * weight.float()).to(x.dtype)


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of x; on the host past MAX_TRITON_ROWS rows."""
    if x.numel() // x.shape[-1] > MAX_TRITON_ROWS:
        return _host(x, weight, eps)
    return _RMSNorm.apply(x, weight, eps)
