"""The checker: the trusted side of the dynamic checks, in the verifier's own process.

    reasons, cases = check(candidate, op, settings)     # called by verify.py

The candidate runs in a process of its own (dynamic.py, isolated: execute/isolation.py); this module never imports
it. The checker makes every input (the op's reference draws them from fresh seeds), sends them down the child's
stdin, and reads back only tensors: what the candidate returned, and the gradients it gave. It computes the fp64
truth itself and compares, here, where the candidate cannot reach:

mismatch-forward / mismatch-backward   an element outside atol + rtol*|ref| of the fp64 reference
bias             a mean signed error, over a result's elements, beyond BIAS_LIMITS[dtype] of its tolerance: a
                 constant offset inside the element-wise tolerance (the shipped kernels stay 5x or more below
                 it, scripts/bias_figures.py)
non-finite       NaN/inf in a result (never written: fresh allocations are NaN-filled on some cases)
shape-dtype      results unlike the reference's in number, shape or dtype
same-output      different inputs gave bitwise identical results (a cached answer)
input-cache      inputs refilled in place with new values gave the old answer
nondeterministic the same inputs gave bitwise different results
error            the child's answer is missing or unreadable, or misses a case

What the child reports besides (its own watch: patched, no-triton, host-op, autograd, alias, stale, mutated-input,
signature, error, timeout) is taken as more reasons to fail, never as a reason to pass; nothing it prints is read.
"""

from __future__ import annotations

import inspect
import io
import math
import random
import subprocess
from typing import Any

from .dynamic import Case, VerifySettings, dtypes_of, families_of
from .instrument import _as_tuple, _same_bits
from .loader import load_reference

STARTUP_S = 120.0  # the child's own start (importing torch and triton) on top of VerifySettings.timeout_s
# A result fails "bias" when |mean signed error| over its elements exceeds this fraction of the tolerance at its mean
# |reference| (atol + rtol * mean|ref|), per dtype. Sized from the shipped kernels' own errors (scripts/bias_figures.py:
# largest 0.0013 in fp32, 0.026 in bf16, 0.015 in fp16): rounding errors average out, a constant offset does not.
BIAS_LIMITS = {"float32": 0.01, "bfloat16": 0.1, "float16": 0.1}
BIAS_MIN_ELEMENTS = 64  # fewer elements: a mean says too little


def _label(family: str, dtype) -> str:
    return f"{family}/{str(dtype).removeprefix('torch.')}"


