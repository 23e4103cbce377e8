"""SwiGLU, the reference: plain PyTorch, differentiable by autograd.

    out = silu(gate) * up = gate * sigmoid(gate) * up     (elementwise; out in gate's dtype)
"""

from __future__ import annotations

import torch

# family -> (leading shape, n_cols)
FAMILIES = {
    "odd": ((3, 5), 77),
    "one_row": ((1,), 256),
    "long_row": ((2,), 3001),
    "noncontig": ((2, 6), 96),  # gate, up = chunk(2, dim=-1) of a (2, 6, 192) projection, as in an MLP
    "batch": ((4, 16), 64),  # 64 rows
    "ffn11008": ((2,), 11008),  # production widths, few rows: the MLP of hidden 4096 (Llama-7B) ...
    "ffn28672": ((1,), 28672),  # ... and of hidden 8192 (Llama-70B)
}
PRODUCTION = ("ffn11008", "ffn28672")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # fp16: Megatron --fp16 jobs
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (2e-3, 4e-3)}  # (atol, rtol)
DETERMINISTIC = True


def _acc(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.promote_types(t.dtype, torch.float32))


def forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    g = _acc(gate)
    return (g * torch.sigmoid(g) * _acc(up)).to(gate.dtype)


def model_family(*, ffn_hidden: int, **_) -> tuple:
    """The family of a contract's model: a few rows of its MLP width."""
    return ((2,), ffn_hidden)


def inputs(family: str, dtype: torch.dtype, *, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
    lead, n = FAMILIES[family]
    gen = torch.Generator().manual_seed(seed)
    if family == "noncontig":
        both = (2.0 * torch.randn(*lead, 2 * n, generator=gen)).to(device=device, dtype=dtype).requires_grad_()
        gate, up = both.chunk(2, dim=-1)  # views with row stride 2n
        return (gate, up), {}
    gate = (2.0 * torch.randn(*lead, n, generator=gen)).to(device=device, dtype=dtype).requires_grad_()
    up = torch.randn(*lead, n, generator=gen).to(device=device, dtype=dtype).requires_grad_()
    return (gate, up), {}


def bench_inputs(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> tuple[tuple, dict]:
    gate = torch.randn(16 * 2048, 11008, device=device, dtype=dtype, requires_grad=True)
    up = torch.randn(16 * 2048, 11008, device=device, dtype=dtype, requires_grad=True)
    return (gate, up), {}
