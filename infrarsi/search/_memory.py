"""Fitting the memory models that price P(OOM) for :class:`~.tuner.Tuner` (step 2 of its module docstring): the sum of
power-law terms (:mod:`.structured`) without a memory estimate, else the censored GP (:mod:`.censored`). Both take
the three kinds of memory evidence: a measured peak, an OOM (peak > capacity), a run without a peak (peak <= capacity)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..knobs import Setting
from .censored import ABOVE, BELOW, OBS, CensoredSurrogate
from .outcome import Outcome
from .structured import STRUCTURE, STRUCTURE_WITH_SAVERS, StructuredMemory, features, structure_prior

if TYPE_CHECKING:
    from .tuner import Tuner

RAN = ("ok", "numerics_drift")  # statuses of a trial that ran every step (its peak and verdict are data)


def memory_targets(rows: list[tuple[Setting, Outcome]]) -> tuple[np.ndarray, np.ndarray]:
    """Per memory row: its kind (OBS: a measured peak, ABOVE: an OOM, BELOW: ran without a peak) and its log
    peak bytes (NaN where none was measured), each (n,)."""
    kind = np.array([ABOVE if o.status == "oom" else OBS if o.peak_memory_bytes else BELOW for _, o in rows])
    peak = np.array([math.log(o.peak_memory_bytes) if o.status in RAN and o.peak_memory_bytes else np.nan
                     for _, o in rows])
    return kind, peak


def fit_memory_terms(tuner: "Tuner", rows: list[tuple[Setting, Outcome]]) -> None:
    """Refit ``tuner.memory_terms`` from its last coefficients (kept when the fit fails)."""
    kind, peak = memory_targets(rows)
    cfg = tuner.config
    prev = tuner.memory_terms.theta if tuner.memory_terms is not None else None
    prior = (structure_prior(tuner._model_space, STRUCTURE_WITH_SAVERS if cfg.memory_savers else STRUCTURE)
             if cfg.memory_structure else None)
    fit = StructuredMemory.fit(features(tuner._model_space, [s for s, _ in rows]), kind, peak,
                               tuner._memory_model.log_capacity, start=prev, seed=len(rows), prior=prior)
    if fit is not None:
        tuner.memory_terms = fit


def fit_memory_gp(tuner: "Tuner", rows: list[tuple[Setting, Outcome]]) -> None:
    """Refit ``tuner.memory_gp`` (None until ``memory_gp_min_peaks`` peaks are measured: the additive censored model
    prices P(OOM) until the kernel has peaks to fit its scale on)."""
    tuner.memory_gp = None
    kind, peak = memory_targets(rows)
    if (kind == OBS).sum() < tuner.config.memory_gp_min_peaks:
        return
    x1, codes, off = tuner._memory_gp_rows([s for s, _ in rows])
    mm = tuner.memory_model
    tuner.memory_gp = CensoredSurrogate.fit(x1, codes, off, kind, peak, *mm.coefficient_prior(), mm.log_capacity,
                                            ordered=tuner._ordered)
