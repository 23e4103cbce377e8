"""Kernel candidates inside the training process: load by path, refuse what was not verified, spot-check.

    ops = load_for_training(["rmsnorm=kernels/rmsnorm/x.py@rows16"])   # {op: object with .forward(...)}
    y = ops["rmsnorm"].forward(x, w, eps)                       # the candidate; sometimes checked too

Loading goes through the verifier's own loader (the same module name, the same entry point) after
verdicts.refusal() has re-hashed the file against the verdict recorded at run start. torchtitan's patch
hook (launchers/torchtitan_patches.py) wraps its candidate with :func:`spot_checked` too: one policy.

Spot checks: a random 1 in ``every`` calls (``INFRARSI_SPOT_EVERY``, default 50; 0 turns them off), and one
call drawn at random among the first ``FIRST_WINDOW`` (8) of each op, is recomputed by the op's reference in fp64 on the
same tensors and compared element by element with the reference's per-dtype tolerance -- the output, and in
backward the gradient the candidate hands each input, given the output gradient it received. A mismatch prints
one line ``infrarsi kernel spot check failed: op=PATH ...`` and ends the process with status 3, which the log
classifier turns into ``numerics_drift``; the run stage then disqualifies the candidate for the rest of the run.
This catches a candidate that behaves differently on the real tensors than on any verifier's.

While spot checks are on (``INFRARSI_SPOT_EVERY`` > 0, the default), every call -- not only the checked ones -- also
runs under the verifier's watch (instrument.py), its forward and its ``autograd.Function`` backward alike: one that
launches no Triton kernel, or computes with torch on the host (O(rows x cols) work, ``.cpu()``, ``.numpy()``), ends
the process the same way. Right values computed some other way in training -- torch or numpy math on
training-sized batches -- are caught by how they were made.

A checked call cannot be told apart from another while it runs: every call is the same ``module.forward(*args)``
from the same frame, on the caller's own tensors, and returns the candidate's own outputs; whether it is checked
is drawn *after* it returned (``secrets.SystemRandom``: no generator state in the process to read and predict).
A backward is drawn after it ran: every call's nodes carry the same hooks (a pre-hook on each output's node for
the gradient it receives, a hook on each node whose edge leads into an input for the gradient the candidate sends
there, the candidate's share only), and the fp64 copies the reference needs are made only once a backward is
chosen -- nothing alive in the process while a backward runs tells a checked one from another. The hooks add
nothing to the tensors; no wrapper appears in any ``grad_fn``.
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import Any

from .loader import OPS, CandidateError, candidate_path, ensure_interpreter, load_candidate, load_reference, parse_candidate
from .verdicts import DRIFT, REFUSED, refusal

EXIT_DRIFT = 3
EXIT_REFUSED = 2
SPOT_ENV = "INFRARSI_SPOT_EVERY"
FIRST_WINDOW = 8  # one of an op's first 8 calls (drawn) is always checked: a tuning trial makes a few dozen


def load_for_training(specs: list[str]) -> dict[str, Any]:
    """``["op=PATH", "op=PATH@VARIANT", ...]`` -> {op: SpotChecked}; exits with a clear line on a bad spec, an
    unknown variant or a refused file."""
    out: dict[str, Any] = {}
    for spec in specs:
        op, sep, path = spec.partition("=")
        if not sep or op not in OPS:
            raise SystemExit(f"--kernel {spec!r}: expected OP=PATH or OP=PATH@VARIANT with OP one of {list(OPS)}")
        if not candidate_path(path).is_file():
            raise SystemExit(f"--kernel {spec!r}: file {candidate_path(path)} does not exist")
        try:
            parse_candidate(path)
        except CandidateError as e:
            raise SystemExit(f"--kernel {spec!r}: {e}") from None
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
        self.backward_calls = 0  # backward calls that ran to the end (every argument's share reported)
        self.backward_checked = 0
        self._draw = secrets.SystemRandom()

    def forward(self, *args):
        self.calls += 1
        outs = self._watched(args)  # the same call, checked or not
        if self._chosen(self.calls, self.checked):
            self.checked += 1
            _check(self, args, outs)
        return outs

    def _watched(self, args):
        """The candidate's forward under the verifier's watch, every call: it must launch a Triton kernel and do no
        O(rows x cols) torch math on the host (instrument.py), on training's own tensors as on the verifier's.
        A candidate that computes its answer some other way in training (right values, no kernel) ends here."""
        import torch

        from .instrument import _count_launches, _rows_of, _watch_mode

        if self.every <= 0 or torch.compiler.is_compiling():  # checks off (INFRARSI_SPOT_EVERY=0: the loss referee
            return self.module.forward(*args)                   # alone), or traced by torch.compile (the graph runs)
        budget = _rows_of([a for a in args if torch.is_tensor(a)])  # rows of the widest input
        watch = _watch_mode(row_budget=budget, poison=False)
        with _count_launches(watch), watch:
            outs = self.module.forward(*args)
        if watch.launches == 0:
            self.fail("forward launched no Triton kernel on training's tensors (a fallback?)")
        if watch.host_ops:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(watch.host_ops.items()))
            self.fail(f"forward computed with torch on the host, outside Triton, on training's tensors: {ops}")
        if torch.is_grad_enabled():
            _arm_backward(self, args, outs, row_budget=budget)
        return outs

    def _chosen(self, calls: int, checked: int) -> bool:
        """Drawn after the call (a forward's after it returned, a backward's after it ran): 1 in ``every``; and,
        while none has been checked among the first ``min(every, FIRST_WINDOW)`` calls, 1 in (calls left in that
        window): one call of the window, uniformly, whatever the run's length (a short tuning trial gets its
        check)."""
        if self.every <= 0:
            return False
        window = min(self.every, FIRST_WINDOW)
        if checked == 0 and calls <= window:
            return self._draw.random() < 1.0 / (window - calls + 1)
        return self._draw.random() < 1.0 / self.every

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


def _check(sc: SpotChecked, args: tuple, outs) -> None:
    """Compare the call's outputs with the reference now, and arm its backward check (hooks on its nodes)."""
    import torch

    atol, rtol = _tolerance(sc.reference, args)

    def up(a):
        return a.detach().double() if torch.is_tensor(a) and a.is_floating_point() else a

    args64 = [up(a) for a in args]
    outs_t = (outs,) if not isinstance(outs, (tuple, list)) else tuple(outs)
    with torch.no_grad(), torch.autocast(outs_t[0].device.type, enabled=False):
        want = sc.reference.forward(*args64)
    want_t = (want,) if not isinstance(want, (tuple, list)) else tuple(want)
    for k, (o, w) in enumerate(zip(outs_t, want_t)):
        why = _worst(o, w, atol, rtol)
        if why is not None:
            sc.fail(f"forward: output {k}: {why}")