class _Plan:
    """The items sent to the child (inputs and output gradients, all on the CPU) and what the checker keeps of each
    (the fp64 truth, the native shapes)."""

    def __init__(self, op: str, settings: VerifySettings) -> None:
        self.ref = load_reference(op)
        self.settings = settings
        self.names = list(inspect.signature(self.ref.forward).parameters)
        self.items: list[dict[str, Any]] = []  # sent
        self.kept: dict[int, dict[str, Any]] = {}  # id -> the truth and labels, kept here
        rng = random.Random(settings.seed) if settings.seed is not None else random.SystemRandom()
        if settings.model is not None:  # the contract's own model: one more family, at its real widths
            self.ref.FAMILIES["model"] = self.ref.model_family(**dict(settings.model))
        production = set(getattr(self.ref, "PRODUCTION", ())) | {"model"}
        families = families_of(self.ref, settings)
        self._refill(families[0], self.ref.DTYPES[0], rng)
        for family in families:
            n_seeds = settings.production_seeds if family in production else settings.seeds_per_case
            dtypes = dtypes_of(self.ref, family)
            n_cases = n_seeds * len(dtypes)
            # NaN-filled allocations on some of a family's cases, at least one, never all
            poison = [True, False][:n_cases] + [rng.random() < 0.5 for _ in range(n_cases - 2)]
            rng.shuffle(poison)
            for dtype in dtypes:
                for _ in range(n_seeds):
                    self._case(family, dtype, rng.randrange(1, 2**31), poison=poison.pop(), role="case")
                if getattr(self.ref, "DETERMINISTIC", True) and family in settings.determinism_families:
                    seed = rng.randrange(1, 2**31)
                    for _ in range(1 + settings.determinism_reruns):
                        self._case(family, dtype, seed, poison=True, role="rerun")

    def _inputs(self, family: str, dtype, seed: int):
        args, kwargs = self.ref.inputs(family, dtype, seed=seed, device="cpu")
        return list(args), dict(kwargs)

    def _wire(self, args, kwargs) -> dict[str, Any]:
        """Tensors detached (a strided view keeps its storage, offset and strides), with which require grad."""
        import torch

        def send(a):
            return a.detach() if torch.is_tensor(a) else a

        return {"args": [send(a) for a in args], "kwargs": {k: send(v) for k, v in kwargs.items()},
                "grad": [bool(torch.is_tensor(a) and a.requires_grad) for a in args],
                "grad_kw": {k: bool(torch.is_tensor(v) and v.requires_grad) for k, v in kwargs.items()}}

    def _case(self, family: str, dtype, seed: int, *, poison: bool, role: str) -> None:
        import torch

        args, kwargs = self._inputs(family, dtype, seed)

        def up(t):
            if torch.is_tensor(t) and t.is_floating_point():
                return t.detach().double().requires_grad_(t.requires_grad)
            return t

        args64, kwargs64 = [up(a) for a in args], {k: up(v) for k, v in kwargs.items()}
        ref64 = tuple(_as_tuple(self.ref.forward(*args64, **kwargs64)))
        with torch.no_grad():
            native = _as_tuple(self.ref.forward(*[a.detach() if torch.is_tensor(a) else a for a in args], **kwargs))
        g = torch.Generator().manual_seed(seed ^ 0x5EED)
        grad_outs = [torch.randn(o.shape, generator=g).to(dtype=o.dtype) for o in native]
        diff = [(self.names[i], a64) for i, a64 in enumerate(args64) if torch.is_tensor(a64) and a64.requires_grad]
        diff += [(k, v) for k, v in kwargs64.items() if torch.is_tensor(v) and v.requires_grad]
        grads64 = torch.autograd.grad(ref64, [t for _, t in diff], [go.double() for go in grad_outs],
                                      allow_unused=True) if diff else ()
        i = len(self.items)
        truth = {("out" if len(ref64) == 1 else f"out{k}"): r.detach() for k, r in enumerate(ref64)}
        truth.update({f"grad.{n}": g64 for (n, _), g64 in zip(diff, grads64) if g64 is not None})
        self.items.append({"id": i, "kind": "case", "label": _label(family, dtype), "poison": poison,
                           "grad_outs": grad_outs, **self._wire(args, kwargs)})
        self.kept[i] = {"family": family, "dtype": dtype, "seed": seed, "role": role, "truth": truth,
                        "native": [(tuple(n.shape), n.dtype) for n in native], "grads": [n for n, _ in diff]}

    def _refill(self, family: str, dtype, rng) -> None:
        """Inputs A, and B's values to copy into A's tensors in place between two calls (input-cache)."""
        seeds = (rng.randrange(1, 2**31), rng.randrange(1, 2**31))
        (a_args, a_kwargs), (b_args, b_kwargs) = (self._inputs(family, dtype, s) for s in seeds)
        i = len(self.items)
        self.items.append({"id": i, "kind": "refill", "label": _label(family, dtype), "poison": True,
                           "b_args": [b.detach() if _is_tensor(b) else b for b in b_args],
                           **self._wire(a_args, a_kwargs)})
        self.kept[i] = {"family": family, "dtype": dtype, "role": "refill",
                        "truth": [self._truth64(a_args, a_kwargs), self._truth64(b_args, b_kwargs)]}

    def _truth64(self, args, kwargs):
        import torch

        with torch.no_grad():
            return _as_tuple(self.ref.forward(*[a.detach().double() if torch.is_tensor(a) and a.is_floating_point()
                                                else a for a in args], **kwargs))


def _is_tensor(x) -> bool:
    import torch

    return torch.is_tensor(x)


def check(candidate, op: str, settings: VerifySettings, *, command: list[str], env: dict[str, str],
          pass_fds: tuple[int, ...] = ()) -> tuple[list[str], list[Case]]:
    """Run the candidate's process (``command``, its environment ``env``; ``pass_fds``: what bwrap reads, the
    seccomp filter) on this checker's inputs and judge what it returned: (reasons, cases)."""
    import torch

    plan = _Plan(op, settings)
    job = io.BytesIO()
    torch.save({"path": str(candidate), "op": op, "settings": settings.to_json(), "items": plan.items}, job)
    limit = settings.timeout_s + STARTUP_S
    try:
        proc = subprocess.run(command, input=job.getvalue(), env=env, capture_output=True, timeout=limit,
                              start_new_session=True, pass_fds=pass_fds)
    except subprocess.TimeoutExpired:
        return [f"timeout: the candidate's process ran past {limit:g} s (a hanging kernel?)"], []
    tail = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1][:300]
    try:
        answer = torch.load(io.BytesIO(proc.stdout), weights_only=True)  # tensors and plain data only
        reasons = [str(r) for r in answer["reasons"]]
        results = {int(r["id"]): r for r in answer["results"]}
    except Exception as e:  # noqa: BLE001 - whatever the child sent, unreadable is a failure
        why = f"exited with {proc.returncode}" if proc.returncode != 0 else f"sent no readable answer ({type(e).__name__})"
        return [f"error: the candidate's process {why} (the candidate ended or forged it?): {tail}"], []
    judge = _Judge(plan, reasons)
    return judge.run(results), judge.cases


