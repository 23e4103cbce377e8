"""Acquisition: expected improvement in log step time, times the probability the setting fits in memory."""

from __future__ import annotations

import numpy as np
from ..models import ndtr


def expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """EI of a minimisation, on the log scale: E[max(best - Y, 0)] for Y ~ N(mean, sd^2), shape (n,).

    ``best`` is the best observed log step time; EI of 0.05 means "about 5% faster, in expectation"."""
    sd = np.maximum(sd, 1e-9)
    z = (best - mean) / sd
    return (best - mean) * ndtr(z) + sd * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


def hamming(x: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Number of knobs in which each encoded setting differs from ``row`` (one-hot columns: 2 per changed knob,
    1 when one side is at the default), shape (n,)."""
    return np.abs(x - row[None, :]).sum(axis=1)
