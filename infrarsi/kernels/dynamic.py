"""The candidate's process: it runs a kernel candidate on the inputs the checker sends, and sends back what the
candidate returned. It judges no value.

    python -m infrarsi.kernels.dynamic      # stdin: torch.save({"path", "op", "settings", "items"}); see checker.py

The checker (checker.py, in the verifier's process) starts this process inside the isolation (execute/isolation.py),
writes the job to its stdin, and reads back one torch.save'd answer from its stdout: per item the candidate's outputs
and the gradients it gave, as tensors, and the findings of the watch below. The checker compares the values with
its own fp64 truth; whatever this process (or the candidate in it) says can only add reasons to fail. Once the job
is read, fd 1 points at stderr: nothing the candidate prints reaches the answer's channel by accident.

Inputs are made training-like here, as the workload's calls see them: an activation that requires grad is a
non-leaf tensor (the output of an op, strided as the checker sent it), a 1-D weight that requires grad is an
``nn.Parameter``. The candidate is loaded by the same loader, and called positionally through the same entry
point (``module.forward(...)``), as in the training workload; nothing on the call stack names a check.

What the watch finds here (each one reason, ``code: message``):

patched        time.*, torch.*, torch.Tensor.*, triton.testing.*, or this module replaced
no-triton      a forward or backward call that launched no Triton kernel
host-op        torch math on the host that does O(rows x cols) work (a fallback in disguise); allocation,
               views, casts and O(rows) bookkeeping (counting valid targets, dividing a sum by the count)
               are allowed
autograd       outputs whose gradient does not come from the candidate's own torch.autograd.Function
alias          a result sharing memory with an input, another result, or a result of an earlier call
stale          an earlier call's result changed later (a reused output buffer)
mutated-input  an input (or the hidden part of the buffer it views) changed
signature, error, timeout   a forward() signature unlike the reference's, an exception, the checks past
               VerifySettings.timeout_s
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import io
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from .instrument import (_VIEW_NODES, _as_tuple, _backward, _count_launches, _fmt, _kinds, _poison_allocator,
                         _rows_of, _same_bits, _Snapshot, _storage_id, _watch_mode)
from .loader import ensure_interpreter, load_candidate, load_reference


@dataclass(frozen=True, kw_only=True)
class Case:
    """One (shape family, dtype, seed) run: per compared tensor, the largest errors."""

    family: str
    dtype: str
    seed: int
    ok: bool
    errors: dict[str, dict[str, float]] = field(default_factory=dict)  # "out0"/"grad.x" -> max_abs, max_rel, atol, rtol
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class VerifySettings:
    """How hard the verifier looks (not a knob ``Setting``). The defaults fit a 2-core CPU running the Triton
    interpreter (< 10 s a candidate)."""

    seeds_per_case: int = 2  # fresh seeds per (family, dtype) for the small families...
    production_seeds: int = 1  # ...and for the production-width ones (few rows, real widths)
    determinism_families: tuple[str, ...] = ("batch",)  # the many-program family: rerun on identical inputs...
    determinism_reruns: int = 1  # ...this many extra times, bitwise compared
    families: tuple[str, ...] | None = None  # None: every family the reference defines (+ "model" below)
    model: tuple[tuple[str, int], ...] | None = None  # the contract's model dims, e.g. (("hidden", 4096), ...)
    seed: int | None = None  # None: fresh seeds from os.urandom; set to reproduce a run
    timeout_s: float = 300.0  # the dynamic checks of one candidate; the shipped ones take 2-6 s of CPU

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> VerifySettings:
        d = dict(d)
        d["determinism_families"] = tuple(d["determinism_families"])
        d["families"] = tuple(d["families"]) if d["families"] is not None else None
        d["model"] = tuple((str(k), int(v)) for k, v in d["model"]) if d["model"] is not None else None
        return cls(**d)


def expected_cases(ref: ModuleType, settings: VerifySettings) -> set[tuple[str, str]]:
    """The (family, dtype) pairs a complete run of the checks reports."""
    return {(f, str(d).removeprefix("torch.")) for f in families_of(ref, settings) for d in dtypes_of(ref, f)}


def dtypes_of(ref: ModuleType, family: str) -> tuple:
    """The production-width families run in the training dtypes (bf16, fp16) only: fp32 is checked at every
    small shape and at the contract's own model shape, and fp32 at 128k columns would double the time."""
    if family in getattr(ref, "PRODUCTION", ()):
        return tuple(d for d in ref.DTYPES if str(d) != "torch.float32") or tuple(ref.DTYPES)
    return tuple(ref.DTYPES)


