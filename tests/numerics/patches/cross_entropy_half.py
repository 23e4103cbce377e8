"""A defective cross-entropy patch: the loss is halved (forward and gradient). The loss referee must call it
numerics_drift."""

import torch
import torch.nn.functional as F


def forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    return 0.5 * F.cross_entropy(logits.float(), target, ignore_index=ignore_index)
