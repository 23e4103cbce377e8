"""Pairing (step 3 of :mod:`.tuner`): a candidate that would be fast but probably does not fit is paired with the
memory savers that make it fit -- one-knob changes the memory model prices below its peak, alone or two at a time.
Which knobs save memory is the memory part's belief (learned from the trials, a knob's meaning only its prior)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from ..knobs import KnobSpace, Setting

if TYPE_CHECKING:
    from .steps import Context


def pairings(ctx: "Context", cands: list[Setting], ei: np.ndarray, p_oom: np.ndarray,
             exclude: set[Setting]) -> list[tuple[Setting, tuple[Setting, list[str]]]]:
    """For the fastest-predicted candidates that probably do not fit, the best variant with one or two
    memory savers (one-knob changes the memory model prices below the candidate's peak) that does."""
    if not ctx.memory.ready:
        return []
    cfg, cap = ctx.config, ctx.cap
    hungry = [i for i in np.argsort(-ei, kind="stable")[: cfg.pair_top * 4] if p_oom[i] > cap][: cfg.pair_top]
    moved = [(cands[i], moves) for i in hungry if (moves := one_knob_changes(ctx.space, cands[i]))]
    if not moved:
        return []
    # The models are asked once for every hungry candidate and its moves, then once for every variant: a
    # prediction per row does not depend on the rows beside it, and ~12 small calls per ask cost more than two big ones.
    rows = list(dict.fromkeys(s for c, moves in moved for s in (c, *(m for m, _ in moves))))
    peaks = dict(zip(rows, ctx.memory.predict(rows)[0]))  # the belief that prices P(OOM)
    per_cand: list[tuple[Setting, list[tuple[Setting, list[str]]]]] = []
    for c, moves in moved:
        savers = [(m, kv) for m, kv in moves if peaks[m] < peaks[c] - 0.01]
        variants: list[tuple[Setting, list[str]]] = [(s, [f"{k}={v}"]) for s, (k, v) in savers]
        for (s1, (k1, v1)), (_, (k2, v2)) in itertools.combinations(savers, 2):
            if k1 != k2:
                variants.append((s1.replace(**{k2: v2}), [f"{k1}={v1}", f"{k2}={v2}"]))
        per_cand.append((c, [(s, sv) for s, sv in variants if s not in exclude and ctx.is_valid(s)]))
    every = list(dict.fromkeys(s for _, vs in per_cand for s, _ in vs))
    if not every:
        return []
    fits = dict(zip(every, ctx.p_oom(every) <= cap))
    times = dict(zip(every, ctx.time.predict(every)[0]))
    out: list[tuple[Setting, tuple[Setting, list[str]]]] = []
    seen: set[Setting] = set()
    for c, variants in per_cand:
        # the fastest-predicted variant that fits and that no earlier candidate's pairing took
        best = min(((times[s], k) for k, (s, _) in enumerate(variants) if s not in seen and fits[s]), default=None)
        if best is None:
            continue
        s, sv = variants[best[1]]
        seen.add(s)
        out.append((s, (c, sv)))
    return out


def one_knob_changes(space: KnobSpace, s: Setting) -> list[tuple[Setting, tuple[str, Any]]]:
    """Every setting one knob away from ``s`` (valid or not), with the (knob, value) it changes."""
    out = []
    for k in space.knobs:
        for v in k.domain:
            if v != s[k.name]:
                out.append((s.replace(**{k.name: v}), (k.name, v)))
    return out
