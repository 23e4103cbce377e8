"""Proposal: why the tuner proposed a setting (kind, EI, P(OOM), predicted time, pairing), and Scored: one ask's
scored candidate pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..knobs import Setting


@dataclass
class Proposal:
    """Why a setting was proposed."""

    kind: str  # initial | design | acquisition | local | thompson | paired | probe
    ei: float | None = None
    p_oom: float | None = None
    p_drift: float | None = None  # 1 - P(pass the loss check), when some trial has broken it
    predicted_s: float | None = None
    paired_from: dict[str, Any] | None = None
    savers: list[str] = field(default_factory=list)  # "knob=value" changes that made it fit

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [])}


@dataclass(frozen=True)
class Scored:
    """One ask's scored pool (arrays of shape (m,), in the order of ``cands``); ``paired``: variant -> (the candidate
    it was paired from, its savers); ``best_ei``: the largest EI x P(fit) x P(pass) with the whole predictive sd (what
    the stopping rule reads)."""

    cands: list[Setting]
    acq: np.ndarray
    ei: np.ndarray
    mean: np.ndarray
    p_oom: np.ndarray
    p_pass: np.ndarray
    paired: dict[Setting, tuple[Setting, list[str]]]
    best_ei: float = float("nan")