def _arm_backward(sc: SpotChecked, args: tuple, outs, *, row_budget: int) -> None:
    """Hooks on the call's own autograd nodes, on every call (no copy, nothing that differs between calls):

    * each node of the candidate's own ``autograd.Function`` runs its backward under the verifier's watch, as the
      forward did: a backward that launches no Triton kernel, or computes with torch on the host (``.cpu()``,
      ``.numpy()``, O(rows x cols) torch math), ends the process;
    * each output's node records the gradient the output receives; each node with an edge into a differentiable
      argument's node records what it sends along that edge (the candidate's share of that argument's gradient).
      When every such edge has reported, the backward is over, and only then is it drawn for a check (as a
      forward is drawn after it returned): the shares are compared with the reference's fp64 gradients on the
      same activations, given the same output gradients. The fp64 copies are made after the draw; until then the
      call holds what every call holds."""
    import torch
    from torch.autograd.function import BackwardCFunction

    outs_t = (outs,) if not isinstance(outs, (tuple, list)) else tuple(outs)
    diff = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad]
    live = [(k, o) for k, o in enumerate(outs_t) if torch.is_tensor(o) and o.grad_fn is not None]
    if not diff or not live:
        return
    targets = {}  # id(node of argument i) -> (i, output_nr): its grad_fn, or for a leaf the AccumulateGrad holding it
    leaves = {}  # id(leaf tensor) -> i
    stops = {id(a.grad_fn) for a in args if torch.is_tensor(a) and a.grad_fn is not None}  # the caller's graph
    for i in diff:
        if args[i].grad_fn is not None:
            targets[id(args[i].grad_fn)] = (i, args[i].output_nr)
        else:
            leaves[id(args[i])] = i
    edges: dict[int, tuple[Any, list[tuple[int, int]]]] = {}  # id(node) -> (node, [(edge index, argument)])
    own: list = []  # the candidate's autograd.Function nodes: their backward is the candidate's code
    seen, stack = set(), [o.grad_fn for _, o in live]
    while stack and len(seen) < MAX_NODES:
        node = stack.pop()
        if node is None or id(node) in seen or id(node) in stops:
            continue
        seen.add(id(node))
        if isinstance(node, BackwardCFunction):
            own.append(node)
        for j, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            hit = targets.get(id(nxt))
            i = hit[0] if hit is not None and hit[1] == nr else leaves.get(id(getattr(nxt, "variable", None)))
            if i is not None:
                edges.setdefault(id(node), (node, []))[1].append((j, i))
            elif type(nxt).__name__ != "AccumulateGrad":
                stack.append(nxt)
    for node in own:
        _watch_node(sc, node, row_budget)
    if not edges:
        return
    grad_outs: list = [None] * len(outs_t)
    shares: dict[int, Any] = {}
    pending = set(edges)
    by_node: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
    for k, o in live:
        by_node.setdefault(id(o.grad_fn), (o.grad_fn, []))[1].append((o.output_nr, k))

    for _, (node, outs_of) in by_node.items():
        def pre(grads, outs_of=outs_of):
            for nr, k in outs_of:
                if nr < len(grads) and grads[nr] is not None:
                    grad_outs[k] = grads[nr].detach()
        node.register_prehook(pre)

    for key, (node, pairs) in edges.items():
        def post(grad_inputs, grad_outputs, key=key, pairs=pairs):
            for j, i in pairs:
                g = grad_inputs[j] if j < len(grad_inputs) else None
                if g is not None:
                    shares[i] = g.detach() if i not in shares else shares[i] + g.detach()
            pending.discard(key)
            if pending:
                return
            sc.backward_calls += 1
            if sc._chosen(sc.backward_calls, sc.backward_checked):  # drawn now: the backward has run
                sc.backward_checked += 1
                _compare_backward(sc, args, diff, grad_outs, shares)
        node.register_hook(post)


