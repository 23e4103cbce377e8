"""Scored: one ask's scored candidate pool (what a step picks from; why it picked, the value it returns with its pick,
is :class:`~infrarsi.trial.proposal.Proposal`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..knobs import Setting


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
