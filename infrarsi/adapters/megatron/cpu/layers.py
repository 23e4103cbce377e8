"""Layers megatron-core's local spec lacks without Transformer Engine: a fused core attention, and norms that
keep what TE's keep and support sequence parallelism.

**FusedCoreAttention**: torch's flash attention in place of TE's.

megatron-core's local ``DotProductAttention`` computes softmax(QK^T)V explicitly: it materializes the
[b, heads/TP, s, s] scores and keeps the probabilities for backward, and repeats K and V per query head for GQA.
A GPU job with Transformer Engine runs a flash or cuDNN fused kernel instead, which keeps Q, K, V, the output and
one fp32 log-sum-exp per query and head. :class:`FusedCoreAttention` is that kernel's memory behaviour with torch's
own flash attention (``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward, GQA without
repeating K/V), so that the CPU loop trains with it and the fake-tensor estimate prices it with the same ops
(their fake kernels give the outputs' shapes on any device).

Shapes: query [sq, b, heads/TP, d], key and value [sk, b, groups/TP, d] -> output [sq, b, heads/TP * d].
No attention dropout: torch's CPU kernel has none (a GPU kernel draws it inside and keeps no mask), so the
CPU training loop refuses ``--attention-dropout`` > 0 with this backend.

**TorchNorm**: megatron-core's ``WrappedTorchNorm`` (torch's LayerNorm or RMSNorm) asserts that sequence
parallelism is off, because it does not mark its weights for it. With sequence parallelism each tensor-parallel
rank normalizes its own slice of the sequence, so the norm weights' gradients are partial sums that
``finalize_model_grads`` must all-reduce over the tensor-parallel group; it does so for parameters with the
attribute ``sequence_parallel = True``, which TE's and apex's norms set. ``TorchNorm`` builds torch's LayerNorm
(one fused op that keeps the input and a mean and 1/std per row, as TE's does) or :class:`RMSNorm`, with that
attribute set. torch's own RMSNorm is composite when it trains: it keeps an fp32 copy of its input and the bf16
normalized output (3x the input's bytes in bf16), where TE's fused RMSNorm keeps the input and 1/rms per row;
:class:`RMSNorm` computes the same y = x / rms(x) * w (in fp32, like torch's) and keeps what TE's keeps.
"""

from __future__ import annotations

import math

import torch
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule


class TorchNorm:
    """torch's LayerNorm / RMSNorm as ``WrappedTorchNorm`` builds it (a class whose ``__new__`` returns the torch
    module, as megatron-core's specs expect), its weights marked for sequence parallelism."""

    def __new__(cls, config, hidden_size: int, eps: float = 1e-5, persist_layer_norm: bool = False,
                zero_centered_gamma: bool = False, normalization: str = "LayerNorm"):
        if config.normalization == "RMSNorm":
            norm = RMSNorm(hidden_size, eps=eps)
        elif config.normalization == "LayerNorm":
            norm = torch.nn.LayerNorm(normalized_shape=hidden_size, eps=eps)
        else:
            raise ValueError(f"normalization {config.normalization!r}: LayerNorm or RMSNorm")
        for p in norm.parameters():
            p.sequence_parallel = bool(config.sequence_parallel)
        return norm


class _RMSNormFn(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * w over the last dimension, in fp32, saving (x, w, 1/rms per row)."""

    @staticmethod
    def forward(ctx, x, w, eps: float):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)  # [..., 1] fp32
        y = (xf * rstd).to(x.dtype) * w
        ctx.save_for_backward(x, w, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, rstd = ctx.saved_tensors
        xhat = x.float() * rstd
        g = dy.float() * w.float()
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        dw = (dy.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype), None


class RMSNorm(torch.nn.Module):
    """RMSNorm (weight initialised to ones) keeping what a fused RMSNorm keeps for backward."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))

    def forward(self, x):
        return _RMSNormFn.apply(x, self.weight, self.eps)


class _FlashCore(torch.autograd.Function):
    """out = softmax(q k^T * scale [causal]) v, saving (q, k, v, out, logsumexp) for backward.

    torch's CPU kernel needs one head size for Q, K and V; where V's is smaller (MLA: qk 192, v 128), V is
    zero-padded to it and the output sliced back, so V and the saved output are kept at the larger size."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float):  # [b, h, s, d], [b, g, s, d], [b, g, s, dv]
        dv = v.shape[-1]
        if dv != q.shape[-1]:
            v = torch.nn.functional.pad(v, (0, q.shape[-1] - dv))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.scale, ctx.dv = causal, scale, dv
        return out[..., :dv] if dv != out.shape[-1] else out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        if ctx.dv != out.shape[-1]:
            grad_out = torch.nn.functional.pad(grad_out, (0, out.shape[-1] - ctx.dv))
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out.contiguous(), q, k, v, out, lse, 0.0, ctx.causal, scale=ctx.scale)
        return dq, dk, dv[..., :ctx.dv], None, None


def gpu_attention(q, k, v, causal: bool, scale: float):
    """softmax(q k^T * scale [causal]) v by torch's scaled_dot_product_attention, which on a GPU runs a fused
    kernel (flash or memory-efficient: no s x s state kept, as TE's); K/V groups shared by their query heads (GQA)
    without a copy. Shapes as :class:`_FlashCore`'s: [b, h, s, d], [b, g, s, d], [b, g, s, dv] -> [b, h, s, dv]."""
    gqa = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, **gqa)


class FusedCoreAttention(MegatronModule):
    """Drop-in for megatron-core's ``DotProductAttention`` in a layer spec (same constructor and forward)."""

    def __init__(self, config, layer_number: int, attn_mask_type: AttnMaskType, attention_type: str,
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 k_channels: int | None = None, v_channels: int | None = None, cp_comm_type: str | None = None,
                 pg_collection=None):
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError("context parallelism needs Transformer Engine's attention; the local spec has none")
        if attn_mask_type not in (AttnMaskType.causal, AttnMaskType.no_mask):
            raise ValueError(f"attention mask type {attn_mask_type} is not supported by the fused core attention")
        self.causal = attn_mask_type == AttnMaskType.causal
        head_dim = k_channels or config.kv_channels  # MLA passes its q/k head size (qk + rope dims)
        self.scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if packed_seq_params is not None or attention_bias is not None:
            raise ValueError("packed sequences and attention bias are not supported by the fused core attention")
        sq, b, heads, _ = query.shape
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d]
        if q.is_cuda:  # the CPU kernel's GPU counterparts: torch picks its flash (or memory-efficient) kernel
            out = gpu_attention(q, k, v, self.causal, self.scale)
        else:
            out = _FlashCore.apply(q, k, v, self.causal, self.scale)  # [b, heads, sq, dv]
        return out.permute(2, 0, 1, 3).reshape(sq, b, heads * out.shape[-1])
