"""The known optimum: bounded exhaustive enumeration of a space's valid settings, memory once per layout
prefix, the time model only for settings that fit."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from ...knobs import Constraint, KnobSpace, Setting
from .layout import _Layout, _layout
from .memory import MemoryBreakdown, _memory
from .space import _DEPS, SIM_KNOBS, space_for
from .step_time import _exposed, _step_parts
from .workload import SimWorkload, get_workload


class Optimum(NamedTuple):
    setting: Setting | None
    step_time_s: float | None
    n_valid: int
    n_oom: int


def iter_valid(space: KnobSpace) -> Iterator[Setting]:
    """Every valid setting of ``space`` (depth-first in the layout-first knob order, checking each rule as
    soon as the knobs it reads are assigned; rules with unknown inputs are checked at the leaves)."""
    for cur in _iter_valid_dicts(space):
        yield Setting(cur)


def _iter_valid_dicts(space: KnobSpace, changed: list[int] | None = None) -> Iterator[dict[str, Any]]:
    """As :func:`iter_valid`, yielding one mutable dict that changes between yields (copy to keep).
    ``changed[0]`` is set to the position (in :data:`SIM_KNOBS` order) of the first knob that changed
    since the previous yield, so a caller can reuse work that depends only on earlier knobs."""
    order = _order(space)
    assigned_at: dict[int, list[Constraint]] = {}
    leaf: list[Constraint] = []
    pos = {n: i for i, n in enumerate(order)}
    for c in space.constraints:
        deps = _DEPS.get(c.name)
        if deps is None:
            leaf.append(c)
            continue
        idx = max((pos[d] for d in deps if d in pos), default=0)
        assigned_at.setdefault(idx, []).append(c)
    domains = [space[n].domain for n in order]
    defaults = {k.name: k.default for k in space.knobs}
    cur = dict(defaults)
    last = len(order) - 1
    mark = changed if changed is not None else [0]
    mark[0] = 0

    def rec(i: int) -> Iterator[dict[str, Any]]:
        name = order[i]
        checks = assigned_at.get(i, ())
        for val in domains[i]:
            cur[name] = val
            if mark[0] > i:
                mark[0] = i
            if all(c(cur) is None for c in checks):
                if i == last:
                    if all(c(cur) is None for c in leaf):
                        yield cur
                        mark[0] = last + 1
                else:
                    yield from rec(i + 1)
        cur[name] = defaults[name]

    if order:
        yield from rec(0)


def _order(space: KnobSpace) -> list[str]:
    return [n for n in SIM_KNOBS if n in space] + [n for n in space.names if n not in SIM_KNOBS]


# Knobs that change neither memory nor anything but their own term of the step time: enumerated innermost.
_TIME_ONLY = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather", "moe_grouped_gemm")


def exhaustive_optimum(workload: str | SimWorkload | Mapping[str, Any], space: KnobSpace | None = None, *,
                       device_used: Callable[[MemoryBreakdown], float] | None = None,
                       time_factor: Callable[[Mapping[str, Any]], float] | None = None) -> Optimum:
    """The noise-free fastest valid setting of ``space`` (default: the workload's whole space), by bounded
    enumeration: rules prune partial settings; memory is computed once per memory-relevant prefix and
    OOM settings skip the time model. Returns (setting, step_time_s, n_valid, n_oom).

    ``device_used`` (bytes from a breakdown; default its own ``device_used``) and ``time_factor`` (a
    multiplier on the step time per setting) let a perturbed landscape (workloads/variants.py) reuse the
    enumeration: memory must still depend only on the layout, not on the overlap knobs."""
    w = get_workload(workload)
    sp = space if space is not None else space_for(w)
    best: Setting | None = None
    best_t = math.inf
    n_valid = n_oom = 0
    mem_cache: dict[tuple, bool] = {}
    layer_cache: dict = {}
    order = _order(sp)
    first_fast = min((order.index(n) for n in _TIME_ONLY if n in order), default=len(order))
    if any(n not in SIM_KNOBS for n in order[first_fast:]):
        first_fast = len(order)  # a foreign knob after them: no shortcut
    changed = [0]
    base: _Layout | None = None
    prefix: dict[tuple, Any] = {}  # per layout prefix: memory verdicts and step parts by (tco, gg)
    for s in _iter_valid_dicts(sp, changed):
        n_valid += 1
        if base is None or changed[0] < first_fast:
            base = _layout(w, s)
            prefix = {}
        tco, gg = bool(s.get("tp_comm_overlap", False)), bool(s.get("moe_grouped_gemm", False))
        key = (tco, gg)
        hit = prefix.get(key)
        if hit is None:
            lay = base._replace(tco=tco, gg=gg)
            mkey = lay._replace(ogr=False, opg=False, gg=False)
            oom = mem_cache.get(mkey)
            if oom is None:
                mem = _memory(w, lay)
                oom = mem_cache[mkey] = (device_used(mem) if device_used else mem.device_used) > mem.capacity
            hit = prefix[key] = (oom, None if oom else _step_parts(w, lay._replace(ogr=False, opg=False), layer_cache))
        oom, parts = hit
        if oom:
            n_oom += 1
            continue
        t = _exposed(parts, base.rc, bool(s.get("overlap_grad_reduce", False)),
                     bool(s.get("overlap_param_gather", False)))[0]
        if time_factor is not None:
            t *= time_factor(s)
        if t < best_t:
            best, best_t = Setting(s), t
    return Optimum(best, best_t if best is not None else None, n_valid, n_oom)
