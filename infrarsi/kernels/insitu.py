"""Kernel candidates inside the training process: load by path, refuse what was not verified, spot-check.

    ops = load_for_training(["rmsnorm=kernels/rmsnorm/x.py"])   # {op: object with .forward(...)}
    y = ops["rmsnorm"].forward(x, w, eps)                       # the candidate; sometimes checked too

Loading goes through the verifier's own loader (the same module name, the same entry point) after
verdicts.refusal() has re-hashed the file against the verdict recorded at run start. torchtitan's patch
hook (launchers/torchtitan_patches.py) wraps its candidate with :func:`spot_checked` too: one policy.

Spot checks: the first call of each op, and then a random 1 in ``every`` (``INFRARSI_SPOT_EVERY``, default
50; 0 turns them off), is recomputed by the op's reference in fp64 on the same tensors and compared
element by element with the reference's per-dtype tolerance -- the output at once, and in backward the
gradient the candidate hands each input (identity autograd functions around the call capture the output
gradient and the input gradients). A mismatch prints one line ``infrarsi kernel spot check failed: op=PATH
...`` and ends the process with status 3, which the log classifier turns into ``numerics_drift``; the run
stage then disqualifies the candidate for the rest of the run. This catches a candidate that behaves
differently on the real tensors than on any verifier's.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

from .loader import OPS, ensure_interpreter, load_candidate, load_reference
from .verdicts import DRIFT, REFUSED, refusal

EXIT_DRIFT = 3
EXIT_REFUSED = 2
SPOT_ENV = "INFRARSI_SPOT_EVERY"


def load_for_training(specs: list[str]) -> dict[str, Any]:
    """``["op=PATH", ...]`` -> {op: SpotChecked}; exits with a clear line on a bad spec or a refused file."""
    out: dict[str, Any] = {}
    for spec in specs:
        op, sep, path = spec.partition("=")
        if not sep or op not in OPS:
            raise SystemExit(f"--kernel {spec!r}: expected OP=PATH with OP one of {list(OPS)}")
        if not Path(path).is_file():
            raise SystemExit(f"--kernel {spec!r}: file {path} does not exist")
        why = refusal(op, path)
        if why is not None:
            print(f"{REFUSED}: {why}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_REFUSED)
        ensure_interpreter()  # before triton's first import, when there is no GPU
        out[op] = spot_checked(op, path, load_candidate(path))
    return out


def spot_every() -> int:
    """1 in how many calls is checked after the first (``INFRARSI_SPOT_EVERY``, default 50; 0: none)."""
    raw = os.environ.get(SPOT_ENV, "50")
    try:
        every = int(raw)
    except ValueError:
        raise SystemExit(f"{SPOT_ENV}={raw!r}: expected a whole number (50: 1 call in 50; 0: no spot checks)") from None
    return every


def spot_checked(op: str, path: str, module) -> SpotChecked:
    """The policy every workload hook uses (minigpt's --kernel, torchtitan's patch): the candidate module's
    forward, checked against ``kernels/<op>/reference.py`` on the first call and then 1 in spot_every()."""
    return SpotChecked(op, path, module, load_reference(op), every=spot_every())


class SpotChecked:
    """The candidate's forward, with sampled calls checked against the reference on the same tensors."""

    def __init__(self, op: str, path: str, module, reference, *, every: int = 50) -> None:
        self.op, self.path, self.module, self.reference, self.every = op, path, module, reference, every
        self.calls = 0
        self.checked = 0
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little"))

    def forward(self, *args):
        self.calls += 1
        if self.every <= 0 or not (self.calls == 1 or self._rng.random() < 1.0 / self.every):
            return self.module.forward(*args)
        self.checked += 1
        return _checked_call(self, args)

    def fail(self, what: str) -> None:
        print(f"{DRIFT}: {self.op}={self.path} call {self.calls}: {what}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_DRIFT)  # from inside autograd too: no exception handler can turn this into a pass


def _tolerance(ref, args) -> tuple[float, float]:
    import torch

    dt = next((a.dtype for a in args if torch.is_tensor(a) and a.is_floating_point()), torch.float32)
    return ref.TOLERANCES.get(dt, ref.TOLERANCES[torch.float32])


def _worst(got, want, atol: float, rtol: float) -> str | None:
    """None when every element of got is within atol + rtol*|want| of want, else a one-line account."""
    import torch

    g = got.detach().to(device="cpu", dtype=torch.float64)
    w = want.detach().to(device="cpu", dtype=torch.float64)
    if g.shape != w.shape:
        return f"shape {tuple(g.shape)} vs the reference's {tuple(w.shape)}"
    err = (g - w).abs()
    bad = ~(err <= atol + rtol * w.abs())  # NaN counts as bad
    if not bool(bad.any()):
        return None
    i = int(bad.flatten().nonzero()[0])
    return (f"{int(bad.sum())} of {g.numel()} elements off the fp64 reference (first at flat index {i}: "
            f"{float(g.flatten()[i]):.6g} vs {float(w.flatten()[i]):.6g}; atol {atol}, rtol {rtol})")


def _checked_call(sc: SpotChecked, args: tuple):
    import torch

    atol, rtol = _tolerance(sc.reference, args)

    def up(a):
        return a.detach().double() if torch.is_tensor(a) and a.is_floating_point() else a

    state: dict[str, Any] = {"args64": [up(a) for a in args]}
    diff = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad and torch.is_grad_enabled()]

    class _Probe(torch.autograd.Function):
        """Identity on the outputs; its backward keeps the output gradients the candidate receives."""

        @staticmethod
        def forward(ctx, *outs):
            return tuple(o.clone() for o in outs)

        @staticmethod
        def backward(ctx, *grads):
            state["grad_outs"] = [g.detach() if g is not None else None for g in grads]
            return grads

    class _Tap(torch.autograd.Function):
        """Identity on one input; its backward compares the candidate's gradient with the reference's."""

        @staticmethod
        def forward(ctx, a, i):
            ctx.i = i
            return a.view_as(a)

        @staticmethod
        def backward(ctx, g):
            if "grads64" not in state:
                state["grads64"] = _reference_grads(sc.reference, state, diff)
            want = state["grads64"].get(ctx.i)
            if g is not None and want is not None:
                why = _worst(g, want, atol, rtol)
                if why is not None:
                    sc.fail(f"backward: gradient of argument {ctx.i}: {why}")
            return g, None

    call_args = [(_Tap.apply(a, i) if i in diff else a) for i, a in enumerate(args)]
    outs = sc.module.forward(*call_args)
    single = not isinstance(outs, (tuple, list))
    outs_t = (outs,) if single else tuple(outs)
    with torch.no_grad(), torch.autocast(outs_t[0].device.type, enabled=False):
        want = sc.reference.forward(*state["args64"])
    want_t = (want,) if not isinstance(want, (tuple, list)) else tuple(want)
    for k, (o, w) in enumerate(zip(outs_t, want_t)):
        why = _worst(o, w, atol, rtol)
        if why is not None:
            sc.fail(f"forward: output {k}: {why}")
    if diff and any(o.requires_grad for o in outs_t):
        outs_t = _Probe.apply(*outs_t)
    return outs_t[0] if single else type(outs)(outs_t) if isinstance(outs, tuple) else list(outs_t)


def _reference_grads(ref, state: dict, diff: list[int]) -> dict[int, Any]:
    """The reference's fp64 gradients for the differentiable arguments, given the captured output grads."""
    import torch

    grad_outs = state.get("grad_outs")
    if grad_outs is None:
        return {}
    with torch.enable_grad(), torch.autocast("cpu", enabled=False):
        args64 = [a.clone().requires_grad_(True) if i in diff else a for i, a in enumerate(state["args64"])]
        want = ref.forward(*args64)
        want_t = (want,) if not isinstance(want, (tuple, list)) else tuple(want)
        pairs = [(w, g.double()) for w, g in zip(want_t, grad_outs) if g is not None]
        grads = torch.autograd.grad([w for w, _ in pairs], [args64[i] for i in diff], [g for _, g in pairs],
                                    allow_unused=True)
    return {i: g for i, g in zip(diff, grads) if g is not None}
