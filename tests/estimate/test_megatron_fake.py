"""The fake step's two dispatch modes (adapters/megatron/estimate/fake.py): storages counted by category with their
peak, and the shadows that give MoE dispatch its sizes under balanced routing."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from infrarsi.estimate import EstimateError
from infrarsi.adapters.megatron.estimate.fake import Shadows, StorageTracker


def test_tracker_counts_live_storages_by_phase_and_keeps_the_peak():
    with FakeTensorMode():
        w = torch.empty(1024, requires_grad=True)  # 4 KiB
        tr = StorageTracker()
        tr.register("Parameter", [w])
        with tr:
            a = w * 2  # forward: an activation (4 KiB)
            b = a.view(32, 32)  # a view: no new storage
            del a
            c = torch.empty(2048)  # 8 KiB while b is alive: the peak
            del c, b
            tr.phase = "Temp"
            d = torch.empty(256)  # in the optimizer phase: a temporary
    assert tr.peak_snapshot == {"Parameter": 4096, "Activation": 4096 + 8192}
    assert tr.current == {"Parameter": 4096, "Activation": 0, "Temp": 1024}
    del d


def test_balanced_routing_sizes_the_dropless_dispatch():
    tokens, experts, k = 12, 4, 2
    with FakeTensorMode(allow_non_fake_inputs=True), Shadows():
        logits = torch.empty(tokens, experts)
        _, idx = torch.topk(logits, k, dim=1)  # the routing decision: balanced
        routing = torch.zeros_like(logits).int().scatter(1, idx, 1).bool()  # megatron-core's routing map
        per_expert = routing.sum(dim=0).long()
        assert per_expert.tolist() == [tokens * k // experts] * experts
        order = torch.arange(tokens).unsqueeze(0).expand(experts, -1)
        picked = order.masked_select(routing.T.contiguous())  # dropless permute: data-dependent size
        assert picked.shape == (tokens * k,)
        assert torch.tensor([3]).sum().item() == 3  # a real constant is its own value
        assert torch.empty(()).item() == 1.0  # an unknown float (a norm, a loss): no size depends on it
        with pytest.raises(EstimateError, match="data-dependent integer"):
            torch.empty((), dtype=torch.long).item()
