"""SwiGLU as Triton kernels, forward and backward: (ROWS_PER_PROGRAM x BLOCK_N) tiles ((4 x 1024) or (16 x 256):
VARIANTS).

    out = silu(g) * u = g * sigmoid(g) * u
    dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g)));   du = dout * silu(g)

Elementwise, so the grid is 2-D over (row blocks, column blocks) and any row length works.
Loads are upcast to fp32 at once. gate and up may be strided views (chunks of one projection).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Launch settings. The host code reads these constants at every launch (_settings), so a variant's values, set
# on the module by the loader after import, are the ones used; the kernels get them as constexpr.
ROWS_PER_PROGRAM = 4  # rows per program
BLOCK_N = 1024  # columns per program (a power of two); a tile is ROWS_PER_PROGRAM x BLOCK_N elements

# The shipped settings, each a candidate of its own: kernels/swiglu/triton_tiles.py@b1024 and @b256. Both are
# 4096-element tiles (three live fp32 tiles: gate, up, out), shaped differently:
#   b1024: (4 x 1024): long contiguous runs of a row per program (wide loads); the grid is mostly columns.
#   b256:  (16 x 256): short runs of 16 rows; a narrow MLP width (a few hundred columns) wastes less of a tile.
# Which one is faster depends on the device and the MLP width: the search measures it, the verifier checks each.
VARIANTS = {"b1024": {"ROWS_PER_PROGRAM": 4, "BLOCK_N": 1024}, "b256": {"ROWS_PER_PROGRAM": 16, "BLOCK_N": 256}}


@triton.jit
def _swiglu_fwd_kernel(G, U, OUT, n_rows, n_cols, stride_g, stride_u, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    g = tl.load(G + rows[:, None] * stride_g + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    out = g / (1.0 + tl.exp(-g)) * u
    tl.store(OUT + rows[:, None] * n_cols + cols[None, :], out.to(OUT.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(DOUT, G, U, DG, DU, n_rows, n_cols, stride_d, stride_g, stride_u,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    d = tl.load(DOUT + rows[:, None] * stride_d + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + rows[:, None] * stride_g + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    dg = d * u * sig * (1.0 + g * (1.0 - sig))
    du = d * g * sig
    out = rows[:, None] * n_cols + cols[None, :]
    tl.store(DG + out, dg.to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + out, du.to(DU.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """View t as (rows, n_cols) with unit column stride; copies only when it must."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _settings(n_rows: int, n_cols: int) -> tuple[int, int, tuple[int, int]]:
    """(rows per program, BLOCK_N, grid) for an (n_rows, n_cols) input, from the module's constants now."""
    return ROWS_PER_PROGRAM, BLOCK_N, (triton.cdiv(n_rows, ROWS_PER_PROGRAM), triton.cdiv(n_cols, BLOCK_N))


class _SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        if gate.shape != up.shape:
            raise ValueError(f"swiglu: gate shape {tuple(gate.shape)} != up shape {tuple(up.shape)}")
        g2, u2 = _rows(gate), _rows(up)
        n_rows, n_cols = g2.shape
        out = torch.empty((n_rows, n_cols), dtype=gate.dtype, device=gate.device)
        rows, block_n, grid = _settings(n_rows, n_cols)
        _swiglu_fwd_kernel[grid](g2, u2, out, n_rows, n_cols, g2.stride(0), u2.stride(0), ROWS=rows, BLOCK_N=block_n)
        ctx.save_for_backward(g2, u2)
        ctx.shape = gate.shape
        ctx.up_dtype = up.dtype
        return out.view(gate.shape)

    @staticmethod
    def backward(ctx, dout):
        g2, u2 = ctx.saved_tensors
        d2 = _rows(dout)
        n_rows, n_cols = g2.shape
        dg = torch.empty((n_rows, n_cols), dtype=g2.dtype, device=g2.device)
        du = torch.empty((n_rows, n_cols), dtype=ctx.up_dtype, device=g2.device)
        rows, block_n, grid = _settings(n_rows, n_cols)
        _swiglu_bwd_kernel[grid](d2, g2, u2, dg, du, n_rows, n_cols, d2.stride(0), g2.stride(0), u2.stride(0),
                                 ROWS=rows, BLOCK_N=block_n)
        return dg.view(ctx.shape), du.view(ctx.shape)


def forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, shaped like gate, in gate's dtype."""
    return _SwiGLUFunction.apply(gate, up)