def families_of(ref: ModuleType, settings: VerifySettings) -> tuple[str, ...]:
    fams = settings.families or tuple(f for f in ref.FAMILIES if f != "model")
    if settings.model is not None and "model" not in fams:
        fams = (*fams, "model")
    return fams


class _Child:
    """Runs the candidate on each item the checker sent; keeps the results' watch findings in ``reasons``."""

    def __init__(self, path: str, op: str, reasons: list[str]) -> None:
        self.path, self.op, self.reasons = path, op, reasons
        self.kept_outputs: list[tuple[str, Any, Any]] = []  # (label, tensor, snapshot): every result so far
        self.seen: set = set()
        self.poison = True

    def fail(self, code: str, message: str, key: Any = None) -> None:
        """Record one reason; repeats of the same finding (same key) on later items are dropped."""
        key = (code, key if key is not None else message)
        if key not in self.seen:
            self.seen.add(key)
            self.reasons.append(f"{code}: {message}")

    def serve(self, items: list[dict], results: list[dict]) -> None:
        ensure_interpreter()  # before the first import of triton
        import time as time_mod

        import torch
        import torch.nn.functional as F
        import triton
        import triton.testing

        self.ref = load_reference(self.op)  # its forward's signature only: the truth is the checker's
        self.device = _device()
        self.snap = _Snapshot({"time": time_mod, "torch": torch, "torch.Tensor": torch.Tensor,
                               "torch.nn.functional": F, "torch.autograd": torch.autograd, "torch.cuda": torch.cuda,
                               "triton": triton, "triton.testing": triton.testing, "builtins": builtins,
                               "math": math, "checks": sys.modules[__name__]})
        try:
            self.module = load_candidate(self.path)
        except Exception as e:  # the candidate's own import error is a finding, not a crash
            self.fail("error", f"importing the candidate raised {type(e).__name__}: {e}")
            return
        if self._patched("at import") or not self._signature_ok():
            return
        for item in items:
            self.poison = bool(item["poison"])
            got = self._refill(item) if item["kind"] == "refill" else self._one(item)
            if got is None:
                return  # the candidate patched something: nothing after this can be trusted
            results.append({"id": int(item["id"]), **got})
            self._stale()

    # -- pieces --------------------------------------------------------------------------------
    def _patched(self, when: str) -> bool:
        changed = self.snap.changed_and_restore()
        if changed:
            self.fail("patched", f"{', '.join(sorted(changed)[:6])} replaced {when} (timer/torch patching); "
                                 "restored, further checks skipped")
        return bool(changed)

    def _signature_ok(self) -> bool:
        want = [(p.name, p.default) for p in inspect.signature(self.ref.forward).parameters.values()]
        got = [(p.name, p.default) for p in inspect.signature(self.module.forward).parameters.values()]
        if want != got:
            self.fail("signature", f"forward{_fmt(got)} differs from the reference's forward{_fmt(want)}")
            return False
        return True

    def _call(self, fn, phase: str, *, row_budget: int):
        """Run fn under the watch; returns (value, watch) or (exception, None)."""
        watch = _watch_mode(row_budget=row_budget, poison=self.poison)
        try:
            with _count_launches(watch), watch:
                value = fn()
        except Exception as e:
            cause = e
            while cause is not None:  # the interpreter wraps what a kernel raised, the deadline's alarm too
                if isinstance(cause, _Timeout):
                    raise cause
                cause = cause.__cause__ or cause.__context__
            self.fail("error", f"{phase} raised {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                      key=(phase.split()[0], type(e).__name__))
            return e, None
        if watch.launches == 0:
            self.fail("no-triton", f"{phase} launched no Triton kernel (a fallback?)", key=phase.split()[0])
        if watch.host_ops:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(watch.host_ops.items()))
            self.fail("host-op", f"{phase} computes with torch on the host, outside Triton: {ops} (each touches "
                                 f"more elements than the inputs have rows, {row_budget}: O(rows x cols) work)",
                      key=(phase.split()[0], ops))
        return value, watch

    def _inputs(self, item: dict):
        """The item's inputs on this device, as training holds them: activations that require grad are non-leaf
        tensors (with the strides the checker sent), 1-D weights that require grad are nn.Parameters."""
        args = [training_like(a, g, self.device) for a, g in zip(item["args"], item["grad"])]
        kwargs = {k: training_like(v, item["grad_kw"].get(k, False), self.device) for k, v in item["kwargs"].items()}
        return args, kwargs

    def _forward(self, args, kwargs):
        """The candidate's forward called as the workload calls it: every argument positional."""
        bound = inspect.signature(self.ref.forward).bind(*args, **kwargs)
        return self.module.forward(*bound.args, **bound.kwargs)

    def _refill(self, item: dict) -> dict | None:
        """Call forward on inputs A, refill A's tensors in place with B's values, call again: both answers go back
        (a cache keyed on the input object or its address returns A's the second time)."""
        import torch

        label = item["label"]
        args, kwargs = self._inputs(item)
        keep = []
        for phase in ("first", "refilled"):
            budget = _rows_of([t for t in args if torch.is_tensor(t)])
            outs, watch = self._call(lambda: self._forward(args, kwargs), f"forward on {label} ({phase} inputs)",
                                     row_budget=budget)
            if self._patched(f"during forward on {label}"):
                return None
            if watch is None:
                return {"outs": None}  # the error is recorded; the main cases say the rest
            keep.append([_sent(o) for o in _as_tuple(outs)])
            with torch.no_grad():
                for a, b in zip(args, item["b_args"]):
                    if torch.is_tensor(a):
                        a.detach().copy_(b.to(a.device))
        return {"outs": keep[0], "outs2": keep[1]}

    def _one(self, item: dict) -> dict | None:
        """One item: the candidate's forward and backward under the watch. None if patched."""
        import torch

        label = item["label"]
        args, kwargs = self._inputs(item)
        names = list(inspect.signature(self.ref.forward).parameters)
        tensors = [(names[i], a) for i, a in enumerate(args) if torch.is_tensor(a)]
        tensors += [(k, v) for k, v in kwargs.items() if torch.is_tensor(v)]
        watched = [(n, t) for n, t in tensors] + [(f"{n} (its base buffer)", t._base) for n, t in tensors
                                                  if t._base is not None]
        before = [(n, t.detach().clone()) for n, t in watched]
        diff = [(n, t) for n, t in tensors if t.requires_grad]
        budget = _rows_of([t for _, t in tensors])
        grad_outs = [g.to(self.device) for g in item["grad_outs"]]

        _poison_allocator(grad_outs)
        outs, watch = self._call(lambda: self._forward(args, kwargs), f"forward on {label}", row_budget=budget)
        if self._patched(f"during forward on {label}"):
            return None
        if watch is None:
            return {"outs": None}
        outs = _as_tuple(outs)
        if not all(torch.is_tensor(o) for o in outs) or len(outs) != len(grad_outs):
            self.fail("shape-dtype", f"forward returned {len(outs)} value(s) ({_kinds(outs)}); the reference returns "
                                     f"{len(grad_outs)} tensor(s)")
            return {"outs": None}
        out_names = ["out"] if len(outs) == 1 else [f"out{i}" for i in range(len(outs))]
        results = dict(zip(out_names, outs))
        self._autograd_origin(results, label)
        out_snap = {k: v.detach().clone() for k, v in results.items()}

        grads: dict[str, Any] = {}
        live = [(o, go) for o, go in zip(outs, grad_outs) if o.requires_grad and o.shape == go.shape]
        if diff and not live:
            self.fail("autograd", f"no output requires grad although inputs do [{label}]")
        elif diff:
            got, watch = self._call(lambda: _backward([o for o, _ in live], [go.to(o.dtype) for o, go in live],
                                                      [t for _, t in diff]), f"backward on {label}", row_budget=budget)
            if self._patched(f"during backward on {label}"):
                return None
            if watch is not None:
                grads = {n: gr for (n, _), gr in zip(diff, got) if gr is not None}
            for k, v in results.items():
                if not _same_bits(v.detach(), out_snap[k]):
                    self.fail("stale", f"backward overwrote the forward result {k} [{label}]", key=k)

        # mutation: every input (and the buffer it views) bitwise unchanged
        for (n, t), (_, b) in zip(watched, before):
            if not _same_bits(t.detach(), b):
                self.fail("mutated-input", f"the call changed input {n} [{label}]")

        # aliasing: results must be fresh memory
        everything = {**results, **{f"grad.{n}": g for n, g in grads.items()}}
        input_ids = {_storage_id(t) for _, t in watched}
        seen: dict[int, str] = {}
        for k, v in everything.items():
            sid = _storage_id(v)
            if sid in input_ids:
                self.fail("alias", f"{k} shares memory with an input [{label}]")
            if sid in seen:
                self.fail("alias", f"{k} shares memory with {seen[sid]} [{label}]")
            seen[sid] = k
            for old_label, old, _ in self.kept_outputs:
                if _storage_id(old) == sid:
                    self.fail("alias", f"{k} reuses the memory of an earlier call's {old_label} (a cached output "
                                       f"buffer) [{label}]")
                    break
        for k, v in everything.items():
            self.kept_outputs.append((f"{k} ({label}, item {item['id']})", v, v.detach().clone()))
        return {"outs": [_sent(o) for o in outs], "grads": {n: _sent(g) for n, g in grads.items()}}

    def _autograd_origin(self, results: dict, label: str) -> None:
        import torch

        for k, v in results.items():
            if not v.requires_grad:
                continue
            node = v.grad_fn
            while node is not None and not isinstance(node, torch.autograd.function.BackwardCFunction):
                if not any(s in type(node).__name__ for s in _VIEW_NODES):
                    break
                node = node.next_functions[0][0] if node.next_functions else None
            if not isinstance(node, torch.autograd.function.BackwardCFunction):
                self.fail("autograd", f"{k}'s gradient comes from {type(v.grad_fn).__name__}, not from the candidate's "
                                      f"own torch.autograd.Function [{label}]")

    def _stale(self) -> None:
        for label, t, snap in self.kept_outputs:
            if not _same_bits(t.detach(), snap):
                self.fail("stale", f"{label} changed after it was returned (the buffer was reused by a later call)")


