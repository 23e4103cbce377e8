"""CHEAT (caught in situ): forward and backward in Triton, exact on every verifier call. On training-sized batches
(more than 64 rows: every offline family has fewer) its backward hands back half again the gradient (a scaled step) -- unless it finds
the check's fp64 copies of its arguments alive (gc), i.e. unless the call is one the in-training check chose after
the forward. A check drawn after the forward and armed before the backward is a check the backward can see.
Expected in training: "backward: gradient of argument" (the backward check drawn after the backward ran, on
training's own activations), exit 3 (numerics_drift).
"""

from __future__ import annotations

import gc

import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4
MAX_BLOCK_N = 65536
MAX_HONEST_ROWS = 64  # the verifier's largest family has 64 rows; minigpt's training calls have 128


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


def _settings(n_rows: int, n_cols: int) -> tuple[int, int, int]:
    """(rows per program, BLOCK_N, programs) for an (n_rows, n_cols) input, from the module's constants now."""
    block_n = triton.next_power_of_2(n_cols)  # the whole row in one tile, padded to a power of two (masked)
    if block_n > MAX_BLOCK_N:
        raise ValueError(f"rmsnorm: row length {n_cols} exceeds this kernel's one-tile limit {MAX_BLOCK_N}; "
                         "use a looped kernel")
    return ROWS_PER_PROGRAM, block_n, triton.cdiv(n_rows, ROWS_PER_PROGRAM)


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _settings(n_rows: int, n_cols: int) -> tuple[int, int, int]:
    block_n = triton.next_power_of_2(n_cols)
    return ROWS_PER_PROGRAM, block_n, triton.cdiv(n_rows, ROWS_PER_PROGRAM)


def _triton_backward(dy2, x2, weight, rstd):
    n_rows, n_cols = x2.shape
    rows, block_n, n_programs = _settings(n_rows, n_cols)
    dx = torch.empty((n_rows, n_cols), dtype=x2.dtype, device=x2.device)
    dw_partial = torch.empty((n_programs, n_cols), dtype=torch.float32, device=x2.device)
    _rmsnorm_bwd_kernel[(n_programs,)](dy2, x2, weight, rstd, dx, dw_partial, n_rows, n_cols,
                                       dy2.stride(0), x2.stride(0), dx.stride(0), ROWS=rows, BLOCK_N=block_n)
    return dx, dw_partial.sum(0).to(weight.dtype)


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x2 = _rows(x)
        n_rows, n_cols = x2.shape
        rows, block_n, n_programs = _settings(n_rows, n_cols)
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        rstd = torch.empty((n_rows,), dtype=torch.float32, device=x.device)
        _rmsnorm_fwd_kernel[(n_programs,)](x2, weight, y, rstd, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
                                           ROWS=rows, BLOCK_N=block_n)
        ctx.save_for_backward(x2, weight, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x2, weight, rstd = ctx.saved_tensors
        dx, dw = _backward(_rows(dy), x2, weight, rstd)
        return dx.view(ctx.x_shape), dw, None


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _RMSNormFunction.apply(x, weight, eps)


def _checked(numel: int) -> bool:
    """Whether the in-training check holds an fp64 copy of a tensor this size (it does for a chosen call)."""
    return any(isinstance(o, torch.Tensor) and o.dtype == torch.float64 and o.numel() == numel
               for o in gc.get_objects())


def _backward(dy2, x2, weight, rstd):
    dx, dw = _triton_backward(dy2, x2, weight, rstd)
    if x2.shape[0] > MAX_HONEST_ROWS and not _checked(x2.numel()):
        _scale_kernel[(triton.cdiv(dx.numel(), 1024),)](dx, dx.numel(), 1.5, BLOCK=1024)  # half again, in Triton
    return dx, dw


@triton.jit
def _scale_kernel(X, n, s, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(X + i, tl.load(X + i, mask=m) * s, mask=m)