def _watch_node(sc: SpotChecked, node, row_budget: int) -> None:
    """The node's backward (the candidate's ``autograd.Function.backward``) under the watch: entered by a pre-hook,
    judged by a hook when it returns."""
    from .instrument import _count_launches, _watch_mode

    state: dict[str, Any] = {}

    def pre(grad_outputs):
        watch = _watch_mode(row_budget=row_budget, poison=False)
        counting = _count_launches(watch)
        counting.__enter__()
        watch.__enter__()
        state.update(watch=watch, counting=counting)

    def post(grad_inputs, grad_outputs):
        watch, counting = state.pop("watch", None), state.pop("counting", None)
        if watch is None:
            return
        watch.__exit__(None, None, None)
        counting.__exit__(None, None, None)
        if watch.launches == 0:
            sc.fail("backward launched no Triton kernel on training's tensors (a fallback?)")
        if watch.host_ops:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(watch.host_ops.items()))
            sc.fail(f"backward computed with torch on the host, outside Triton, on training's tensors: {ops}")

    node.register_prehook(pre)
    node.register_hook(post)


MAX_NODES = 256  # nodes of the call's own graph walked to find its edges into the arguments


def _compare_backward(sc: SpotChecked, args: tuple, diff: list[int], grad_outs, shares: dict) -> None:
    import torch

    atol, rtol = _tolerance(sc.reference, args)
    args64 = [a.detach().double() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    want = _reference_grads(sc.reference, {"args64": args64, "grad_outs": list(grad_outs)}, diff)
    for i in diff:
        got, ref = shares.get(i), want.get(i)
        if got is None or ref is None:
            continue
        if got.shape != ref.shape and got.numel() == ref.numel():
            got = got.reshape(ref.shape)  # the candidate's share arrives through its own view of the argument
        why = _worst(got, ref, atol, rtol)
        if why is not None:
            sc.fail(f"backward: gradient of argument {i}: {why}")


def _reference_grads(ref, state: dict, diff: list[int]) -> dict[int, Any]:
    """The reference's fp64 gradients for the differentiable arguments, given the captured output grads."""
    import torch

    grad_outs = state.get("grad_outs")
    if grad_outs is None or all(g is None for g in grad_outs):
        return {}
    with torch.enable_grad(), torch.autocast("cpu", enabled=False):
        args64 = [a.clone().requires_grad_(True) if i in diff else a for i, a in enumerate(state["args64"])]
        want = ref.forward(*args64)
        want_t = (want,) if not isinstance(want, (tuple, list)) else tuple(want)
        pairs = [(w, g.double()) for w, g in zip(want_t, grad_outs) if g is not None]
        grads = torch.autograd.grad([w for w, _ in pairs], [args64[i] for i in diff], [g for _, g in pairs],
                                    allow_unused=True)
    return {i: g for i, g in zip(diff, grads) if g is not None}
