"""Invariant checks: the contract as referee. A setting may not touch the workload; a loss trace must
match the baseline's within the contract's tolerance."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .model import FIXED_WORKLOAD_KEYS, Contract


def free_knobs(contract: Contract, space: Any) -> set[str]:
    """Knobs that ``scope.knobs`` does not name but the adapter's space leaves free: derived ones, such as
    data_parallel = world / (tp x pp x cp), which follow the knobs they are derived from."""
    if not contract.scope.knobs:
        return set()
    return {k.name for k in space.knobs if k.name not in contract.scope.knobs and len(k.domain) > 1}


def setting_violations(contract: Contract, setting: Mapping[str, Any], *, derived: set[str] = frozenset()) -> list[str]:
    """Why a setting would change the task or leave the locked scope (empty = allowed). ``derived`` knobs
    (:func:`free_knobs`) follow their parents and are checked by the knob space, not here."""
    out = []
    for k, v in setting.items():
        if k in derived:
            continue
        if k in FIXED_WORKLOAD_KEYS or k in contract.workload.args:
            out.append(f"{k}={v!r} would change the fixed workload argument {k} "
                       f"(locked to {contract.workload.args.get(k, '<framework default>')!r})")
        elif contract.scope.knobs and k in contract.scope.knobs and v not in contract.scope.knobs[k]:
            if setting.get(k) != contract.baseline.get(k, object()):
                out.append(f"{k}={v!r} is outside the locked scope {contract.scope.knobs[k]}")
    return out


def loss_violation(contract: Contract, baseline: Sequence[float], losses: Sequence[float]) -> str | None:
    """None when the first ``compare_steps`` losses agree with the baseline's within ``rtol``, else why not."""
    n = contract.invariants.loss.compare_steps
    rtol = contract.invariants.loss.rtol
    if len(losses) < n or len(baseline) < n:
        return f"loss trace too short to compare: {len(losses)} steps (baseline {len(baseline)}), contract compares {n}"
    for i, (a, b) in enumerate(zip(baseline[:n], losses[:n]), start=1):
        if not math.isfinite(b):
            return f"loss at iteration {i} is {b}"
        if abs(b - a) > rtol * abs(a):
            return (f"loss at iteration {i} is {b:.6g}, baseline {a:.6g}: |diff| {abs(b - a):.3g} > "
                    f"rtol {rtol} x {abs(a):.6g} = {rtol * abs(a):.3g}")
    return None


@runtime_checkable
class ReadsLaunch(Protocol):
    """An adapter that reads the contract's launch file (Megatron, torchtitan: ``LaunchFileAdapter``)."""

    def parsed(self, contract: Contract) -> Any:
        """The launch as the framework reads it; ``.fixed``: its fixed workload arguments."""


def env_violations(contract: Contract, adapter: object) -> list[str]:
    """Where ``workload.script_env`` or ``workload.env`` changes what the workload fixes: the launch, as the adapter
    reads it with them, gives a fixed workload argument another value than ``[workload.args]`` locks it to (the
    same rule as a knob that would: the variable a launch script reads for the global batch is such a knob).
    [] for adapters that read no launch file."""
    w = contract.workload
    if not isinstance(adapter, ReadsLaunch) or not w.launch or not w.args:
        return []
    parsed = adapter.parsed
    got = dict(parsed(contract).fixed)
    bad = {k: got[k] for k, v in w.args.items() if k in got and got[k] != v}
    out = []
    for k, now in sorted(bad.items()):
        culprits = []
        for where, env in (("script_env", w.script_env), ("env", w.env)):
            for var, val in env.items():
                other = contract.model_copy(update={"workload": w.model_copy(
                    update={where: {x: y for x, y in env.items() if x != var}})})
                if dict(parsed(other).fixed).get(k) != now:
                    culprits.append(f"workload.{where} {var}={val!r}")
        who = ", ".join(culprits) or "the launch as the adapter reads it"
        out.append(f"{who} would change the fixed workload argument {k} (locked to {w.args[k]!r}; the launch reads "
                   f"{now!r} with it): the environment may not change the task; remove it, or fix [workload.args]")
    return out
