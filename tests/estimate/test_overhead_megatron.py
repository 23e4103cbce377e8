"""What a megatron-core CPU rank holds beyond its tensors (adapters/megatron/estimate/overhead.py): the heap's
high-water mark computed from the fake step's storage sizes (glibc's mmap threshold), gloo's groups, the process and MoE."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from infrarsi.adapters.megatron.estimate import overhead as om
from infrarsi.adapters.megatron.estimate.fake import MMAP_MAX, StorageTracker

MiB = 2**20


def test_the_tracker_keeps_heap_sized_and_mmapped_high_water_marks_apart():
    with FakeTensorMode():
        w = torch.empty(MiB // 4, requires_grad=True)  # 1 MiB of state: heap-sized
        tr = StorageTracker()
        tr.register("Parameter", [w])
        with tr:
            a = torch.empty(4 * MiB // 4)  # 4 MiB: heap
            del a
            logits = torch.empty(MMAP_MAX // 2)  # 64 MiB: its own mmap (at least MMAP_MAX)
            b = torch.empty(2 * MiB // 4)  # 2 MiB while the logits live: the tracked peak
            del logits, b
    heap = tr.heap_peaks()
    assert heap == {"small_max": 5 * MiB, "large_max": 64 * MiB, "small_state": 1 * MiB,
                    "tracked_peak": (1 + 64 + 2) * MiB}
    # the heap reached 5 MiB before the peak and does not give it back: 2 MiB over the tracked peak
    assert om.heap_extra(heap) == 2 * MiB
    assert om.small_transient(heap) == 4 * MiB
    del w


def test_mmapped_storages_add_no_heap_and_heap_sized_ones_keep_their_high_water():
    """A large-vocabulary step (its logits mmapped) is priced at its tensors plus the constants; the same bytes in
    heap-sized activations freed before the peak keep the heap's high-water mark on top of it."""
    c = om.CpuConstants(base=400 * MiB, per_group=24 * MiB, holes=0.5, comm=0.25, moe=50 * MiB,
                        per_local_expert=2 * MiB)
    mmapped = {"small_max": 100 * MiB, "large_max": 900 * MiB, "small_state": 100 * MiB, "tracked_peak": 1000 * MiB}
    total, parts = om.unseen(process_groups=10, local_experts=0, heap=mmapped, constants=c)
    assert parts["heap high-water"] == 0 and parts["holes"] == 0
    assert total == 400 * MiB + 10 * 24 * MiB
    heaped = {"small_max": 700 * MiB, "large_max": 500 * MiB, "small_state": 100 * MiB, "tracked_peak": 1000 * MiB}
    total2, parts2 = om.unseen(process_groups=10, local_experts=16, heap=heaped, reduced_bytes=40 * MiB, constants=c)
    assert parts2["heap high-water"] == 200 * MiB  # 700 + 500 reached, 1000 tracked at once
    assert parts2["holes"] == 0.5 * 600 * MiB
    assert parts2["comm"] == 10 * MiB and parts2["moe"] == 50 * MiB and parts2["per_local_expert"] == 32 * MiB
    assert total2 == pytest.approx(total + sum(parts2[k] for k in ("heap high-water", "holes", "comm", "moe",
                                                                   "per_local_expert")))


def _tiny(vocab: int) -> list[str]:
    return ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "512",
            "--vocab-size", str(vocab), "--global-batch-size", "1", "--micro-batch-size", "1", "--bf16", "--swiglu",
            "--normalization", "RMSNorm", "--position-embedding-type", "rope", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights"]


@pytest.mark.slow  # ~30 s (two fake steps, each in a process of its own); the default run's
# test_the_tracker_keeps_heap_sized_and_mmapped_high_water_marks_apart covers the split
def test_a_large_vocabularys_logits_are_mmapped_and_leave_the_heap_as_it_was():
    """megatron-core's own step, faked: at vocabulary 150k the logits and the loss's fp32 copies (512 x 150k x 4 =
    293 MiB each) are mmapped, so the heap's part (its high-water mark over the tracked peak and its holes) stays
    within 16 MiB of vocabulary 32k's while the transient tensors grow by hundreds of MiB (a flat 0.337 x transient
    bytes priced them as fragmentation: 212-390 MiB high on such shapes)."""
    from infrarsi.adapters.megatron.estimate.peak import run_step

    small, large = ({k: v for k, v in run_step({"argv": _tiny(v), "world": 1, "ranks": [0]})["ranks"][0].items()
                     if k in ("peak", "heap")} for v in (32000, 150000))
    transient = [r["peak"].get("Activation", 0) + r["peak"].get("Temp", 0) for r in (small, large)]
    assert transient[1] - transient[0] > 300 * MiB
    assert large["heap"]["large_max"] - small["heap"]["large_max"] > 300 * MiB
    heap = [om.heap_extra(r["heap"]) + om.CPU.holes * om.small_transient(r["heap"]) for r in (small, large)]
    assert heap[1] <= heap[0] + 16 * MiB, (small["heap"], large["heap"])
    assert 0.337 * (transient[1] - transient[0]) > 100 * MiB  # what the flat fraction added