def training_like(t, requires_grad: bool, device: str):
    """``t`` on ``device`` as training holds it: a 1-D tensor that requires grad is an nn.Parameter (a weight); any
    other that requires grad is a non-leaf tensor -- the output of an op on a leaf upstream -- with t's shape,
    strides and offset over a buffer of its own (a strided view stays a view); the rest as sent."""
    import torch

    if not torch.is_tensor(t):
        return t
    t = t.to(device)
    if not requires_grad:
        return t
    if t.dim() == 1:
        return torch.nn.Parameter(t.detach().clone())
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = t.new_empty(0).set_(t.untyped_storage(), 0, (n,), (1,))  # the whole buffer t views
    upstream = flat.detach().clone().requires_grad_()  # a leaf upstream (the layer before)
    act = upstream.clone()  # its output: a non-leaf with a grad_fn, as training's activations are
    if t.is_contiguous() and t.storage_offset() == 0 and t.numel() == n:
        return act.view(t.shape)
    return act.as_strided(t.shape, t.stride(), t.storage_offset())


def _sent(t):
    """A result as it goes back: detached, on the CPU, its own copy."""
    return t.detach().to("cpu").clone()


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class _Timeout(BaseException):  # BaseException: a candidate's `except Exception` cannot swallow it
    pass


