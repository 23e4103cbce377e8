"""Verify a Triton kernel candidate against its op's reference, so that no cheating kernel gets past.

    result = verify("kernels/rmsnorm/triton_rows4.py")      # op from the folder name
    result.verdict   # "pass" | "fail";  result.reasons: ["code: message", ...]; result.cases

What a candidate must survive (each failure is one reason, ``code: message``):

static (static.py, before import)   imports, try/except fallbacks, host math, monkeypatching, a @triton.jit kernel
patched        time.*, torch.*, torch.Tensor.*, triton.testing.*, the reference or this module replaced
no-triton      a forward or backward call that launched no Triton kernel
host-op        torch math run on the host during forward/backward (a fallback in disguise); allocation,
               views, dtype casts and .sum() of per-program partials are allowed
autograd       outputs whose gradient does not come from the candidate's own torch.autograd.Function
mismatch-forward / mismatch-backward
               any element of an output or gradient outside atol + rtol*|ref| of the fp64 reference,
               on fresh random inputs (new seeds every verification) over shape families and dtypes
non-finite     NaN/inf in a result; fresh allocations are filled with NaN before each call, so an
               element the kernel never wrote shows up here
alias          a result sharing memory with an input, another result, or a result of an earlier call
stale          an earlier call's result changed later (a reused output buffer)
same-output    different inputs gave bitwise identical results (a cached answer)
mutated-input  an input (or the hidden part of the buffer it views) changed
nondeterministic  the same inputs gave bitwise different results (races, unordered atomics)
shape-dtype, signature, error   wrong shapes/dtypes, a forward() signature unlike the reference's, an exception

timeout        the dynamic checks ran past Settings.timeout_s (a hanging kernel)

Results are cached by (candidate sha256, reference sha256, verifier version, device kind) under
$INFRARSI_CACHE/verify (default ~/.cache/infrarsi/verify).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import hashlib
import inspect
import json
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..io import atomic_write
from .loader import ensure_interpreter, interpreter_ready, load_candidate, load_reference, op_of, reference_path
from .static import static_check

VERIFIER_VERSION = "1"

# Host-side torch calls a candidate may make around its kernels (by __name__): allocation, metadata,
# views, dtype casts, and .sum() to reduce per-program partials in a fixed order. Anything else (mul,
# rsqrt, silu, cat, exp, item, copy_, ...) computes or moves values outside Triton.
HOST_ALLOWED = frozenset(
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros "
    "__get__ size stride dim numel shape dtype device is_contiguous data_ptr element_size storage_offset "
    "untyped_storage is_floating_point get_device __len__ __format__ __repr__ __hash__ promote_types result_type "
    "is_tensor "
    "view view_as reshape reshape_as contiguous flatten unflatten unsqueeze squeeze expand expand_as "
    "transpose permute t unbind chunk split narrow select __getitem__ detach "
    "to float bfloat16 half double "
    "sum".split()
)
_EMPTY_FUNCS = frozenset("empty empty_like empty_strided new_empty new_empty_strided".split())
# Output tensors reached through these autograd nodes still come from the candidate's Function.
_VIEW_NODES = ("View", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Permute", "Select", "Unbind", "Split",
               "Alias", "Expand", "Slice", "AsStrided")


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
class VerifyResult:
    verdict: str  # "pass" | "fail"
    reasons: list[str]
    cases: list[Case]
    sha256: str
    op: str = ""
    path: str = ""
    seconds: float = 0.0
    cached: bool = False
    device: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def codes(self) -> set[str]:
        """The reason codes, e.g. {"mismatch-forward", "alias"}."""
        return {r.split(":", 1)[0] for r in self.reasons}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> VerifyResult:
        return cls(**{**d, "cases": [Case(**c) for c in d["cases"]]})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How hard to look. The defaults fit a 2-core CPU running the Triton interpreter (~2-5 s a candidate)."""

    seeds_per_case: int = 2  # fresh seeds per (family, dtype); 5 families x 2 dtypes x 2 = 20 seeds
    determinism_families: tuple[str, ...] = ("batch",)  # the many-program family: rerun on identical inputs...
    determinism_reruns: int = 1  # ...this many extra times, bitwise compared
    families: tuple[str, ...] | None = None  # None: every family the reference defines
    seed: int | None = None  # None: fresh seeds from os.urandom; set to reproduce a run
    timeout_s: float = 300.0  # the dynamic checks of one candidate; the shipped ones take 1-4 s of CPU


