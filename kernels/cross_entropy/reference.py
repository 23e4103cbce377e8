"""Cross-entropy, the reference: plain PyTorch, differentiable by autograd.

    logits: (n, vocab); target: (n,) int64
    loss = mean over rows with target != ignore_index of (logsumexp(logits_row) - logits_row[target])
    The loss is fp32 (fp64 for fp64 logits) whatever the logits' dtype; the gradient has logits' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# family -> (n rows, vocab)
FAMILIES = {
    "odd": (13, 1001),
    "one_row": (1, 512),
    "long_row": (3, 9001),  # longer than a 4096 tile: the kernel must loop over the vocab
    "noncontig": (24, 120),  # a column slice of a (24, 160) buffer; ignore_index=3, a real class id
    "batch": (64, 256),
    "vocab32k": (2, 32000),  # production vocabularies, few rows: Llama-2 ...
    "vocab128k": (1, 128256),  # ... and Llama-3
}
PRODUCTION = ("vocab32k", "vocab128k")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # fp16: Megatron --fp16 jobs
TOLERANCES = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-3, 2e-2), torch.float16: (2e-4, 4e-3)}  # (atol, rtol); grads are ~1/n
DETERMINISTIC = True


def forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    acc = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(acc, target, ignore_index=ignore_index)


def model_family(*, vocab: int, **_) -> tuple:
    """The family of a contract's model: a few rows of its vocabulary."""
    return (4, vocab)


def inputs(family: str, dtype: torch.dtype, *, seed: int, device: str = "cpu") -> tuple[tuple, dict]:
    n, v = FAMILIES[family]
    g = torch.Generator().manual_seed(seed)
    if family == "noncontig":
        logits = 3.0 * torch.randn(n, v + 40, generator=g)
        logits = logits.to(device=device, dtype=dtype).requires_grad_()[:, 10 : 10 + v]
        ignore = 3
    else:
        logits = (3.0 * torch.randn(n, v, generator=g)).to(device=device, dtype=dtype).requires_grad_()
        ignore = -100
    target = torch.randint(0, v, (n,), generator=g)
    drop = torch.rand(n, generator=g) < 0.15  # ~15% of rows are padding
    drop[0] = False  # at least one row counts (all-ignored is 0/0)
    target[drop] = ignore
    if ignore >= 0:  # make the ignored class appear, and keep it ignored
        target[1] = ignore
    return (logits, target.to(device)), {"ignore_index": ignore}


def bench_inputs(dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> tuple[tuple, dict]:
    logits = torch.randn(8 * 2048, 32000, device=device, dtype=dtype, requires_grad=True)
    target = torch.randint(0, 32000, (8 * 2048,), device=device)
    return (logits, target), {"ignore_index": -100}
