"""RMSNorm, the reference: plain PyTorch, differentiable by autograd.

    y = x / sqrt(mean(x^2, last dim) + eps) * weight     (output in x's dtype, math in >= fp32)

Also the verifier's test data: input generators over shape families, dtypes and per-dtype
tolerances. Sizes are chosen for the CPU Triton interpreter (rows x cols stays small).
"""

from __future__ import annotations

import torch

# family -> (leading shape, n_cols)
FAMILIES = {
    "odd": ((3, 5), 77),  # 15 rows, a row length no power of two divides
    "one_row": ((1,), 256),
    "long_row": ((2,), 3001),
    "noncontig": ((12,), 96),  # a column slice of a (12, 136) buffer: row stride 136
    "batch": ((4, 16), 64),  # 64 rows; for bf16 the weight is fp32, as under CPU autocast
    "hidden4096": ((2,), 4096),  # production widths, few rows: Llama-7B ...
    "hidden8192": ((1,), 8192),  # ... and Llama-70B hidden sizes
}
PRODUCTION = ("hidden4096", "hidden8192")  # one seed each: the widths matter, not the row count
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # fp16: Megatron --fp16 jobs
# (atol, rtol) per case dtype, for every element of every output and gradient; bf16 outputs are
# rounded (truncated in the interpreter) from fp32: relative error up to 2^-7 ~ 0.8%.
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (2e-3, 4e-3)}
DETERMINISTIC = True  # same inputs -> bitwise the same outputs and gradients


def _acc(t: torch.Tensor) -> torch.Tensor:
    """t in at least fp32 (fp64 stays fp64, so the verifier's fp64 reference is exact)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = _acc(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * _acc(weight)
    return y.to(x.dtype)


def model_family(*, hidden: int, **_) -> tuple:
    """The family of a contract's model: a few rows of its hidden size."""
    return ((4,), hidden)


def inputs(family: str, dtype: torch.dtype, *, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
    """Fresh random (args, kwargs) for forward(); differentiable tensors have requires_grad."""
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
    w_dtype = torch.float32 if family == "batch" else dtype
    w = (1.0 + 0.5 * torch.randn(n, generator=g)).to(device=device, dtype=w_dtype).requires_grad_()
    return (x, w), {"eps": 1e-6}


def bench_inputs(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> tuple[tuple, dict]:
    """An LLM-sized case: 16 x 2048 tokens, hidden 4096."""
    x = torch.randn(16 * 2048, 4096, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device=device, dtype=dtype, requires_grad=True)
    return (x, w), {"eps": 1e-6}
