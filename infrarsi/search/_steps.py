"""The model-guided steps of :class:`~.tuner.Tuner`: the initial design, and which scored candidate an ask proposes
(a probe of an untested prior claim, a local step, a Thompson step, or the acquisition's best within the trust
radius). See the module docstring of :mod:`.tuner`, steps 1, 2, 4 and 7."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..knobs import Setting
from .acquisition import hamming
from .design import maximin
from .prior_check import untested_claim
from .proposal import Proposal, Scored

if TYPE_CHECKING:
    from .tuner import Tuner


def design_step(tuner: "Tuner", cands: list[Setting], x: np.ndarray, taken: set[Setting]) -> Setting:
    """Initial design: promising (prior/model mean, penalised by P(OOM) and P(drift)) and diverse (maximin); once
    ``n_initial`` trials have run out of memory with nothing that ran, every other trial the smallest predicted peak."""
    mean, _ = tuner.predict_time(cands)
    p_oom = tuner._p_oom(cands)
    p_pass = tuner.p_pass(cands)
    score = mean - np.log(np.maximum(1.0 - p_oom, 1e-6)) - np.log(np.maximum(p_pass, 1e-6))
    extra = len(tuner.history) + len(tuner.pending) - tuner.config.n_initial
    if extra >= 0 and extra % 2 == 0 and tuner._has_memory_data():
        # The design ran its course and nothing ran: every other trial, the smallest predicted peak. Diverse
        # picks alone (the farthest of the promising quarter, where the memory model knows least) went on failing
        # for 19 more trials on a perturbed cluster where 9 in 10 valid settings OOM; the smallest peak alone
        # never fits where the model does not know which knobs save memory (tests/search/test_structured.py).
        j = int(np.argmin(tuner.predict_memory(cands)[0]))
    else:
        taken_list = list(taken)
        x_taken = tuner._encode(taken_list) if taken_list else None
        j = maximin(x, score, 1, x_taken=x_taken)[0]
    tuner._why[cands[j]] = Proposal(kind="design", p_oom=float(p_oom[j]), predicted_s=float(np.exp(mean[j])),
                                    p_drift=float(1.0 - p_pass[j]) if p_pass[j] < 1.0 else None)
    return cands[j]


def pick(tuner: "Tuner", sc: Scored, incumbent: list[Setting]) -> tuple[int, str]:
    """Which scored candidate, and as what: every ``local_every``-th model-guided ask the best move from the
    incumbent, every ``thompson_every``-th the fastest under one posterior draw, else the acquisition's best."""
    tuner._asks += 1
    cfg = tuner.config
    acq = sc.acq
    if cfg.prior_probe > 0:
        j = probe(tuner, sc, incumbent[0])
        if j is not None:
            return j, "probe"
    if cfg.local_every and tuner._asks % cfg.local_every == 1 % cfg.local_every:
        near = set(tuner._neighbors(incumbent[0]))
        local = np.array([c in near for c in sc.cands]) & np.isfinite(acq)
        if local.any():
            return int(np.argmax(np.where(local, acq, -np.inf))), "local"
    if cfg.thompson_every and tuner._asks % cfg.thompson_every == 0:
        # Thompson step: the fastest fitting setting under one coherent posterior draw. It explores
        # where the (possibly misspecified) mean model is too sure of itself.
        draw = thompson_draw(tuner, sc.cands)
        if draw is not None:
            draw = np.where(np.isfinite(acq) & (sc.p_pass >= 0.5), draw, np.inf)
            if np.isfinite(draw).any():
                return int(np.argmin(draw)), "thompson"
    if cfg.trust_radius:
        near = within_trust_radius(tuner, sc.cands) & np.isfinite(acq)
        if near.any():
            return int(np.argmax(np.where(near, acq, -np.inf))), "acquisition"
    return int(np.argmax(acq)), "acquisition"


def within_trust_radius(tuner: "Tuner", cands: list[Setting]) -> np.ndarray:
    """(m,) bool: the candidates within ``trust_radius`` knob changes of one of the 5 fastest settings measured."""
    top = tuner._codes(tuner._fastest(5))
    return ((tuner._codes(cands)[:, None, :] != top[None, :, :]).sum(axis=2) <= tuner.config.trust_radius).any(axis=1)


def probe(tuner: "Tuner", sc: Scored, inc: Setting) -> int | None:
    """The nearest fitting candidate with the value of :func:`.prior_check.untested_claim` (once per knob)."""
    ran = [s for s, o in tuner.history if o.status == "ok"]
    claim = untested_claim(tuner._time_priors(), tuner.space, inc, ran, skip=tuner._probed,
                           min_claim=tuner.config.prior_probe, max_sd=tuner.config.prior_probe_sd)
    if claim is None:
        return None
    knob, u = claim
    tuner._probed.add(knob)
    ok = np.array([c[knob] == u for c in sc.cands]) & np.isfinite(sc.acq)
    if not ok.any():
        return None
    dist = hamming(tuner._encode(sc.cands), tuner._encode([inc])[0])
    tie = 1e-3 * sc.acq / max(float(np.abs(sc.acq[ok]).max()), 1e-12)  # among the nearest, the best acquisition
    return int(np.argmax(np.where(ok, -dist + tie, -np.inf)))


def thompson_draw(tuner: "Tuner", cands: list[Setting]) -> np.ndarray | None:
    """One coherent posterior draw of log step time over ``cands`` (the joint GP, or the additive model + residual GP), or
    None when the draw fails on its numerics (logged; the EI maximiser is proposed instead)."""
    try:
        if tuner.surrogate is not None:
            return tuner.surrogate.sample(tuner._xt(cands), tuner._codes(cands), tuner.time_model.standard_normal)
        draw = tuner.time_model.sample(cands, 1)[0]
        if tuner.residual is not None:
            gm, gv = tuner.residual.predict(tuner._codes(cands))
            draw = draw + gm + np.sqrt(gv) * tuner.time_model.standard_normal(len(cands))
        return draw
    except (np.linalg.LinAlgError, FloatingPointError, ValueError) as e:
        tuner._numerics(f"Thompson draw failed ({type(e).__name__}: {e}); proposed by EI instead")
        return None