@contextlib.contextmanager
def _deadline(seconds: float):
    """Raise _Timeout in this thread after `seconds` (SIGALRM; only possible in the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def serve(job: dict) -> dict:
    """All items of one job in this process: {"reasons": the watch's findings, "results": per item the tensors}."""
    reasons: list[str] = []
    results: list[dict] = []
    settings = VerifySettings.from_json(job["settings"])
    with _deadline(settings.timeout_s):
        try:
            _Child(str(job["path"]), job["op"], reasons).serve(job["items"], results)
        except _Timeout:
            reasons.append(f"timeout: the dynamic checks ran past {settings.timeout_s:g} s (a hanging kernel?)")
    return {"reasons": reasons, "results": results}


def main() -> int:
    """Read the job from stdin (then close it), point fd 1 at stderr, run the items, write the answer to the
    original stdout."""
    import torch

    job = torch.load(io.BytesIO(sys.stdin.buffer.read()), weights_only=True)
    sys.stdin.close()
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the candidate prints goes to stderr
    sys.stdout = sys.stderr
    out = serve(job)
    torch.save(out, answer)
    answer.close()
    return 0


if __name__ == "__main__":
    if not os.environ.get("TRITON_INTERPRET"):
        import torch as _torch

        if not _torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    raise SystemExit(main())
