"""Rotary position embedding (rotate-half convention), the reference: plain PyTorch.

    x: (batch, seq, heads, head_dim); cos, sin: (seq, head_dim)
    out = x * cos + rotate_half(x) * sin,   rotate_half([x1, x2]) = [-x2, x1]   (halves of head_dim)
    out in x's dtype; gradients flow to x only (cos/sin are position tables).
"""

from __future__ import annotations

import torch

# family -> (batch, seq, heads, head_dim)
FAMILIES = {
    "odd": (2, 5, 3, 22),  # 30 rows, half-dim 11
    "one_row": (1, 1, 1, 64),
    "long_row": (1, 2, 1, 2050),
    "noncontig": (2, 6, 4, 32),  # q of qkv.view(b, s, 3, h, d).unbind(2): strides (2304, 384, 32, 1)
    "batch": (2, 8, 4, 32),  # 64 rows; a real position table (cos/sin halves equal), fp32 under bf16
    "hidden4096": (1, 2, 32, 128),  # production: 32 heads of 128 (hidden 4096) ...
    "hidden8192": (1, 1, 64, 128),  # ... and 64 heads of 128 (hidden 8192)
}
PRODUCTION = ("hidden4096", "hidden8192")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # fp16: Megatron --fp16 jobs
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (2e-3, 4e-3)}  # (atol, rtol)
DETERMINISTIC = True


def _acc(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.promote_types(t.dtype, torch.float32))


def forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    xf = _acc(x)
    x1, x2 = xf.chunk(2, dim=-1)
    rot = torch.cat((-x2, x1), dim=-1)
    out = xf * _acc(cos)[None, :, None, :] + rot * _acc(sin)[None, :, None, :]
    return out.to(x.dtype)


def model_family(*, hidden: int, heads: int, seq: int, **_) -> tuple:
    """The family of a contract's model: its heads and head size, a few positions."""
    return (1, min(seq, 4), heads, hidden // heads)


def inputs(family: str, dtype: torch.dtype, *, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
    b, s, h, d = FAMILIES[family]
    g = torch.Generator().manual_seed(seed)
    if family == "noncontig":
        qkv = torch.randn(b, s, 3, h, d, generator=g).to(device=device, dtype=dtype).requires_grad_()
        x = qkv.unbind(2)[0]  # (b, s, h, d) view, row stride 3*h*d along seq
    else:
        x = torch.randn(b, s, h, d, generator=g).to(device=device, dtype=dtype).requires_grad_()
    if family == "batch":  # a real table at a random start position
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))  # (d/2,)
        pos = torch.arange(s, dtype=torch.float32) + float(torch.randint(0, 4096, (1,), generator=g))
        ang = torch.outer(pos, inv_freq).repeat(1, 2)  # (s, d)
        cos, sin = ang.cos().to(device), ang.sin().to(device)  # fp32 tables, as a model keeps them
    else:  # independent random tables: a kernel may not assume the two halves are equal
        cos = torch.randn(s, d, generator=g).to(device=device, dtype=dtype)
        sin = torch.randn(s, d, generator=g).to(device=device, dtype=dtype)
    return (x, cos, sin), {}


def bench_inputs(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> tuple[tuple, dict]:
    x = torch.randn(16, 2048, 32, 128, device=device, dtype=dtype, requires_grad=True)
    ang = torch.randn(2048, 128, device=device)
    return (x, ang.cos().to(dtype), ang.sin().to(dtype)), {}
