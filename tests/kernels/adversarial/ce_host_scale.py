"""FALLBACK: the cross-entropy of honest/ce_host_count.py, but its backward scales the rows x vocab gradient
by dloss / n_valid with torch on the host: O(rows x cols) work outside Triton (the backward still launches
no kernel of its own).
Expected: host-op (mul on more elements than the inputs have rows) and no-triton for the backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4
BLOCK_V = 2048


@triton.jit
def _ce_rows_kernel(L, T, LOSS, G, n_rows, vocab, stride_l, ignore_index,
                    ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    """Per row: loss = lse - z[target] (0 when ignored) and g = softmax - onehot (0 when ignored), fp32."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    m = tl.full((ROWS,), -1e30, dtype=tl.float32)
    s = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, vocab, BLOCK_V):  # pass 1: online logsumexp
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < vocab)[None, :]
        z = tl.load(L + rows[:, None] * stride_l + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(z, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), axis=1)
        m = m_new
    lse = m + tl.log(tl.where(row_ok, s, 1.0))
    t = tl.load(T + rows, mask=row_ok, other=ignore_index)
    valid = row_ok & (t != ignore_index)
    z_t = tl.load(L + rows * stride_l + t, mask=valid, other=0.0).to(tl.float32)
    tl.store(LOSS + rows, tl.where(valid, lse - z_t, 0.0), mask=row_ok)
    for start in range(0, vocab, BLOCK_V):  # pass 2: the unscaled gradient
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < vocab)[None, :]
        z = tl.load(L + rows[:, None] * stride_l + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = tl.exp(z - lse[:, None]) - tl.where(cols[None, :] == t[:, None], 1.0, 0.0)
        tl.store(G + rows[:, None] * vocab + cols[None, :], tl.where(valid[:, None], g, 0.0), mask=mask)


@triton.jit
def _ce_scale_kernel(G, SCALE, DL, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(G + offs, mask=ok, other=0.0)
    tl.store(DL + offs, (g * tl.load(SCALE).to(tl.float32)).to(DL.dtype.element_ty), mask=ok)


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index):
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        target = target.contiguous()
        n_rows, vocab = logits.shape
        row_loss = torch.empty((n_rows,), dtype=torch.float32, device=logits.device)
        g = torch.empty((n_rows, vocab), dtype=torch.float32, device=logits.device)
        _ce_rows_kernel[(triton.cdiv(n_rows, ROWS_PER_PROGRAM),)](logits, target, row_loss, g, n_rows, vocab,
                                                                  logits.stride(0), ignore_index,
                                                                  ROWS=ROWS_PER_PROGRAM, BLOCK_V=BLOCK_V)
        n_valid = (target != ignore_index).sum()  # O(rows) bookkeeping on the host
        ctx.save_for_backward(g, n_valid)
        ctx.dtype = logits.dtype
        return (row_loss.sum() / n_valid).to(torch.float32)

    @staticmethod
    def backward(ctx, dloss):
        g, n_valid = ctx.saved_tensors
        scale = (dloss / n_valid).to(torch.float32)
        return (g * scale).to(ctx.dtype), None, None  # rows x vocab multiplies on the host


def forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over rows whose target != ignore_index; a 0-dim fp32 tensor."""
    return _CrossEntropyFunction.apply(logits, target, ignore_index)
