"""Residual add + RMSNorm, the reference: plain PyTorch, differentiable by autograd.

    h = x + residual;   normed = h / sqrt(mean(h^2, last dim) + eps) * weight
    returns (normed, h), both in the dtype of x + residual (bf16 + fp32 -> fp32, as PyTorch promotes:
    under autocast the residual stream stays fp32 while a block's output is bf16); math in >= fp32.
"""

from __future__ import annotations

import torch

# family -> (leading shape, n_cols)
FAMILIES = {
    "odd": ((3, 5), 77),
    "one_row": ((1,), 256),
    "long_row": ((2,), 3001),
    "noncontig": ((12,), 96),  # x is a column slice of a (12, 136) buffer
    "batch": ((4, 16), 64),  # 64 rows; for bf16 the residual and weight are fp32, as under CPU autocast
    "hidden4096": ((2,), 4096),  # production widths, few rows
    "hidden8192": ((1,), 8192),
}
PRODUCTION = ("hidden4096", "hidden8192")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # fp16: Megatron --fp16 jobs
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (2e-3, 4e-3)}  # (atol, rtol)
DETERMINISTIC = True


def _acc(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.promote_types(t.dtype, torch.float32))


def forward(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    h = _acc(x) + _acc(residual)
    normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * _acc(weight)
    out_dtype = torch.promote_types(x.dtype, residual.dtype)
    return normed.to(out_dtype), h.to(out_dtype)


def model_family(*, hidden: int, **_) -> tuple:
    """The family of a contract's model: a few rows of its hidden size."""
    return ((4,), hidden)


def inputs(family: str, dtype: torch.dtype, *, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
    lead, n = FAMILIES[family]
    g = torch.Generator().manual_seed(seed)
    wide = 40 if family == "noncontig" else 0
    base = torch.randn(*lead, n + wide, generator=g).to(device=device, dtype=dtype).requires_grad_()
    if family == "odd":  # rows from 1e-3 to 10 in scale: at 1e-3, mean(x^2) ~ eps, so eps must be right
        scale = 10.0 ** (4.0 * torch.rand(*lead, 1, generator=g) - 3.0)
        base = (base.detach() * scale.to(device=device, dtype=dtype)).requires_grad_()
    elif family in PRODUCTION or family == "model":  # rows from 0.1 to 10 in scale, as activations are: a
        scale = 10.0 ** (2.0 * torch.rand(*lead, 1, generator=g) - 1.0)  # kernel that skips the norm shows
        base = (base.detach() * scale.to(device=device, dtype=dtype)).requires_grad_()
    x = base[..., wide // 2 : wide // 2 + n] if wide else base  # the slice: a strided view of the leaf
    r = 2.0 * torch.randn(*lead, n, generator=g)
    if family == "odd" or family in PRODUCTION or family == "model":
        r = r * scale  # the same per-row scale, so h = x + residual is small too
    w_dtype = torch.float32 if family == "batch" else dtype
    r = r.to(device=device, dtype=w_dtype).requires_grad_()
    w = (1.0 + 0.5 * torch.randn(n, generator=g)).to(device=device, dtype=w_dtype).requires_grad_()
    return (x, r, w), {"eps": 1e-6}


def bench_inputs(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> tuple[tuple, dict]:
    x = torch.randn(16 * 2048, 4096, device=device, dtype=dtype, requires_grad=True)
    r = torch.randn(16 * 2048, 4096, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device=device, dtype=dtype, requires_grad=True)
    return (x, r, w), {"eps": 1e-6}
