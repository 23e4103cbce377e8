"""One training step under fake tensors on a fake process group, with per-rank memory tracking.

Recipe (the one that works with torch 2.13): build the model on the meta device, then ``to_empty`` inside
``FakeTensorMode`` (building real modules directly under fake mode fails in ``_apply`` and later in
``fully_shard``), apply the parallel layout on a ``fake`` process group of the real world size
(``torch.testing._internal.distributed.fake_pg.FakeStore``: every collective returns at once with the right
shapes), then run forward, backward and the optimizer step under ``MemTracker`` (or ``FSDPMemTracker`` when
the model is FSDP-sharded). Rank 0 stands for every rank; the layouts here are symmetric.

No tensor holds data, so a 70B model on 256 ranks costs only Python time. What no tensor tracker sees is
added by the caller as a measured constant (overhead.py): allocator fragmentation and caching, NCCL/gloo
buffers, the CUDA context or torch's CPU runtime.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .result import EstimateError


@contextmanager
def fake_world(world_size: int) -> Iterator[None]:
    """This process as rank 0 of a ``world_size``-rank fake process group, for the duration of the block."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if world_size < 1:
        raise EstimateError(f"world size {world_size} must be >= 1")
    if dist.is_initialized():
        raise EstimateError("a process group already exists in this process; run the estimate in a fresh process")
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


@dataclass(frozen=True, kw_only=True)
class Device:
    """Peak rates of the device a step runs on (datasheet figures, dense)."""

    name: str
    flops: float  # FLOP/s at the step's matmul dtype
    bandwidth: float  # bytes/s of device memory


def roofline_mode(device: Device, *, skip_mode: Any = None):
    """A dispatch mode that prices every aten op as max(FLOPs / peak, bytes moved / bandwidth), the roofline
    RuntimeEstimator uses on a GPU (which it can only do with CUDA present). FLOPs come from torch's own
    flop registry; bytes are the op's tensor inputs plus outputs. Ops run under ``skip_mode`` (DTensor's
    sharding propagation on global shapes) are not priced."""
    import torch
    from torch._guards import active_fake_mode
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    skip = {torch.ops.aten.view, torch.ops.aten._unsafe_view, torch.ops.aten.t, torch.ops.aten.transpose,
            torch.ops.aten.expand, torch.ops.aten.detach, torch.ops.aten.slice, torch.ops.aten.select,
            torch.ops.aten.permute, torch.ops.aten.as_strided, torch.ops.aten.unsqueeze, torch.ops.aten.squeeze,
            torch.ops.aten.empty, torch.ops.aten.empty_like, torch.ops.aten.empty_strided, torch.ops.aten.split,
            torch.ops.aten.chunk, torch.ops.aten.unbind, torch.ops.aten.alias, torch.ops.aten.reshape}

    class Roofline(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seconds = 0.0
            self.flops = 0.0
            self.on = False  # priced only inside ``priced()``: one step, not the warm-up that creates state

        @contextmanager
        def priced(self):
            self.on = True
            try:
                yield
            finally:
                self.on = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t is DTensor for t in types):
                return NotImplemented
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            if not self.on or packet in skip or "c10d" in str(packet) or (
                    skip_mode is not None and active_fake_mode() is skip_mode):  # collectives are not priced: a lower bound
                return out
            flat_in, _ = tree_flatten((args, kwargs))
            flat_out, _ = tree_flatten(out)
            moved = sum(t.numel() * t.element_size() for t in (*flat_in, *flat_out) if isinstance(t, torch.Tensor))
            flops = 0.0
            if packet in flop_registry:
                try:
                    flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
                except Exception:  # a formula that does not take these arguments: price the op by its bytes
                    flops = 0.0
            self.flops += flops
            self.seconds += max(flops / device.flops, moved / device.bandwidth)
            return out

    return Roofline()


@dataclass(frozen=True, kw_only=True)
class Tracked:
    tracked: dict[str, int]
    step_time_s: float | None
    flops: float
    wall_s: float


class Hooks:
    """What a step function gets besides the model: ``reset()`` before each forward (the trackers refuse a
    module's second call otherwise) and ``priced()`` around the one step whose roofline time is wanted."""

    def __init__(self, reset: Callable[[], None], roof: Any, tracker: Any):
        self.reset = reset
        self._roof = roof
        self._tracker = tracker
        self.extra_peaks: list[dict[str, int]] = []

    def peak_with(self, extra: dict[str, int]) -> None:
        """Record a moment the tracker cannot run as is: the current tensors plus ``extra`` (category -> bytes)."""
        snap = self._tracker.get_tracker_snapshot("current")
        if not snap:
            return
        _, cur = max(snap.items(), key=lambda kv: kv[1].get("Total", 0))
        out = {str(getattr(k, "value", k)): int(v) for k, v in cur.items() if str(k) != "Total" and v}
        for k, v in extra.items():
            out[k] = out.get(k, 0) + int(v)
        self.extra_peaks.append(out)

    def priced(self):
        return self._roof.priced() if self._roof is not None else contextlib.nullcontext()


def tracked_step(meta: Callable[[], Any], build: Callable[[Any], tuple[Any, Any]],
                 step: Callable[[Any, Any, Hooks], None], *, device: Device | None) -> Tracked:
    """Build the model with ``meta()`` (outside fake mode, on the meta device, parallel layout applied), then
    ``build(model)`` -> (model, optimizer) inside fake mode (``to_empty`` there), and run
    ``step(model, optimizer, hooks)`` under fake tensors with a
    memory tracker. Call inside ``fake_world``. Returns the peak snapshot of the busiest device, by category,
    and the roofline time of the priced step (None without a device)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.fsdp import FSDPModule

    import torch.distributed.tensor._sharding_prop as sharding_prop
    from unittest import mock

    t0 = time.perf_counter()
    model = meta()
    # DTensor's sharding propagation runs each op once more on global-shape fake tensors, in the active fake mode
    # (``detect_fake_mode() or FakeTensorMode()``); in ours, the tracker would count them: loss-parallel logits of
    # llama3 70B at TP 8 showed at their full vocabulary, 140 GiB instead of 1/8 of it. A private fake mode for
    # the propagation keeps them out of the count (the tracker skips ops of any other fake mode).
    private = FakeTensorMode(allow_non_fake_inputs=True)
    with FakeTensorMode(allow_non_fake_inputs=True), mock.patch.object(sharding_prop, "detect_fake_mode",
                                                                        lambda *a, **k: private):
        model, opt = build(model)
        tracker = FSDPMemTracker(model, opt) if isinstance(model, FSDPModule) else MemTracker()
        if not isinstance(tracker, FSDPMemTracker):
            tracker.track_external(model, opt)
        roof = roofline_mode(device, skip_mode=private) if device is not None else None
        hooks = Hooks(tracker.reset_mod_stats, roof, tracker)
        with tracker, (roof if roof is not None else contextlib.nullcontext()):
            step(model, opt, hooks)
        snap = tracker.get_tracker_snapshot("peak")
    if not snap:
        raise EstimateError("the memory tracker saw no tensors: the step ran outside it")
    dev, peak = max(snap.items(), key=lambda kv: kv[1].get("Total", 0))
    tracked = {str(getattr(k, "value", k)): int(v) for k, v in peak.items() if str(k) != "Total" and v}
    for extra in hooks.extra_peaks:
        if sum(extra.values()) > sum(tracked.values()):
            tracked = extra
    return Tracked(tracked=tracked, step_time_s=roof.seconds if roof is not None else None,
                   flops=roof.flops if roof is not None else math.nan, wall_s=time.perf_counter() - t0)
