"""The two stand-ins megatron-core's local spec needs without Transformer Engine (adapters/megatron/cpu/layers.py):
they compute what torch's reference ops compute, and keep for backward what TE's fused kernels keep."""

import math

import pytest
import torch

from infrarsi.adapters.megatron.cpu.layers import RMSNorm, _FlashCore, gpu_attention


def test_rmsnorm_matches_torch_and_keeps_input_and_rstd_only():
    torch.manual_seed(0)
    ours, ref = RMSNorm(32, eps=1e-6), torch.nn.RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        w = torch.randn(32)
        ours.weight.copy_(w)
        ref.weight.copy_(w)
    x = torch.randn(4, 3, 32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(4, 3, 32)
    y, y_ref = ours(x), ref(x2)
    saved = y.grad_fn.saved_tensors
    assert sorted(tuple(t.shape) for t in saved) == [(4, 3, 1), (4, 3, 32), (32,)]  # x, 1/rms per row, w
    y.backward(g)
    y_ref.backward(g)
    assert torch.allclose(y, y_ref, atol=1e-5)
    assert torch.allclose(x.grad, x2.grad, atol=1e-5) and torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-4)


@pytest.mark.parametrize("heads,groups,dqk,dv", [(4, 4, 16, 16), (8, 2, 16, 16), (4, 4, 24, 16)])
def test_flash_core_is_causal_attention_with_gqa_and_a_smaller_value_head(heads, groups, dqk, dv):
    torch.manual_seed(1)
    q = torch.randn(2, heads, 10, dqk, requires_grad=True)
    k = torch.randn(2, groups, 10, dqk, requires_grad=True)
    v = torch.randn(2, groups, 10, dv, requires_grad=True)
    scale = 1 / math.sqrt(dqk)
    out = _FlashCore.apply(q, k, v, True, scale)
    rep = heads // groups
    kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    mask = torch.ones(10, 10, dtype=torch.bool).tril()
    probs = torch.softmax((q @ kr.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf")), -1)
    ref = probs @ vr
    assert out.shape == (2, heads, 10, dv) and torch.allclose(out, ref, atol=1e-5)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("heads,groups", [(4, 4), (8, 2)])
def test_gpu_attention_computes_what_the_cpu_kernel_computes(heads, groups):
    """FusedCoreAttention's GPU path (torch's scaled_dot_product_attention, GQA without a copy) against the CPU
    kernel's: same outputs and gradients (run here on CPU tensors; scripts/gpu_check.sh's layouts part trains it
    on a GPU)."""
    torch.manual_seed(2)
    q = torch.randn(2, heads, 12, 16, requires_grad=True)
    k = torch.randn(2, groups, 12, 16, requires_grad=True)
    v = torch.randn(2, groups, 12, 16, requires_grad=True)
    g = torch.randn(2, heads, 12, 16)
    ours = gpu_attention(q, k, v, True, 0.25)
    grads = torch.autograd.grad(ours, (q, k, v), g)
    ref = _FlashCore.apply(q, k, v, True, 0.25)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    assert ours.shape == (2, heads, 12, 16) and torch.allclose(ours, ref, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(grads, ref_grads))
