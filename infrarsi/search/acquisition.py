"""Acquisition: expected improvement in log step time, times the probability the setting fits in memory and passes the
loss check, over one ask's candidates (:func:`score`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..knobs import Setting
from ..models import ndtr
from .history import History
from .pairing import pairings
from .scored import Scored

if TYPE_CHECKING:
    from .steps import Context


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


def score(ctx: "Context", p_pass: Callable[[History, Sequence[Setting]], np.ndarray]) -> Scored:
    """Every candidate's acquisition: EI x P(fit) x P(pass the loss check), the candidates extended with the paired
    variants of fast candidates that probably do not fit; -inf above the P(OOM) cap (unless nothing is under it);
    halved next to a pending trial. The EI reads the time part's sd times ``ei_sd_scale``."""
    enc, cfg = ctx.encoder, ctx.config
    cands = list(ctx.candidates)
    x = enc.onehot(cands)
    mean, sd = ctx.time.predict(cands)
    p_oom = ctx.p_oom(cands)
    best = math.log(ctx.history.best()[1].step_time_s)
    scale = cfg.ei_sd_scale
    ei = expected_improvement(mean, sd * scale, best)
    # Pairing: fast but unlikely to fit -> add variants with memory savers.
    paired = pairings(ctx, cands, ei, p_oom, ctx.taken)
    in_pool = set(cands)
    pc = [p for p, _ in paired if p not in in_pool]
    if pc:
        pm, ps = ctx.time.predict(pc)
        cands = cands + pc
        x = np.vstack([x, enc.onehot(pc)])
        mean, sd = np.concatenate([mean, pm]), np.concatenate([sd, ps])
        ei = np.concatenate([ei, expected_improvement(pm, ps * scale, best)])
        p_oom = np.concatenate([p_oom, ctx.p_oom(pc)])
    # The loss check: values of settings that broke it make a candidate less likely to pass.
    pp = p_pass(ctx.history, cands)
    acq = ei * (1.0 - p_oom) * pp
    # The stopping rule reads the whole posterior: the exploitation scale picks among candidates, it does not make the
    # search think it has less to gain.
    full = acq if scale == 1.0 else expected_improvement(mean, sd, best) * (1.0 - p_oom) * pp
    # Safety: a candidate the memory model expects to OOM is a last resort, whatever its EI; when every candidate is
    # one, feasibility first: the likeliest to fit, EI breaking ties (Gelbart et al., 2014: with no point known to meet
    # a constraint, maximise the probability that one does).
    fits = p_oom <= ctx.cap
    if fits.any():
        acq = np.where(fits, acq, -np.inf)
    else:
        acq = (1.0 - p_oom) * pp * (1.0 + 1e-3 * ei / max(float(ei.max()), 1e-12))
    # Batch diversity: a candidate one knob away from a pending one counts half.
    for s in ctx.pending:
        acq = np.where(hamming(x, enc.onehot([s])[0]) <= 2, acq * 0.5, acq)
    return Scored(cands, acq, ei, mean, p_oom, pp, {p: why for p, why in paired}, float(np.max(full)))