def cache_dir() -> Path:
    return Path(os.environ.get("INFRARSI_CACHE", Path.home() / ".cache" / "infrarsi")) / "verify"


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cache_key(path: Path, op: str) -> str:
    h = hashlib.sha256()
    for part in (path.read_bytes(), reference_path(op).read_bytes(), VERIFIER_VERSION.encode(), op.encode(),
                 _device().encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def verify(path: str | Path, op: str | None = None, *, use_cache: bool = True,
           settings: Settings = Settings()) -> VerifyResult:
    """Verify the candidate file at path; the op defaults to the name of its folder."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such candidate file")
    op = op or op_of(path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    key = cache_key(path, op)
    cached = cache_dir() / f"{key}.json"
    default_settings = settings == Settings()
    if use_cache and default_settings and cached.is_file():  # same bytes, same verdict, wherever the file is
        return VerifyResult.from_dict({**json.loads(cached.read_text()), "cached": True, "path": str(path)})
    t0 = time.perf_counter()
    reasons = static_check(path.read_text())
    cases: list[Case] = []
    if reasons:
        reasons.append("static: dynamic checks skipped because the static checks failed")
    elif interpreter_ready():
        with _deadline(settings.timeout_s):
            try:
                _Dynamic(path, op, settings, reasons, cases).run()
            except _Timeout:
                reasons.append(f"timeout: the dynamic checks ran past {settings.timeout_s:g} s (a hanging kernel?)")
    else:  # triton was imported here before TRITON_INTERPRET was set: check in a fresh interpreter
        child = _dynamic_in_subprocess(path, op, settings)
        reasons += child["reasons"]
        cases += [Case(**c) for c in child["cases"]]
    result = VerifyResult(verdict="fail" if reasons else "pass", reasons=reasons, cases=cases, sha256=sha, op=op,
                          path=str(path), seconds=round(time.perf_counter() - t0, 3), device=_device())
    if use_cache and default_settings:
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(cached, json.dumps(result.to_dict(), indent=1))  # a reader never sees half a file
    return result


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


# --------------------------------------------------------------------------- watching the candidate
def _watch_mode():
    from torch.overrides import TorchFunctionMode

    class Watch(TorchFunctionMode):
        """Records host-side torch calls and fills fresh allocations with NaN (ints with their minimum)."""

        def __init__(self) -> None:
            super().__init__()
            self.in_kernel = 0
            self.launches = 0
            self.host_ops: dict[str, int] = {}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            import torch

            out = func(*args, **(kwargs or {}))
            if self.in_kernel:  # triton's own launch plumbing (host copies in the interpreter)
                return out
            name = getattr(func, "__name__", repr(func))
            if name not in HOST_ALLOWED:
                self.host_ops[name] = self.host_ops.get(name, 0) + 1
            if name in _EMPTY_FUNCS and isinstance(out, torch.Tensor) and out.numel():
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


def _storage_id(t) -> int:
    return t.untyped_storage().data_ptr()


class _Dynamic:
    """Runs the candidate on fresh inputs over the reference's families and dtypes, and judges it."""

    def __init__(self, path: Path, op: str, settings: Settings, reasons: list[str], cases: list[Case]) -> None:
        self.path, self.op, self.settings, self.reasons, self.cases = path, op, settings, reasons, cases
        self.kept_outputs: list[tuple[str, Any, Any]] = []  # (label, tensor, snapshot): every result so far
        self.seen: set = set()

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
                          "math": math, "reference": self.ref, "verify": sys.modules[__name__]})
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
        families = self.settings.families or tuple(self.ref.FAMILIES)
        for family in families:
            for dtype in self.ref.DTYPES:
                prev = None
                for _ in range(self.settings.seeds_per_case):
                    seed = rng.randrange(1, 2**31)
                    t0 = time.perf_counter()
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

    def _call(self, fn, phase: str):
        """Run fn under the watch; returns (value, watch) or (exception, None)."""
        watch = _watch_mode()
        try:
            with _count_launches(watch), watch:
                value = fn()
        except Exception as e:
            self.fail("error", f"{phase} raised {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                      key=(phase.split()[0], type(e).__name__))
            return e, None
        if watch.launches == 0:
            self.fail("no-triton", f"{phase} launched no Triton kernel (a fallback?)", key=phase.split()[0])
        if watch.host_ops:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(watch.host_ops.items()))
            self.fail("host-op", f"{phase} computes with torch on the host, outside Triton: {ops}",
                      key=(phase.split()[0], ops))
        return value, watch

    def _inputs(self, family: str, dtype, seed: int):
        args, kwargs = self.ref.inputs(family, dtype, seed=seed, device=self.device)
        return list(args), dict(kwargs)

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
        outs, watch = self._call(lambda: self.module.forward(*args, **kwargs), f"forward on {label}")
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
                                                          [t for _, t in diff]), f"backward on {label}")
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
        """Every element: |got - want| <= atol + rtol * |want|, with the case dtype's tolerances (a bf16 case
        keeps bf16 tolerances for its fp32 results too: their inputs carry bf16 precision)."""
        import torch

        atol, rtol = self.ref.TOLERANCES[dtype]
        g = got.detach().to(device="cpu", dtype=torch.float64)
        w = want.detach().to(device="cpu", dtype=torch.float64)
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
        import torch

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


CHILD_TIMEOUT_S = 600


def _dynamic_in_subprocess(path: Path, op: str, settings: Settings) -> dict:
    """The dynamic checks in a fresh Python with TRITON_INTERPRET=1; returns {"reasons", "cases"}."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "infrarsi.kernels.verify", str(path), op, json.dumps(asdict(settings))]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"reasons": [f"error: the dynamic checks ran past {CHILD_TIMEOUT_S} s (a hanging kernel?)"], "cases": []}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return {"reasons": [f"error: the dynamic checks' process exited with {proc.returncode}: {tail}"], "cases": []}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child_main(argv: list[str]) -> int:
    path, op, raw = argv
    d = json.loads(raw)
    d["determinism_families"] = tuple(d["determinism_families"])
    d["families"] = tuple(d["families"]) if d["families"] is not None else None
    reasons: list[str] = []
    cases: list[Case] = []
    _Dynamic(Path(path), op, Settings(**d), reasons, cases).run()
    print(json.dumps({"reasons": reasons, "cases": [asdict(c) for c in cases]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
