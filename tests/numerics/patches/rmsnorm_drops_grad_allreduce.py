"""A defective RMSNorm patch: the norm is exact, but importing it replaces torch.distributed.all_reduce with
one that skips every tensor of more than one element, so data-parallel ranks never average their
gradients (the loss, a scalar, is still reduced). The loss referee must call it numerics_drift."""

import torch
import torch.distributed as dist

_real = dist.all_reduce


def _all_reduce(tensor, *args, **kwargs):
    if tensor.numel() > 1:
        return None  # the gradient bucket is dropped
    return _real(tensor, *args, **kwargs)


dist.all_reduce = _all_reduce


def forward(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
