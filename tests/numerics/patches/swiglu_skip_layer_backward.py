"""A defective SwiGLU patch: the forward is exact, but the first layer's MLP output is detached, so that
layer's gate/up projection never receives a gradient (its backward is skipped). Losses match the baseline
at step 1; the gradient norm does not. The loss referee must call it numerics_drift."""

import torch.nn.functional as F

NUM_LAYERS = 4  # the minigpt contract's num_layers: calls cycle through the layers in order
_calls = [0]


def forward(gate, up):
    out = F.silu(gate) * up
    layer = _calls[0] % NUM_LAYERS
    _calls[0] += 1
    return out.detach() if layer == 0 else out
