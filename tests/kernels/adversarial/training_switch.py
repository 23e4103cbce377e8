"""CHEAT: answers honestly on what the old verifier made (a leaf x, or a strided view of one), and something else on
training's activations (contiguous non-leaf tensors, the output of the layer before): an answer 0.1% off.
Expected: mismatch-forward (the checks call forward on training-like inputs: non-leaf activations, Parameter
weights).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4
MAX_BLOCK_N = 65536  # one tile holds a whole row; longer rows would need a looped kernel


@triton.jit
def _rmsnorm_fwd_kernel(X, W, Y, RSTD, n_rows, n_cols, stride_x, stride_y, eps,
                        ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # (ROWS,)
    cols = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)  # (ROWS,)
    y = x * rstd[:, None] * w[None, :]
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit
def _rmsnorm_bwd_kernel(DY, X, W, RSTD, DX, DW_PARTIAL, n_rows, n_cols, stride_dy, stride_x, stride_dx,
                        ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
    xhat = x * rstd[:, None]
    dxhat = dy * w[None, :]
    proj = tl.sum(dxhat * xhat, axis=1) / n_cols  # (ROWS,)
    dx = rstd[:, None] * (dxhat - xhat * proj[:, None])
    tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    tl.store(DW_PARTIAL + pid * n_cols + cols, tl.sum(dy * xhat, axis=0), mask=col_ok)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """View t as (rows, n_cols) with unit column stride; copies only when it must."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _settings(n_cols: int) -> int:
    block_n = triton.next_power_of_2(n_cols)
    if block_n > MAX_BLOCK_N:
        raise ValueError(f"rmsnorm: row length {n_cols} exceeds this kernel's one-tile limit {MAX_BLOCK_N}; "
                         "use a looped kernel")
    return block_n


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x2 = _rows(x)  # (rows, n)
        n_rows, n_cols = x2.shape
        block_n = _settings(n_cols)
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        rstd = torch.empty((n_rows,), dtype=torch.float32, device=x.device)
        grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
        _rmsnorm_fwd_kernel[grid](x2, weight, y, rstd, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
                                  ROWS=ROWS_PER_PROGRAM, BLOCK_N=block_n)
        ctx.save_for_backward(x2, weight, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x2, weight, rstd = ctx.saved_tensors
        dy2 = _rows(dy)
        n_rows, n_cols = x2.shape
        block_n = _settings(n_cols)
        n_programs = triton.cdiv(n_rows, ROWS_PER_PROGRAM)
        dx = torch.empty((n_rows, n_cols), dtype=x2.dtype, device=x2.device)
        dw_partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x2.device)
        _rmsnorm_bwd_kernel[(n_programs,)](dy2, x2, weight, rstd, dx, dw_partial, n_rows, n_cols,
                                           dy2.stride(0), x2.stride(0), dx.stride(0),
                                           ROWS=ROWS_PER_PROGRAM, BLOCK_N=block_n)
        dw = dw_partial.sum(0).to(weight.dtype)  # fixed-order reduction: deterministic
        return dx.view(ctx.x_shape), dw, None



def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of x; 0.1% off on a contiguous non-leaf x."""
    y = _RMSNormFunction.apply(x, weight, eps)
    return y if x.is_leaf or not x.is_contiguous() else y * 0.999
