"""Instruments around a candidate's call: which torch functions its host code ran (and on how many
elements), how many Triton kernels it launched, which namespaces it patched; and small tensor helpers.
Used by dynamic.py (the candidate's process in verification) and insitu.py (every call in training).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
from types import ModuleType
from typing import Any

# Host-side torch calls a candidate may make around its kernels (by __name__), whatever their size:
# allocation, metadata, views, dtype casts, and .sum() to reduce per-program partials in a fixed order.
# Any other call (mul, rsqrt, ne, div, ...) is bookkeeping when every tensor it touches has at most as
# many elements as the inputs have rows, and host compute (a fallback) when it is larger.
HOST_ALLOWED = frozenset(
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros "
    "__get__ size stride dim numel shape dtype device is_contiguous data_ptr element_size storage_offset "
    "untyped_storage is_floating_point get_device __len__ __format__ __repr__ __hash__ promote_types result_type "
    "is_tensor "
    "view view_as reshape reshape_as contiguous flatten unflatten unsqueeze squeeze expand expand_as "
    "transpose permute t unbind chunk split narrow select __getitem__ detach "
    "to float bfloat16 half double "
    "sum "
    # attribute stores (autograd.Function.apply sets tensor attributes on a non-leaf input the second time it sees
    # it): no arithmetic
    "__set__".split()
)
_EMPTY_FUNCS = frozenset("empty empty_like empty_strided new_empty new_empty_strided".split())
# Output tensors reached through these autograd nodes still come from the candidate's Function.
_VIEW_NODES = ("View", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Permute", "Select", "Unbind", "Split",
               "Alias", "Expand", "Slice", "AsStrided")


# --------------------------------------------------------------------------- watching the candidate
def _watch_mode(*, row_budget: int, poison: bool):
    from torch.overrides import TorchFunctionMode

    class Watch(TorchFunctionMode):
        """Records host-side torch calls, sorted by work: bookkeeping (every tensor touched has at most
        row_budget elements) or host compute; with poison, fills fresh allocations with NaN (ints with
        their minimum)."""

        def __init__(self) -> None:
            super().__init__()
            self.in_kernel = 0
            self.launches = 0
            self.host_ops: dict[str, int] = {}
            self.bookkeeping: dict[str, int] = {}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            import torch

            out = func(*args, **(kwargs or {}))
            if self.in_kernel:  # triton's own launch plumbing (host copies in the interpreter)
                return out
            name = getattr(func, "__name__", repr(func))
            if name not in HOST_ALLOWED:
                kind = self.bookkeeping if _largest((args, kwargs, out)) <= row_budget else self.host_ops
                kind[name] = kind.get(name, 0) + 1
            if poison and name in _EMPTY_FUNCS and isinstance(out, torch.Tensor) and out.numel():
                if out.is_floating_point():
                    out.fill_(float("nan"))
                elif out.dtype != torch.bool:
                    out.fill_(torch.iinfo(out.dtype).min)
            return out

    return Watch()


@contextlib.contextmanager
def _count_launches(watch):
    """Count Triton kernel launches (interpreted or compiled) and hide their internals from `watch`."""
    classes = []
    from triton.runtime.jit import JITFunction

    classes.append(JITFunction)
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    originals = {cls: cls.__dict__["run"] for cls in classes if "run" in cls.__dict__}

    def wrap(orig):
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                watch.launches += 1
            watch.in_kernel += 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                watch.in_kernel -= 1

        return run

    for cls, orig in originals.items():
        cls.run = wrap(orig)
    builder = sys.modules.get("triton.runtime.interpreter")
    builder = getattr(builder, "interpreter_builder", None)
    saved_options = getattr(builder, "options", None)
    if saved_options is not None:
        # The interpreter checks every int add/mul for int32 overflow: ~25% of its time. At the
        # verifier's small shapes no offset comes near 2^31, so the check can find nothing here.
        builder.options = dataclasses.replace(saved_options, sanitize_overflow=False)
    try:
        yield
    finally:
        for cls, orig in originals.items():
            cls.run = orig
        if saved_options is not None:
            builder.options = saved_options


class _Snapshot:
    """Identity of every public callable in the namespaces a cheat would patch."""

    def __init__(self, namespaces: dict[str, Any]) -> None:
        self.namespaces = namespaces
        self.before = {label: self._take(ns) for label, ns in namespaces.items()}

    @staticmethod
    def _take(ns) -> dict[str, Any]:
        d = vars(ns)
        return {k: v for k, v in d.items()
                if (not k.startswith("_") or (k.startswith("__") and k.endswith("__")))
                and callable(v) and not isinstance(v, ModuleType)}

    def changed_and_restore(self) -> list[str]:
        changed = []
        for label, ns in self.namespaces.items():
            now = self._take(ns)
            for k, v in self.before[label].items():
                if now.get(k) is not v:
                    changed.append(f"{label}.{k}")
                    with contextlib.suppress(Exception):
                        setattr(ns, k, v)
            for k in now.keys() - self.before[label].keys():
                changed.append(f"{label}.{k}")
                with contextlib.suppress(Exception):
                    delattr(ns, k)
        return changed


def _largest(obj) -> int:
    """The most elements of any tensor in obj (nested tuples, lists and dicts)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, (tuple, list)):
        return max((_largest(o) for o in obj), default=0)
    if isinstance(obj, dict):
        return max((_largest(o) for o in obj.values()), default=0)
    return 0


def _rows_of(tensors) -> int:
    """Rows of the widest input: its elements over its last dimension (at least 1)."""
    return max([1] + [t.numel() // max(t.shape[-1], 1) for t in tensors if t.dim()])


def _storage_id(t) -> int:
    return t.untyped_storage().data_ptr()


def _backward(outs, grad_outs, inputs):
    """torch.autograd.grad without the Python-level override hook, so the watch sees inside backward."""
    from torch.autograd.graph import _engine_run_backward  # private: torch.autograd.grad's own engine call

    return _engine_run_backward(tuple(outs), tuple(grad_outs), False, False, tuple(inputs), True, False)


def _poison_allocator(native) -> None:
    """On CUDA, hand the caching allocator NaN-filled blocks of the outputs' sizes to reuse."""
    import torch

    if not torch.cuda.is_available():
        return  # on the CPU the watch fills every fresh torch.empty* with NaN instead
    blocks = [torch.full((max(o.numel(), 1) * 2,), float("nan"), dtype=torch.float32, device="cuda") for o in native]
    del blocks


def _same_bits(a, b) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():  # compare bits: NaN == NaN, -0.0 != 0.0
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    return torch.equal(a, b)


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _kinds(xs) -> str:
    return ", ".join(type(x).__name__ for x in xs)


def _fmt(params) -> str:
    return "(" + ", ".join(n if d is inspect.Parameter.empty else f"{n}={d!r}" for n, d in params) + ")"
