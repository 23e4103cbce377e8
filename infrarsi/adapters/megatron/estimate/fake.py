"""Two dispatch modes for megatron-core's training step under fake tensors: one that counts storages by category,
and one that gives the MoE dispatch the integer values it needs.

**StorageTracker** counts every tensor storage alive, by category, and keeps the snapshot at the moment their
total peaks. Storages of the model's state are registered up front (:meth:`StorageTracker.register`:
``Parameter``, ``Gradient``, ``Optstate``); a storage created by an op inside the mode is ``Activation`` in the
forward pass, ``Temp`` in the backward pass (an autograd graph task is running) or in the optimizer step
(``phase = "Temp"``). A storage is freed when Python frees it (a weak reference's callback), as the caching
allocator frees its block; ``UntypedStorage.resize_`` is followed as ``MemTracker`` follows it. Unlike torch's
``MemTracker`` it keeps no per-module state, so pipeline schedules that interleave the forward and backward of
many micro-batches through the same modules are counted as they run, at O(1) per op.

**Shadows** (balanced routing). Fake tensors hold no data, but megatron-core's MoE token dispatchers size their
buffers from data: how many tokens each expert receives (``routing_map.sum(0)``, copied to the host as split
sizes for all-to-all and per-expert GEMMs) and the tokens selected for the local experts (``masked_select``).
The mode keeps a real CPU "shadow" for each small tensor whose values are known: created constant (``zeros``,
``full``, ``arange``, ...), computed by an op from shadowed inputs only, or gathered/reduced by a collective
from a shadowed input (every rank is taken to hold the same values: routing is balanced across ranks). The
routing decision itself, ``topk`` over the router's scores, gets a balanced shadow: token t goes to experts
(t*k + j) mod E, j < k, so every expert receives T*k/E tokens (to within one). A data-dependent op
(``masked_select``, ``nonzero``, ``.item()``, ``.tolist()``) then reads its size or value from the shadows.
Shadows are kept only for tensors of at most ``SHADOW_NUMEL`` elements (the routing map of a micro-batch is
tokens x experts); a data-dependent op on an unshadowed tensor is an error that names the op, except
``.item()`` of a floating-point scalar (a loss, a norm, a scale: no size depends on it), which reads 1.0.

This is the estimate's one assumption about data: perfectly balanced routing, the state the load-balancing
loss drives to. A skewed router makes some experts' inputs larger; the estimate does not price that.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensor
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

from ....fakestep.result import EstimateError

aten = torch.ops.aten
_DEBUG = bool(os.environ.get("INFRARSI_DEBUG_SHADOWS"))
SHADOW_NUMEL = 1 << 23  # 8M elements: a routing map of 64K tokens x 128 experts
# glibc malloc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 4 MiB x sizeof(long)): an
# allocation of at least this is always its own mmap, unmapped when freed; a smaller one comes from the heap once
# the threshold has risen past it (it rises to the size of each mmapped chunk freed), and the heap keeps its high-water
# mark. overhead.py prices the two differently.
MMAP_MAX = 32 * 2**20


# --------------------------------------------------------------------------- storages
def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    from torch.distributed._tools.common_utils import get_untyped_storages

    return list(get_untyped_storages(t))


class StorageTracker(TorchDispatchMode):
    """Live storage bytes by category, and the snapshot at their peak (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = WeakIdKeyDictionary()  # storage -> [category, bytes]
        self.current: dict[str, int] = {}
        self.total = 0
        self.peak = 0
        self.peak_snapshot: dict[str, int] = {}
        self.phase: str | None = None  # None: Activation/Temp by autograd; else this category
        # live bytes in storages under / at or over MMAP_MAX, their high-water marks, and the small bytes of the
        # state registered before the step (heap_peaks())
        self.small = self.large = self.small_max = self.large_max = self.small_state = 0
        self._resize = torch.UntypedStorage.resize_

    # registration of the state that exists before the step
    def register(self, category: str, *tensors: Any) -> None:
        for t in tree_flatten(list(tensors))[0]:
            if isinstance(t, torch.Tensor):
                for st in _storages(t):
                    if st not in self.live:
                        self._add(st, category)

    def _add(self, st: torch.UntypedStorage, category: str) -> None:
        n = int(st.nbytes())
        entry = [category, n]
        self.live[st] = entry
        self._count(category, n)
        self._size_class(0, n)
        weakref.finalize(st, self._free, entry)

    def _count(self, category: str, n: int) -> None:
        self.current[category] = self.current.get(category, 0) + n
        self.total += n
        if self.total > self.peak:
            self.peak = self.total
            self.peak_snapshot = {k: v for k, v in self.current.items() if v}

    def _free(self, entry: list) -> None:
        self.current[entry[0]] -= entry[1]
        self.total -= entry[1]
        self._size_class(entry[1], 0)

    def _size_class(self, old: int, new: int) -> None:
        """A storage of ``old`` bytes is now ``new`` bytes (0: none): the heap's and the mmapped bytes follow."""
        for n, sign in ((old, -1), (new, 1)):
            if n >= MMAP_MAX:
                self.large += sign * n
            elif n:
                self.small += sign * n
        self.small_max, self.large_max = max(self.small_max, self.small), max(self.large_max, self.large)

    def heap_peaks(self) -> dict[str, int]:
        """The step's high-water marks of heap-sized (under MMAP_MAX) and mmapped storage bytes, the heap-sized
        bytes of the state before it, and the tracked peak (bytes)."""
        return {"small_max": self.small_max, "large_max": self.large_max, "small_state": self.small_state,
                "tracked_peak": self.peak}

    def category(self) -> str:
        if self.phase is not None:
            return self.phase
        return "Temp" if torch._C._current_graph_task_id() != -1 else "Activation"

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in self.current.items() if v}

    def __enter__(self):
        tracker = self
        resize = self._resize

        def resize_(st: torch.UntypedStorage, size: int):  # not seen by dispatch modes
            entry = tracker.live.get(st)
            out = resize(st, size)
            if entry is not None and entry[1] != int(st.nbytes()):
                delta = int(st.nbytes()) - entry[1]
                entry[1] += delta
                tracker._count(entry[0], delta)
                tracker._size_class(entry[1] - delta, entry[1])
            return out

        torch.UntypedStorage.resize_ = resize_
        self.small_state = self.small
        self.small_max, self.large_max = self.small, self.large  # the step's high-water marks, from its start
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        cat = None
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                for st in _storages(t):
                    if st not in self.live:
                        cat = cat or self.category()
                        self._add(st, cat)
        return out


