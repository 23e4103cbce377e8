"""Pairing (step 3 of :mod:`.tuner`): a candidate that would be fast but probably does not fit is paired with the
memory savers that make it fit -- one-knob changes the memory model prices below its peak, alone or two at a time."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from ..knobs import KnobSpace, Setting

if TYPE_CHECKING:
    from .tuner import Tuner


def pairings(tuner: "Tuner", cands: list[Setting], ei: np.ndarray, p_oom: np.ndarray,
             exclude: set[Setting]) -> list[tuple[Setting, tuple[Setting, list[str]]]]:
    """For the fastest-predicted candidates that probably do not fit, the best variant with one or two
    memory savers (one-knob changes the memory model prices below the candidate's peak) that does."""
    if not tuner._has_memory_data():
        return []
    cfg, cap = tuner.config, tuner._cap()
    hungry = [i for i in np.argsort(-ei, kind="stable")[: cfg.pair_top * 4] if p_oom[i] > cap][: cfg.pair_top]
    out: list[tuple[Setting, tuple[Setting, list[str]]]] = []
    seen: set[Setting] = set()
    for i in hungry:
        c = cands[i]
        moves = one_knob_changes(tuner.space, c)
        if not moves:
            continue
        ms = [s for s, _ in moves]
        m_all, _ = tuner.predict_memory([c, *ms])  # the belief that prices P(OOM)
        m_c, m_n = m_all[:1], m_all[1:]
        savers = [moves[j] for j in np.flatnonzero(m_n < m_c[0] - 0.01)]
        variants: list[tuple[Setting, list[str]]] = [(s, [f"{k}={v}"]) for s, (k, v) in savers]
        for (s1, (k1, v1)), (_, (k2, v2)) in itertools.combinations(savers, 2):
            if k1 != k2:
                variants.append((s1.replace(**{k2: v2}), [f"{k1}={v1}", f"{k2}={v2}"]))
        variants = [(s, sv) for s, sv in variants if s not in exclude and s not in seen and tuner._is_valid(s)]
        if not variants:
            continue
        vs = [s for s, _ in variants]
        fit = tuner._p_oom(vs) <= cap
        if not fit.any():
            continue
        vm, _ = tuner.predict_time(vs)
        j = int(np.argmin(np.where(fit, vm, np.inf)))
        seen.add(vs[j])
        out.append((vs[j], (c, variants[j][1])))
    return out


def one_knob_changes(space: KnobSpace, s: Setting) -> list[tuple[Setting, tuple[str, Any]]]:
    """Every setting one knob away from ``s`` (valid or not), with the (knob, value) it changes."""
    out = []
    for k in space.knobs:
        for v in k.domain:
            if v != s[k.name]:
                out.append((s.replace(**{k.name: v}), (k.name, v)))
    return out
