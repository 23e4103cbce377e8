"""The dynamic checks of a kernel candidate, run in a fresh Python process of their own.

    python -m infrarsi.kernels.dynamic      # stdin: {"nonce", "path" (PATH[@VARIANT]), "op", "settings"}; see verify.py

The parent (verify.py) starts this process, hands it a one-time nonce on stdin and reads back one
line ``<nonce> <json>``; the verdict is the parent's to write. The candidate is loaded by the same
loader, and called positionally through the same entry point (``module.forward(...)``), as in the
training workload; nothing on the call stack names a check.

What a candidate must survive here (each failure is one reason, ``code: message``):

patched        time.*, torch.*, torch.Tensor.*, triton.testing.*, the reference or this module replaced
no-triton      a forward or backward call that launched no Triton kernel
host-op        torch math on the host that does O(rows x cols) work (a fallback in disguise); allocation,
               views, casts and O(rows) bookkeeping (counting valid targets, dividing a sum by the count)
               are allowed
autograd       outputs whose gradient does not come from the candidate's own torch.autograd.Function
mismatch-forward / mismatch-backward
               any element of an output or gradient outside atol + rtol*|ref| of the fp64 reference, on
               fresh random inputs (new seeds every verification) over the reference's shape families --
               production widths (hidden 4096/8192, vocab 32k/128k) and the contract's own model shape
               included -- in fp32, bf16 and fp16
non-finite     NaN/inf in a result; on some cases fresh allocations are filled with NaN before each call,
               so an element the kernel never wrote shows up here
input-cache    inputs refilled in place with new values gave the old answer (a cache keyed on the input)
alias          a result sharing memory with an input, another result, or a result of an earlier call
stale          an earlier call's result changed later (a reused output buffer)
same-output    different inputs gave bitwise identical results (a cached answer)
mutated-input  an input (or the hidden part of the buffer it views) changed
nondeterministic  the same inputs gave bitwise different results (races, unordered atomics)
shape-dtype, signature, error   wrong shapes/dtypes, a forward() signature unlike the reference's, an exception
timeout        the checks ran past VerifySettings.timeout_s (a hanging kernel)
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
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


class _Exercise:
    """Runs the candidate on fresh inputs over the reference's families and dtypes, and judges it."""

    def __init__(self, path: str, op: str, settings: VerifySettings, reasons: list[str], cases: list[Case]) -> None:
        self.path, self.op, self.settings, self.reasons, self.cases = path, op, settings, reasons, cases
        self.kept_outputs: list[tuple[str, Any, Any]] = []  # (label, tensor, snapshot): every result so far
        self.seen: set = set()
        self.poison = True

    def fail(self, code: str, message: str, key: Any = None) -> None:
        """Record one reason; repeats of the same finding (same key) on later seeds are dropped."""
        key = (code, key if key is not None else message)
        if key not in self.seen:
            self.seen.add(key)
            self.reasons.append(f"{code}: {message}")

    def run(self) -> None:
        ensure_interpreter()  # before the first import of triton
        import time as time_mod

        import torch
        import torch.nn.functional as F
        import triton
        import triton.testing

        self.ref = load_reference(self.op)
        self.device = _device()
        snap = _Snapshot({"time": time_mod, "torch": torch, "torch.Tensor": torch.Tensor,
                          "torch.nn.functional": F, "torch.autograd": torch.autograd, "torch.cuda": torch.cuda,
                          "triton": triton, "triton.testing": triton.testing, "builtins": builtins,
                          "math": math, "reference": self.ref, "checks": sys.modules[__name__]})
        self.snap = snap
        try:
            self.module = load_candidate(self.path)
        except Exception as e:  # the candidate's own import error is a finding, not a crash
            self.fail("error", f"importing the candidate raised {type(e).__name__}: {e}")
            return
        if self._patched("at import"):
            return
        if not self._signature_ok():
            return
        rng = random.Random(self.settings.seed) if self.settings.seed is not None else random.SystemRandom()
        if self.settings.model is not None:  # the contract's own model: one more family, at its real widths
            self.ref.FAMILIES["model"] = self.ref.model_family(**dict(self.settings.model))
        production = set(getattr(self.ref, "PRODUCTION", ())) | {"model"}
        families = families_of(self.ref, self.settings)
        if not self._input_cache(families[0], self.ref.DTYPES[0], rng):
            return
        for family in families:
            n_seeds = self.settings.production_seeds if family in production else self.settings.seeds_per_case
            # NaN-filled allocations on some of a family's cases, at least one, never all: a kernel cannot
            # learn from the contents of its output buffer whether it is being watched
            dtypes = dtypes_of(self.ref, family)
            n_cases = n_seeds * len(dtypes)
            poison = [True, False][:n_cases] + [rng.random() < 0.5 for _ in range(n_cases - 2)]
            rng.shuffle(poison)
            for dtype in dtypes:
                prev = None
                for _ in range(n_seeds):
                    seed = rng.randrange(1, 2**31)
                    t0 = time.perf_counter()
                    self.poison = poison.pop()
                    got = self._one(family, dtype, seed)
                    if got is None:
                        return  # the candidate patched something: nothing after this can be trusted
                    results, case_ok, errors = got
                    if prev is not None:
                        self._different(prev, results, family, dtype)
                    prev = results
                    self.cases.append(Case(family=family, dtype=str(dtype).removeprefix("torch."), seed=seed,
                                           ok=case_ok, errors=errors, seconds=round(time.perf_counter() - t0, 4)))
                    self._stale()
                if getattr(self.ref, "DETERMINISTIC", True) and family in self.settings.determinism_families:
                    if not self._deterministic(family, dtype, seed=rng.randrange(1, 2**31)):
                        return

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

    def _inputs(self, family: str, dtype, seed: int):
        args, kwargs = self.ref.inputs(family, dtype, seed=seed, device=self.device)
        return list(args), dict(kwargs)

    def _forward(self, args, kwargs):
        """The candidate's forward called as the workload calls it: every argument positional."""
        bound = inspect.signature(self.ref.forward).bind(*args, **kwargs)
        return self.module.forward(*bound.args, **bound.kwargs)

    def _input_cache(self, family: str, dtype, rng) -> bool:
        """Call forward on inputs A, refill A's tensors in place with B's values, call again: the second
        answer must be B's (a cache keyed on the input object or its address returns A's)."""
        import torch

        label = f"{family}/{str(dtype).removeprefix('torch.')}"
        a_args, a_kwargs = self._inputs(family, dtype, rng.randrange(1, 2**31))
        b_args, b_kwargs = self._inputs(family, dtype, rng.randrange(1, 2**31))
        a_first = [a.detach().clone() if torch.is_tensor(a) else a for a in a_args]
        keep = []
        for phase in ("first", "refilled"):
            budget = _rows_of([t for t in a_args if torch.is_tensor(t)])
            outs, watch = self._call(lambda: self._forward(a_args, a_kwargs), f"forward on {label} ({phase} inputs)",
                                     row_budget=budget)
            if self._patched(f"during forward on {label}"):
                return False
            if watch is None:
                return True  # the error is recorded; the main cases say the rest
            keep.append(_as_tuple(outs))
            with torch.no_grad():
                for a, b in zip(a_args, b_args):
                    if torch.is_tensor(a):
                        a.detach().copy_(b.detach())
        def truth(args, kwargs):
            with torch.no_grad():
                return _as_tuple(self.ref.forward(*[a.detach().double() if torch.is_tensor(a) and a.is_floating_point()
                                                    else a for a in args], **kwargs))

        def close(got, want) -> bool:
            atol, rtol = self.ref.TOLERANCES[dtype]
            return all(torch.is_tensor(g) and g.shape == w.shape and bool(
                ((g.detach().double().cpu() - w.cpu()).abs() <= atol + rtol * w.cpu().abs()).all())
                for g, w in zip(got, want))

        # only a right first answer makes a wrong second one a cache: plain wrong answers are the cases' to report
        if close(keep[0], truth(a_first, a_kwargs)) and not close(keep[1], truth(b_args, b_kwargs)):
            self.fail("input-cache", f"forward on inputs refilled in place with new values returned an answer off the "
                                     f"reference for the new values (a cache keyed on the input tensor?) [{label}]")
        return True

    def _one(self, family: str, dtype, seed: int, *, compare: bool = True):
        """One seeded run: reference, candidate forward and backward, all checks. None if patched."""
        import torch

        label = f"{family}/{str(dtype).removeprefix('torch.')}"
        args, kwargs = self._inputs(family, dtype, seed)
        names = list(inspect.signature(self.ref.forward).parameters)
        tensors = [(names[i], a) for i, a in enumerate(args) if torch.is_tensor(a)]
        tensors += [(k, v) for k, v in kwargs.items() if torch.is_tensor(v)]
        watched = [(n, t) for n, t in tensors] + [(f"{n} (its base buffer)", t._base) for n, t in tensors
                                                  if t._base is not None]
        before = [(n, t.detach().clone()) for n, t in watched]
        diff = [(n, t) for n, t in tensors if t.requires_grad]
        budget = _rows_of([t for _, t in tensors])

        # the truth: the reference in fp64 on the same values (and at native dtype for shapes/dtypes)
        def up(t):
            if torch.is_tensor(t) and t.is_floating_point():
                return t.detach().double().requires_grad_(t.requires_grad)
            return t

        args64 = [up(a) for a in args]
        kwargs64 = {k: up(v) for k, v in kwargs.items()}
        ref64 = _as_tuple(self.ref.forward(*args64, **kwargs64))
        with torch.no_grad():
            native = _as_tuple(self.ref.forward(*[a.detach() if torch.is_tensor(a) else a for a in args], **kwargs))
        g = torch.Generator().manual_seed(seed ^ 0x5EED)
        grad_outs = [torch.randn(o.shape, generator=g).to(device=o.device, dtype=o.dtype) for o in native]
        inputs64 = [a for a in list(args64) + list(kwargs64.values()) if torch.is_tensor(a) and a.requires_grad]
        grads64 = torch.autograd.grad(ref64, inputs64, [go.double() for go in grad_outs], allow_unused=True)

        _poison_allocator(native)
        outs, watch = self._call(lambda: self._forward(args, kwargs), f"forward on {label}", row_budget=budget)
        if self._patched(f"during forward on {label}"):
            return None
        if watch is None:
            return {}, False, {}
        outs = _as_tuple(outs)
        ok = True
        if len(outs) != len(native) or not all(torch.is_tensor(o) for o in outs):
            self.fail("shape-dtype", f"forward returned {len(outs)} value(s) ({_kinds(outs)}); the reference returns "
                                     f"{len(native)} tensor(s)")
            return {}, False, {}
        out_names = ["out"] if len(outs) == 1 else [f"out{i}" for i in range(len(outs))]
        for name, o, n in zip(out_names, outs, native):
            if o.shape != n.shape or o.dtype != n.dtype:
                self.fail("shape-dtype", f"{name} is {tuple(o.shape)} {o.dtype}, the reference gives "
                                         f"{tuple(n.shape)} {n.dtype} [{label}]")
                return {}, False, {}
        results = dict(zip(out_names, outs))
        self._autograd_origin(results, label)
        out_snap = {k: v.detach().clone() for k, v in results.items()}

        grads: dict[str, Any] = {}
        if diff:
            live = [(o, go) for o, go in zip(outs, grad_outs) if o.requires_grad]
            if not live:
                self.fail("autograd", f"no output requires grad although inputs do [{label}]")
                ok = False
            else:
                got, watch = self._call(lambda: _backward([o for o, _ in live], [go for _, go in live],
                                                          [t for _, t in diff]), f"backward on {label}",
                                          row_budget=budget)
                if self._patched(f"during backward on {label}"):
                    return None
                if watch is None:
                    return results, False, {}
                for (n, _), gr, ref_g in zip(diff, got, grads64):
                    if gr is None:
                        self.fail("mismatch-backward", f"no gradient for {n} [{label}]")
                        ok = False
                    else:
                        grads[f"grad.{n}"] = gr
                for k, v in results.items():
                    if not _same_bits(v.detach(), out_snap[k]):
                        self.fail("stale", f"backward overwrote the forward result {k} [{label}]", key=k)

        # mutation: every input (and the buffer it views) bitwise unchanged
        for (n, t), (_, b) in zip(watched, before):
            if not _same_bits(t.detach(), b):
                self.fail("mutated-input", f"the call changed input {n} [{label}]")
                ok = False

        # aliasing: results must be fresh memory
        everything = {**results, **grads}
        input_ids = {_storage_id(t) for _, t in watched}
        seen: dict[int, str] = {}
        for k, v in everything.items():
            sid = _storage_id(v)
            if sid in input_ids:
                self.fail("alias", f"{k} shares memory with an input [{label}]")
                ok = False
            if sid in seen:
                self.fail("alias", f"{k} shares memory with {seen[sid]} [{label}]")
                ok = False
            seen[sid] = k
            for old_label, old, _ in self.kept_outputs:
                if _storage_id(old) == sid:
                    self.fail("alias", f"{k} reuses the memory of an earlier call's {old_label} (a cached output "
                                       f"buffer) [{label}]")
                    ok = False
                    break

        errors: dict[str, dict[str, float]] = {}
        if compare:
            truth = dict(zip(out_names, ref64))
            truth.update({f"grad.{n}": g64 for (n, _), g64 in zip(diff, grads64)})
            for k, v in everything.items():
                phase = "mismatch-backward" if k.startswith("grad.") else "mismatch-forward"
                err, good = self._compare(k, v, truth[k], phase, label, dtype)
                errors[k] = err
                ok = ok and good
        for k, v in everything.items():
            self.kept_outputs.append((f"{k} ({label}, seed {seed})", v, v.detach().clone()))
        return everything, ok, errors

    def _compare(self, name: str, got, want, code: str, label: str, dtype):
        """Every element: |got - want| <= atol * scale + rtol * |want|, with the case dtype's tolerances (a bf16
        case keeps bf16 tolerances for its fp32 results too: their inputs carry bf16 precision). scale is the
        tensor's RMS when above 1: a gradient amplified by 1/rms(x) (rows of scale 1e-3 in RMSNorm) carries
        absolute rounding error in proportion, and an element that cancels to near zero keeps it."""
        import torch

        atol, rtol = self.ref.TOLERANCES[dtype]
        g = got.detach().to(device="cpu", dtype=torch.float64)
        w = want.detach().to(device="cpu", dtype=torch.float64)
        if w.numel():
            atol = atol * max(1.0, float(w.pow(2).mean().sqrt()))
        finite = torch.isfinite(g)
        err = (g - w).abs()
        big = w.abs() > atol
        max_abs = float(err[finite].max()) if finite.any() else math.inf
        max_rel = float((err[big & finite] / w.abs()[big & finite]).max()) if (big & finite).any() else 0.0
        info = {"max_abs": max_abs, "max_rel": max_rel, "atol": atol, "rtol": rtol}
        if not finite.all():
            n_bad = int((~finite).sum())
            self.fail("non-finite", f"{n_bad} of {g.numel()} elements of {name} are NaN/inf (never written, or "
                                    f"garbage) [{label}]", key=(name, label))
            return {**info, "max_abs": math.inf}, False
        bad = err > atol + rtol * w.abs()
        if bad.any():
            i = int(bad.flatten().nonzero()[0])
            self.fail(code, f"{name} off the fp64 reference in {int(bad.sum())} of {g.numel()} elements "
                            f"(max abs {max_abs:.3g}, max rel {max_rel:.3g}; first at flat index {i}: "
                            f"{float(g.flatten()[i]):.6g} vs {float(w.flatten()[i]):.6g}; atol {atol}, "
                            f"rtol {rtol}) [{label}]", key=(name, label))
            return info, False
        return info, True

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

    def _different(self, prev: dict, now: dict, family: str, dtype) -> None:
        import torch

        for k in prev.keys() & now.keys():
            if prev[k].shape == now[k].shape and torch.equal(prev[k], now[k]):
                self.fail("same-output", f"{k} is bitwise identical for two different random inputs (a cached "
                                         f"answer?) [{family}/{str(dtype).removeprefix('torch.')}]")

    def _stale(self) -> None:
        for label, t, snap in self.kept_outputs:
            if not _same_bits(t.detach(), snap):
                self.fail("stale", f"{label} changed after it was returned (the buffer was reused by a later call)")

    def _deterministic(self, family: str, dtype, *, seed: int) -> bool:
        runs = []
        for _ in range(1 + self.settings.determinism_reruns):
            got = self._one(family, dtype, seed, compare=False)
            if got is None:
                return False
            runs.append(got[0])
        first = runs[0]
        for other in runs[1:]:
            for k in first:
                if k in other and not _same_bits(first[k].detach(), other[k].detach()):
                    n = int((first[k] != other[k]).sum())
                    self.fail("nondeterministic", f"{k} differs between runs on identical inputs ({n} elements; "
                                                  f"the op promises bitwise determinism) "
                                                  f"[{family}/{str(dtype).removeprefix('torch.')}]")
        self._stale()
        return True


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


def exercise(path: str | Path, op: str, settings: VerifySettings) -> tuple[list[str], list[Case]]:
    """All dynamic checks of one candidate (``PATH`` or ``PATH@VARIANT``) in this process: (reasons, cases)."""
    reasons: list[str] = []
    cases: list[Case] = []
    with _deadline(settings.timeout_s):
        try:
            _Exercise(str(path), op, settings, reasons, cases).run()
        except _Timeout:
            reasons.append(f"timeout: the dynamic checks ran past {settings.timeout_s:g} s (a hanging kernel?)")
    return reasons, cases


def main() -> int:
    """Read the job from stdin (then close it), run the checks, print ``<nonce> <json>`` as the last line."""
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    nonce = job.pop("nonce")
    reasons, cases = exercise(str(job["path"]), job["op"], VerifySettings.from_json(job["settings"]))
    sys.stdout.write("\n" + nonce + " " + json.dumps({"reasons": reasons, "cases": [asdict(c) for c in cases]}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    if not os.environ.get("TRITON_INTERPRET"):
        import torch as _torch

        if not _torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    raise SystemExit(main())