class _Judge:
    """Compares what the child returned with the truth the plan kept."""

    def __init__(self, plan: _Plan, reasons: list[str]) -> None:
        self.plan, self.ref, self.reasons = plan, plan.ref, reasons
        self.cases: list[Case] = []
        self.seen: set = set()
        self.named = bool(reasons)  # the child named a failure (an exception, a patch): items without outputs follow

    def fail(self, code: str, message: str, key: Any = None) -> None:
        key = (code, key if key is not None else message)
        if key not in self.seen:
            self.seen.add(key)
            self.reasons.append(f"{code}: {message}")

    def run(self, results: dict[int, dict]) -> list[str]:
        missing = [i for i in self.plan.kept if i not in results]
        prev: dict[tuple, dict] = {}
        reruns: dict[tuple, list[dict]] = {}
        for i, kept in self.plan.kept.items():
            got = results.get(i)
            if got is None:
                continue
            if kept["role"] == "refill":
                self._input_cache(kept, got)
                continue
            outs = self._results(kept, got)
            if outs is None:
                continue
            key = (kept["family"], str(kept["dtype"]))
            if kept["role"] == "rerun":
                reruns.setdefault(key, []).append(outs)
                continue
            errors, ok = {}, True
            for name, want in kept["truth"].items():
                if name not in outs:
                    continue
                code = "mismatch-backward" if name.startswith("grad.") else "mismatch-forward"
                errors[name], good = self._compare(name, outs[name], want, code, kept)
                ok = ok and good
            if key in prev:
                self._different(prev[key], outs, kept)
            prev[key] = outs
            self.cases.append(Case(family=kept["family"], dtype=str(kept["dtype"]).removeprefix("torch."),
                                   seed=kept["seed"], ok=ok, errors=errors))
        for key, runs in reruns.items():
            self._deterministic(key, runs)
        if missing and not self.reasons:
            first = self.plan.kept[missing[0]]
            self.fail("error", f"the candidate's process answered {len(results)} of {len(self.plan.kept)} cases; "
                               f"missing {_label(first['family'], first['dtype'])} and {len(missing) - 1} more")
        return self.reasons

    def _results(self, kept: dict, got: dict) -> dict[str, Any] | None:
        """{"out"/"out0".../"grad.x": tensor} from the child's answer, checked against the reference's shapes."""
        import torch

        label = _label(kept["family"], kept["dtype"])
        outs = got.get("outs")
        if outs is None:
            if not self.named:
                self.fail("error", f"the candidate's process sent no outputs for a case and named no failure [{label}]")
            return None
        native = kept["native"]
        if len(outs) != len(native) or not all(torch.is_tensor(o) for o in outs):
            self.fail("shape-dtype", f"forward returned {len(outs)} value(s); the reference returns {len(native)} "
                                     f"tensor(s) [{label}]")
            return None
        names = ["out"] if len(native) == 1 else [f"out{i}" for i in range(len(native))]
        for name, o, (shape, dtype) in zip(names, outs, native):
            if tuple(o.shape) != shape or o.dtype != dtype:
                self.fail("shape-dtype", f"{name} is {tuple(o.shape)} {o.dtype}, the reference gives {shape} {dtype} "
                                         f"[{label}]")
                return None
        res = dict(zip(names, outs))
        grads = got.get("grads") or {}
        for n in kept["grads"]:
            g = grads.get(n)
            if not torch.is_tensor(g):
                self.fail("mismatch-backward", f"no gradient for {n} [{label}]")
            else:
                res[f"grad.{n}"] = g
        return res

    def _compare(self, name: str, got, want, code: str, kept: dict):
        """Every element: |got - want| <= atol * scale + rtol * |want| (scale: the tensor's RMS when above 1: a
        gradient amplified by 1/rms(x) carries absolute rounding error in proportion); then the mean signed error
        against BIAS_LIMITS[dtype] of the tolerance at the mean |want|."""
        import torch

        label = _label(kept["family"], kept["dtype"])
        atol, rtol = self.ref.TOLERANCES[kept["dtype"]]
        g = got.detach().to(device="cpu", dtype=torch.float64)
        w = want.detach().to(device="cpu", dtype=torch.float64)
        if g.shape != w.shape:
            self.fail("shape-dtype", f"{name} is {tuple(g.shape)}, the reference gives {tuple(w.shape)} [{label}]")
            return {}, False
        if w.numel():
            atol = atol * max(1.0, float(w.pow(2).mean().sqrt()))
        finite = torch.isfinite(g)
        err = (g - w).abs()
        big = w.abs() > atol
        max_abs = float(err[finite].max()) if finite.any() else math.inf
        max_rel = float((err[big & finite] / w.abs()[big & finite]).max()) if (big & finite).any() else 0.0
        info = {"max_abs": max_abs, "max_rel": max_rel, "atol": atol, "rtol": rtol}
        if not finite.all():
            self.fail("non-finite", f"{int((~finite).sum())} of {g.numel()} elements of {name} are NaN/inf (never "
                                    f"written, or garbage) [{label}]", key=(name, label))
            return {**info, "max_abs": math.inf}, False
        bad = err > atol + rtol * w.abs()
        if bad.any():
            i = int(bad.flatten().nonzero()[0])
            self.fail(code, f"{name} off the fp64 reference in {int(bad.sum())} of {g.numel()} elements "
                            f"(max abs {max_abs:.3g}, max rel {max_rel:.3g}; first at flat index {i}: "
                            f"{float(g.flatten()[i]):.6g} vs {float(w.flatten()[i]):.6g}; atol {atol}, "
                            f"rtol {rtol}) [{label}]", key=(name, label))
            return info, False
        info["bias"] = bias = bias_of(g, w, atol, rtol)
        limit = BIAS_LIMITS[str(kept["dtype"]).removeprefix("torch.")]
        if g.numel() >= BIAS_MIN_ELEMENTS and bias > limit:
            self.fail("bias", f"{name}'s mean signed error is {float((g - w).mean()):.3g}, {bias:.3f} of the "
                              f"tolerance at its mean |value| (limit {limit}): a constant offset, not rounding "
                              f"[{label}]", key=(name, label))
            return info, False
        return info, True

    def _input_cache(self, kept: dict, got: dict) -> None:
        import torch

        label = _label(kept["family"], kept["dtype"])
        first, second = got.get("outs"), got.get("outs2")
        if first is None or second is None:
            if not self.named:
                self.fail("error", f"the candidate's process sent no outputs for the refill check and named no "
                                   f"failure [{label}]")
            return
        atol, rtol = self.ref.TOLERANCES[kept["dtype"]]

        def close(outs, want) -> bool:
            return len(outs) == len(want) and all(
                torch.is_tensor(g) and tuple(g.shape) == tuple(w.shape) and bool(
                    ((g.double() - w).abs() <= atol + rtol * w.abs()).all()) for g, w in zip(outs, want))

        # only a right first answer makes a wrong second one a cache: plain wrong answers are the cases' to report
        if close(first, kept["truth"][0]) and not close(second, kept["truth"][1]):
            self.fail("input-cache", f"forward on inputs refilled in place with new values returned an answer off the "
                                     f"reference for the new values (a cache keyed on the input tensor?) [{label}]")

    def _different(self, prev: dict, now: dict, kept: dict) -> None:
        import torch

        for k in prev.keys() & now.keys():
            if prev[k].shape == now[k].shape and torch.equal(prev[k], now[k]):
                self.fail("same-output", f"{k} is bitwise identical for two different random inputs (a cached "
                                         f"answer?) [{_label(kept['family'], kept['dtype'])}]")

    def _deterministic(self, key: tuple, runs: list[dict]) -> None:
        first = runs[0]
        for other in runs[1:]:
            for k in first:
                if k in other and not _same_bits(first[k], other[k]):
                    n = int((first[k] != other[k]).sum())
                    self.fail("nondeterministic", f"{k} differs between runs on identical inputs ({n} elements; "
                                                  f"the op promises bitwise determinism) "
                                                  f"[{key[0]}/{key[1].removeprefix('torch.')}]")


def bias_of(got, want, atol: float, rtol: float) -> float:
    """|mean signed error| over the elements, as a fraction of the tolerance at the mean |want|."""
    return float((got - want).mean().abs()) / (atol + rtol * float(want.abs().mean()))