# --------------------------------------------------------------------------- shadows
_CREATION = {aten.zeros, aten.ones, aten.full, aten.arange, aten.zeros_like, aten.ones_like, aten.full_like,
             aten.scalar_tensor, aten.new_zeros, aten.new_ones, aten.new_full, aten.eye, aten.linspace}
_LIKE = {aten.zeros_like, aten.ones_like, aten.full_like, aten.new_zeros, aten.new_ones, aten.new_full}
_INPLACE_SET = {aten.fill_, aten.zero_, aten.copy_}


def _caller() -> str:
    """The innermost megatron-core frame of the current stack, for error messages."""
    import traceback

    for f in reversed(traceback.extract_stack()):
        if "megatron/core" in f.filename:
            return f" (at {f.filename.split('site-packages/')[-1]}:{f.lineno}: {(f.line or '').strip()[:80]})"
    return ""


class Shadows(TorchDispatchMode):
    """Real values for small tensors whose values are known, and balanced routing (see the module doc)."""

    def __init__(self) -> None:
        super().__init__()
        self.shadow = WeakIdKeyDictionary()  # fake tensor -> real CPU tensor, same shape and dtype

    # ---------------------------------------------------------------- helpers
    def _get(self, x: Any):
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
            return x  # a real constant: its own shadow
        return self.shadow.get(x) if isinstance(x, torch.Tensor) else None

    def _real(self, tree: Any):
        """``tree`` with each tensor replaced by its shadow; None when a tensor has none."""
        missing = []

        def swap(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
                return x  # a real constant (``torch.tensor([...])`` under the fake mode): its own shadow
            if isinstance(x, torch.Tensor):
                s = self.shadow.get(x)
                if s is None:
                    missing.append(x)
                return s
            if isinstance(x, torch.device) and x.type != "cpu":
                return torch.device("cpu")
            return x

        out = tree_map(swap, tree)
        return None if missing else out

    def _attach(self, fake_out: Any, real_out: Any) -> None:
        fl, _ = tree_flatten(fake_out)
        rl, _ = tree_flatten(real_out)
        with unset_fake_temporarily():
            for f, r in zip(fl, rl):
                if isinstance(f, torch.Tensor) and isinstance(r, torch.Tensor) and f.shape == r.shape \
                        and f.numel() <= SHADOW_NUMEL:
                    self.shadow[f] = r.to(f.dtype)

    def _compute(self, func, args, kwargs):
        if func._overloadpacket in _LIKE:  # zeros_like(x), x.new_ones(...): only x's shape, dtype matter
            with unset_fake_temporarily():
                x = args[0]
                args = (torch.empty(x.shape, dtype=x.dtype), *args[1:])
        real = self._real((args, kwargs))
        if real is None:
            return None
        rargs, rkwargs = real
        rkwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in rkwargs.items()}
        with unset_fake_temporarily():
            return func(*rargs, **rkwargs)

    @staticmethod
    def _fake_like(real: Any):
        def mk(r):
            if isinstance(r, torch.Tensor):
                return torch.empty(r.shape, dtype=r.dtype)
            return r

        return tree_map(mk, real)

    # ---------------------------------------------------------------- the mode
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        if packet is aten._local_scalar_dense:
            s = self._get(args[0])
            if s is None and isinstance(args[0], FakeTensor) and args[0].constant is not None:
                s = args[0].constant
            if s is not None:
                with unset_fake_temporarily():
                    return s.item()
            if args[0].is_floating_point():
                return 1.0
            raise EstimateError(f"a data-dependent integer ({func}) of a tensor the estimate has no values for: "
                                f"the fake step cannot size what depends on it{_caller()}")
        if packet is aten.topk and self._get(args[0]) is None and args[0].dim() == 2:
            return self._balanced_topk(func, args, kwargs)
        if packet is aten.masked_select and self._get(args[1]) is not None and isinstance(args[0], FakeTensor):
            return self._masked_select(func, args, kwargs)
        try:
            out = func(*args, **kwargs)
        except (DynamicOutputShapeException, DataDependentOutputException):
            real = self._compute(func, args, kwargs)
            if real is None:
                raise EstimateError(f"{func} needs the values of a tensor the estimate has no values for"
                                    f"{_caller()}") from None
            out = self._fake_like(real)
            self._attach(out, real)
            return out
        if packet in _COLLECTIVE:
            _COLLECTIVE[packet](self, args, kwargs)
            return out
        if func.namespace in ("c10d", "_c10d_functional"):  # any other collective: its buffers' values are unknown
            for t in tree_flatten((args, kwargs))[0]:
                if isinstance(t, torch.Tensor):
                    self.shadow.pop(t, None)
            return out
        self._propagate(func, packet, args, kwargs, out)
        return out

    def _propagate(self, func, packet, args, kwargs, out) -> None:
        tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        outs = [x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
        if not outs or any(o.numel() > SHADOW_NUMEL for o in outs):
            self._drop_mutated(func, args)
            return
        if packet in _CREATION or (tensors and all(self._get(t) is not None for t in tensors)):
            if _DEBUG and tensors:
                print(f"[shadows] {func}", file=sys.stderr)
            real = self._compute(func, args, kwargs)
            if real is not None:
                if func._schema.is_mutable and tensors:  # in place: the shadow of self was updated
                    self._attach(args[0], self.shadow[args[0]])
                self._attach(out, real)
                return
        if packet in _INPLACE_SET and tensors:
            with unset_fake_temporarily():
                if self._set_inplace(packet, args):
                    return
        if _DEBUG and any(self._get(t) is not None for t in tensors):
            known = [self._get(t) is not None for t in tensors]
            print(f"[shadows] lost at {func}: {known}{_caller()}", file=sys.stderr)
        self._drop_mutated(func, args)

    def _set_inplace(self, packet, args) -> bool:
        """zero_, fill_ with a number, copy_ from a shadowed tensor: the destination's values are known."""
        dst = args[0]
        if dst.numel() > SHADOW_NUMEL:
            return False
        if packet is aten.zero_:
            self.shadow[dst] = torch.zeros(dst.shape, dtype=dst.dtype)
        elif packet is aten.fill_ and not isinstance(args[1], torch.Tensor):
            self.shadow[dst] = torch.full(dst.shape, args[1], dtype=dst.dtype)
        elif packet is aten.copy_ and self._get(args[1]) is not None:
            self.shadow[dst] = torch.broadcast_to(self._get(args[1]), dst.shape).to(dst.dtype).clone()
        else:
            return False
        return True

    def _drop_mutated(self, func, args) -> None:
        if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
            self.shadow.pop(args[0], None)

    def _balanced_topk(self, func, args, kwargs):
        values, indices = func(*args, **kwargs)
        x, k = args[0], int(args[1])
        dim = int(args[2]) if len(args) > 2 else int(kwargs.get("dim", -1))
        if dim in (-1, 1) and indices.numel() <= SHADOW_NUMEL:
            rows, n = x.shape[0], x.shape[1]
            with unset_fake_temporarily():
                t = torch.arange(rows).unsqueeze(1) * k + torch.arange(k).unsqueeze(0)
                self.shadow[indices] = (t % n).to(indices.dtype)
        return values, indices

    def _masked_select(self, func, args, kwargs):
        x, mask = args[0], args[1]
        m = self._get(mask)
        shape = torch.broadcast_shapes(tuple(x.shape), tuple(m.shape))
        with unset_fake_temporarily():
            n = int(torch.broadcast_to(m, shape).sum())
        out = torch.empty((n,), dtype=x.dtype, device=x.device)
        sx = self._get(x)
        if sx is not None:
            with unset_fake_temporarily():
                self.shadow[out] = torch.masked_select(sx, m)
        return out


def _group_size(group: Any) -> int:
    try:
        return int(group.size())
    except Exception:  # noqa: BLE001 - a group name (functional collectives): resolve it
        from torch.distributed.distributed_c10d import _resolve_process_group

        return int(_resolve_process_group(group).size())


def _allgather_base(mode: Shadows, args, kwargs) -> None:  # (output, input, group, ...)
    with unset_fake_temporarily():
        _allgather_base_real(mode, args)


def _allgather_base_real(mode: Shadows, args) -> None:
    out, inp = args[0], args[1]
    s = mode._get(inp)
    if s is not None and out.numel() <= SHADOW_NUMEL and out.numel() % max(1, inp.numel()) == 0:
        reps = out.numel() // max(1, inp.numel())
        mode.shadow[out] = s.reshape(-1).repeat(reps).reshape(out.shape).to(out.dtype)
    else:
        mode.shadow.pop(out, None)


def _allgather(mode: Shadows, args, kwargs) -> None:  # (output_tensors [[...]], input_tensors [...], group, ...)
    with unset_fake_temporarily():
        _allgather_real(mode, args)


def _allgather_real(mode: Shadows, args) -> None:
    outs, ins = args[0], args[1]
    for out_list, inp in zip(outs, ins):
        s = mode._get(inp)
        for o in out_list:
            if s is not None:
                mode.shadow[o] = s.clone()
            else:
                mode.shadow.pop(o, None)


def _allreduce(mode: Shadows, args, kwargs) -> None:  # (tensors [...], group, reduce_op, ...)
    with unset_fake_temporarily():
        _allreduce_real(mode, args)


def _allreduce_real(mode: Shadows, args) -> None:
    tensors, group, op = args[0], args[1], args[2]
    name = str(getattr(op, "op", op)).upper()
    for t in tensors:
        s = mode._get(t)
        if s is None:
            continue
        if "SUM" in name:
            mode.shadow[t] = s * _group_size(group)
        elif not any(w in name for w in ("MAX", "MIN", "AVG")):
            mode.shadow.pop(t, None)


_COLLECTIVE = {}
for _name, _fn in (("_allgather_base_", _allgather_base), ("allgather_", _allgather), ("allreduce_", _allreduce)):
    _op = getattr(torch.ops.c10d, _name, None)
    if _op is not None:
        _COLLECTIVE[_op] = _fn
