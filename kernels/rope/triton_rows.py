"""Rotary position embedding (rotate-half) as Triton kernels, forward and backward: ROWS_PER_PROGRAM rows per
program (4 or 16: VARIANTS).

    x: (batch, seq, heads, head_dim), cos/sin: (seq, head_dim); halves a = x[..., :d/2], b = x[..., d/2:]
    forward:  out_a = a*cos_a - b*sin_a;   out_b = b*cos_b + a*sin_b
    backward: dx_a = g_a*cos_a + g_b*sin_b;  dx_b = g_b*cos_b - g_a*sin_a      (the transpose)

A row is one (batch, seq, head) triple; each program owns (ROWS_PER_PROGRAM, d/2) tiles of both
halves. x and the incoming gradient may be strided views (q of a fused qkv); outputs are contiguous.
Loads are upcast to fp32 at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Launch settings. The host code reads this constant at every launch (_settings), so a variant's value, set on
# the module by the loader after import, is the one used; the kernel gets it as a constexpr.
ROWS_PER_PROGRAM = 4  # (batch, seq, head) rows per program: tiles of (ROWS_PER_PROGRAM, head_dim/2) per half

# The shipped settings, each a candidate of its own: kernels/rope/triton_rows.py@rows4 and @rows16.
#   rows4:  4 heads' rows a program (4 x 64 fp32 per half at head_dim 128): small programs, many of them.
#   rows16: 16 rows a program: a quarter of the programs; a row is short (head_dim/2), so a 4-row tile leaves a
#           GPU program under-filled, and the CPU interpreter's cost is per program.
# Which one is faster depends on the device and the row count: the search measures it, the verifier checks each.
VARIANTS = {"rows4": {"ROWS_PER_PROGRAM": 4}, "rows16": {"ROWS_PER_PROGRAM": 16}}


@triton.jit
def _rope_kernel(X, COS, SIN, OUT, n_rows, seq, heads, half, sxb, sxs, sxh, s_cos, s_sin,
                 BACKWARD: tl.constexpr, ROWS: tl.constexpr, BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)  # (ROWS,) flat (b, s, h) index
    cols = tl.arange(0, BLOCK_H)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < half)[None, :]
    b = rows // (seq * heads)
    s = (rows // heads) % seq
    h = rows % heads
    x_off = (b * sxb + s * sxs + h * sxh)[:, None] + cols[None, :]
    xa = tl.load(X + x_off, mask=mask, other=0.0).to(tl.float32)
    xb = tl.load(X + x_off + half, mask=mask, other=0.0).to(tl.float32)
    ca = tl.load(COS + s[:, None] * s_cos + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    cb = tl.load(COS + s[:, None] * s_cos + half + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    sa = tl.load(SIN + s[:, None] * s_sin + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    sb = tl.load(SIN + s[:, None] * s_sin + half + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        oa = xa * ca + xb * sb
        ob = xb * cb - xa * sa
    else:
        oa = xa * ca - xb * sa
        ob = xb * cb + xa * sb
    out = rows[:, None] * (2 * half) + cols[None, :]
    tl.store(OUT + out, oa.to(OUT.dtype.element_ty), mask=mask)
    tl.store(OUT + out + half, ob.to(OUT.dtype.element_ty), mask=mask)


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _settings(n_rows: int, half: int) -> tuple[int, int, int]:
    """(rows per program, BLOCK_H, programs) for n_rows rows of head_dim = 2 * half, from the constants now."""
    return ROWS_PER_PROGRAM, triton.next_power_of_2(half), triton.cdiv(n_rows, ROWS_PER_PROGRAM)


def _launch(src: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool) -> torch.Tensor:
    src = _unit_last(src)
    bsz, seq, heads, dim = src.shape
    out = torch.empty((bsz, seq, heads, dim), dtype=src.dtype, device=src.device)
    n_rows = bsz * seq * heads
    rows, block_h, n_programs = _settings(n_rows, dim // 2)
    _rope_kernel[(n_programs,)](src, cos, sin, out, n_rows, seq, heads, dim // 2, src.stride(0), src.stride(1),
                                src.stride(2), cos.stride(0), sin.stride(0), BACKWARD=backward, ROWS=rows,
                                BLOCK_H=block_h)
    return out


class _RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        if x.dim() != 4 or x.shape[-1] % 2:
            raise ValueError(f"rope: x must be (batch, seq, heads, head_dim) with an even head_dim, "
                             f"got {tuple(x.shape)}")
        if cos.shape != (x.shape[1], x.shape[3]) or sin.shape != cos.shape:
            raise ValueError(f"rope: cos/sin must be (seq, head_dim) = {(x.shape[1], x.shape[3])}, "
                             f"got {tuple(cos.shape)} and {tuple(sin.shape)}")
        cos, sin = _unit_last(cos), _unit_last(sin)
        ctx.save_for_backward(cos, sin)
        return _launch(x, cos, sin, backward=False)

    @staticmethod
    def backward(ctx, dout):
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            raise NotImplementedError("rope: gradients for cos/sin are not computed; pass tables without requires_grad")
        cos, sin = ctx.saved_tensors
        return _launch(dout, cos, sin, backward=True), None, None


def forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x rotated by the position tables; same shape and dtype as x (contiguous)."""
    return _RoPEFunction.apply(x, cos, sin)
