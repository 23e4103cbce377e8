"""Cross-entropy (mean over non-ignored rows) as Triton kernels, forward and backward.

ROWS_PER_PROGRAM rows per program, the vocab streamed in BLOCK_V chunks (4 x 1024 or 8 x 4096: VARIANTS) with an
online logsumexp:
    m' = max(m, max z);  s' = s * exp(m - m') + sum exp(z - m');  lse = m + log s
    loss_row = lse - z[target];  loss = sum(loss_row over valid rows) / n_valid
    dlogits = (softmax(z) - onehot(target)) * dloss / n_valid   (0 on ignored rows)

The mean is reduced deterministically: each program writes its partial sum and count, a
one-program kernel adds them in a fixed order and divides. The loss is fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Launch settings. The host code reads these constants at every launch (_settings), so a variant's values, set
# on the module by the loader after import, are the ones used; the kernels get them as constexpr.
ROWS_PER_PROGRAM = 4  # rows of logits per program (one partial loss and count per program)
BLOCK_V = 1024  # vocab columns per step of the streamed loop: a (ROWS_PER_PROGRAM, BLOCK_V) fp32 tile a step
BLOCK_P = 1024  # partials reduced per step by the finishing kernel

# The shipped settings, each a candidate of its own: kernels/cross_entropy/triton_vocab.py@v1024 and @v4096.
#   v1024: (4 x 1024) tiles: 4096 elements a step, 32 steps a row at a 32k vocab (128 at 128k); small programs.
#   v4096: (8 x 4096) tiles: 32768 elements a step, 8x fewer steps and half the programs; wider loads, at 8x the
#          registers a program (spills on a GPU whose register file cannot hold it).
# Which one is faster depends on the device and the vocab: the search measures it, the verifier checks each.
VARIANTS = {"v1024": {"ROWS_PER_PROGRAM": 4, "BLOCK_V": 1024}, "v4096": {"ROWS_PER_PROGRAM": 8, "BLOCK_V": 4096}}


@triton.jit
def _ce_fwd_kernel(L, T, LSE, PART_LOSS, PART_COUNT, n_rows, vocab, stride_l, ignore_index,
                   ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    m = tl.full((ROWS,), -1e30, dtype=tl.float32)  # finite floor: no inf - inf on masked rows
    s = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, vocab, BLOCK_V):
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
    loss = tl.where(valid, lse - z_t, 0.0)
    tl.store(LSE + rows, lse, mask=row_ok)
    tl.store(PART_LOSS + pid, tl.sum(loss, axis=0))
    tl.store(PART_COUNT + pid, tl.sum(valid.to(tl.float32), axis=0))


@triton.jit
def _ce_finish_kernel(PART_LOSS, PART_COUNT, LOSS, COUNT, n_parts, BLOCK_P: tl.constexpr):
    total = tl.zeros((BLOCK_P,), dtype=tl.float32)
    count = tl.zeros((BLOCK_P,), dtype=tl.float32)
    for start in range(0, n_parts, BLOCK_P):
        idx = start + tl.arange(0, BLOCK_P)
        total += tl.load(PART_LOSS + idx, mask=idx < n_parts, other=0.0)
        count += tl.load(PART_COUNT + idx, mask=idx < n_parts, other=0.0)
    n = tl.sum(count, axis=0)
    tl.store(COUNT, n)
    tl.store(LOSS, tl.sum(total, axis=0) / n)  # 0/0 = nan when every row is ignored, as torch does


@triton.jit
def _ce_bwd_kernel(L, T, LSE, DLOSS, COUNT, DL, n_rows, vocab, stride_l, ignore_index,
                   ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    t = tl.load(T + rows, mask=row_ok, other=ignore_index)
    valid = row_ok & (t != ignore_index)
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
    scale = tl.load(DLOSS).to(tl.float32) / tl.load(COUNT)
    for start in range(0, vocab, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_ok[:, None] & (cols < vocab)[None, :]
        z = tl.load(L + rows[:, None] * stride_l + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(z - lse[:, None])
        g = (p - tl.where(cols[None, :] == t[:, None], 1.0, 0.0)) * scale
        g = tl.where(valid[:, None], g, 0.0)
        tl.store(DL + rows[:, None] * vocab + cols[None, :], g.to(DL.dtype.element_ty), mask=mask)


def _settings(n_rows: int) -> tuple[int, int, int]:
    """(rows per program, BLOCK_V, programs) for n_rows rows of logits, from the module's constants now."""
    return ROWS_PER_PROGRAM, BLOCK_V, triton.cdiv(n_rows, ROWS_PER_PROGRAM)


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index):
        if logits.dim() != 2 or target.shape != logits.shape[:1]:
            raise ValueError(f"cross_entropy: logits must be (n, vocab) and target (n,), got {tuple(logits.shape)} "
                             f"and {tuple(target.shape)}; flatten with logits.view(-1, vocab), target.view(-1)")
        if logits.stride(-1) != 1:
            logits = logits.contiguous()
        target = target.contiguous()
        n_rows, vocab = logits.shape
        rows, block_v, n_parts = _settings(n_rows)
        lse = torch.empty((n_rows,), dtype=torch.float32, device=logits.device)
        part_loss = torch.empty((n_parts,), dtype=torch.float32, device=logits.device)
        part_count = torch.empty((n_parts,), dtype=torch.float32, device=logits.device)
        loss = torch.empty((), dtype=torch.float32, device=logits.device)
        count = torch.empty((), dtype=torch.float32, device=logits.device)
        _ce_fwd_kernel[(n_parts,)](logits, target, lse, part_loss, part_count, n_rows, vocab, logits.stride(0),
                                   ignore_index, ROWS=rows, BLOCK_V=block_v)
        _ce_finish_kernel[(1,)](part_loss, part_count, loss, count, n_parts, BLOCK_P=BLOCK_P)
        ctx.save_for_backward(logits, target, lse, count)
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    def backward(ctx, dloss):
        logits, target, lse, count = ctx.saved_tensors
        n_rows, vocab = logits.shape
        dlogits = torch.empty((n_rows, vocab), dtype=logits.dtype, device=logits.device)
        rows, block_v, n_programs = _settings(n_rows)
        _ce_bwd_kernel[(n_programs,)](logits, target, lse, dloss.contiguous(), count, dlogits, n_rows, vocab,
                                      logits.stride(0), ctx.ignore_index, ROWS=rows, BLOCK_V=block_v)
        return dlogits, None, None


def forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean cross-entropy over rows whose target != ignore_index; a 0-dim fp32 tensor."""
    return _CrossEntropyFunction.apply(logits, target, ignore_index)
