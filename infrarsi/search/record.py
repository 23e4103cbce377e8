"""The search record's ``models`` block (rundir/models.py: ``ModelsRecord``), written from the tuner's own fitted
models at the end of the search: effects a user means, the fit itself, and which model priced time and memory.
The report only reads it; nothing is refit.

Memory effects. With the analytical estimate on (always, in the run stage), the memory model is::

    log peak(s) = intercept + x(s) @ beta + log estimate(s)

so ``beta`` is a *correction*: how far this machine and framework move the peak beyond the arithmetic. The
effect a user means, "what does micro_batch_size=8 do to my peak", is the estimate's effect plus the
correction. The estimate is not additive in the knobs, so its effects are its least-squares projection on
the model's own design (the same columns as ``beta``) over valid settings of the space::

    b_est = argmin_b sum_s (log estimate(s) - c - x(s) @ b)^2,   s: up to PROJECTION_SETTINGS valid settings
    rms   = RMS of that fit's residuals (log scale; recorded as ``estimate_projection_rms``)
    effect[j] = (to_levels @ b_est)[j] + correction[j]            # log scale, relative to the knob's default
    90% interval = (to_levels @ b_est)[j] + correction's 90% interval, widened by 1.645 rms either side

The widening is the price of an additive summary of a non-additive estimate: an effect is an average over
the space, and at one setting it may differ by about rms. Without an estimate the memory coefficients are
the effects.

Prior revision compares each prior (what the user or the LLM believed about the whole effect) with the
whole effect, never with the correction.

The fit (``fitted``): for every setting the tuner was told, keyed by :meth:`Setting.key`, the tuner's
posterior predictive of log step time (additive model + residual GP + noise, log seconds: mean, sd) and of
log peak bytes (offsets included: mean, sd) and P(OOM); and, when the memory model has an offset, the
pre-flight estimate itself (``estimate``: bytes per rank, and its basis: "fake step", "analytical", ...), the
figure the tuner priced P(OOM) with before the setting ran.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..models import Effect, revision
from ..trial.prior import Prior, Z90
from ..trial.proposal import Proposal
from ..rundir import RunDir, SearchRecord
from ..rundir.models import EffectRecord, FittedRecord, ModelsRecord, RevisionRecord
from .memory import AdditivePeak, CensoredPeak, NoMemory, StructuredPeak
from .estimated import EstimatedTime
from .time import JointTime, ResidualTime
from .tuner import Tuner

PROJECTION_SETTINGS = 400


class _Effects:
    """What :func:`infrarsi.models.revision` reads from a model: its target and its effects."""

    def __init__(self, target: str, effects: list[Effect]) -> None:
        self.target, self._effects = target, effects

    def effects(self) -> list[Effect]:
        return self._effects


def estimate_levels(tuner: Tuner) -> tuple[np.ndarray, float]:
    """The analytical estimate's part of each memory-model column (log scale, see the module doc) and the RMS
    misfit of its additive projection over up to PROJECTION_SETTINGS valid settings of the tuner's space."""
    design = tuner.memory_model.design
    log_est = lambda s: math.log(max(tuner.memory_estimate(s), 1.0))  # noqa: E731
    settings = tuner.space.candidates(PROJECTION_SETTINGS, random.Random(0))
    y = np.array([log_est(s) for s in settings])
    x1 = np.hstack([np.ones((len(settings), 1)), design.matrix(settings)])
    coef, *_ = np.linalg.lstsq(x1, y, rcond=None)  # minimum-norm solution: columns a sample never varies get 0
    rms = float(np.sqrt(np.mean((y - x1 @ coef) ** 2)))
    return design.to_levels @ coef[1:], rms


def memory_effects(tuner: Tuner) -> tuple[list[Effect], list[Effect], float | None]:
    """(effects a user means, the model's raw coefficients, the projection's RMS misfit or None)."""
    raw = tuner.memory_model.effects()
    if tuner.memory_estimate is None:
        return raw, raw, None
    est, rms = estimate_levels(tuner)
    w = Z90 * rms  # the additive summary of the estimate is off by its misfit: the interval says so
    total = [replace(e, mean=e.mean + float(b), lo=e.lo + float(b) - w, hi=e.hi + float(b) + w) for e, b in zip(raw, est)]
    return total, raw, rms


def fitted(tuner: Tuner) -> FittedRecord:
    """Setting key -> the tuner's posterior predictive for every setting it was told (see the module doc)."""
    settings = list(dict.fromkeys(s for s, _ in tuner.history))
    out = FittedRecord()
    if not settings:
        return out
    est = tuner.memory_estimate
    if est is not None:  # cached per setting by the estimator: the same figure the tuner used before the trial
        out.estimate = {s.key(): (float(est(s)), est.basis(s)) for s in settings}
    if tuner.time_model.n_obs:
        mean, sd = tuner.predict_time(settings)
        noise2 = tuner.time_model.sigma ** 2  # run-to-run scatter around the mean
        out.time = {s.key(): (float(m), float(math.sqrt(v * v + noise2))) for s, m, v in zip(settings, mean, sd)}
    mm = tuner.memory_model
    if mm is not None and mm.n_obs + mm.n_censored:
        mean, sd = tuner.predict_memory(settings)
        offsets = (np.array([math.log(max(tuner.memory_estimate(s), 1.0)) for s in settings])
                   if tuner.memory_estimate is not None else None)
        p = mm.p_oom(settings, offsets=offsets)
        out.memory = {s.key(): (float(m), float(v), float(q)) for s, m, v, q in zip(settings, mean, sd, p)}
    return out


def time_priced_by(tuner: Tuner) -> str:
    """The model that ranked step time at the end of the search (search/time.py's parts)."""
    part = tuner.time
    if isinstance(part, EstimatedTime):
        return ("the joint GP on the predicted step time (its log as a column with coefficient prior 1; "
                "search/estimated.py, estimate/step_model.py)")
    if isinstance(part, JointTime) and part.surrogate is not None:
        return "the joint GP: the additive effects plus a kernel on the knob values (search/surrogate.py)"
    if isinstance(part, ResidualTime) and part.residual is not None:
        return "the additive model plus a GP on its residuals (search/residual.py)"
    if tuner.time_model is not None:
        return "the additive model (models/time.py)"
    return type(part).__name__


def memory_priced_by(tuner: Tuner) -> str:
    """The model that priced P(OOM) at the end of the search (search/memory.py's parts)."""
    part = tuner.memory
    offset = " on the pre-flight estimate as offset" if tuner.memory_estimate is not None else ""
    if isinstance(part, NoMemory):
        return "none (no memory capacity: nothing priced)"
    if isinstance(part, StructuredPeak) and part.terms is not None:
        return "the structured sum of power-law terms (search/structured.py)"
    if isinstance(part, CensoredPeak) and part.gp is not None:
        return f"the censored GP on the additive model{offset} (search/censored.py)"
    if isinstance(part, (AdditivePeak, StructuredPeak, CensoredPeak)):
        return f"the additive censored model{offset} (models/memory.py)"
    return type(part).__name__


def models_record(tuner: Tuner, priors: list[Prior]) -> ModelsRecord:
    """The ``models`` block of the search record: what the tuner fitted, in the units the report prints."""
    tuner.fit_models()
    rec = ModelsRecord(fitted=fitted(tuner), memory_estimate=tuner.memory_estimate is not None,
                       time_priced_by=time_priced_by(tuner), memory_priced_by=memory_priced_by(tuner))
    if tuner.time_model.n_obs:
        te = tuner.time_model.effects()
        rec.time_effects = [EffectRecord(**_asdict(e)) for e in te]
        rec.time_revisions = [RevisionRecord(**_asdict(r)) for r in revision(priors, _Effects("time", te))] if priors else []
        rec.time_sigma = tuner.time_model.sigma
    mm = tuner.memory_model
    if mm is not None and mm.n_obs + mm.n_censored:
        total, raw, rms = memory_effects(tuner)
        rec.memory_effects = [EffectRecord(**_asdict(e)) for e in total]
        rec.memory_corrections = [EffectRecord(**_asdict(e)) for e in raw] if tuner.memory_estimate is not None else []
        rec.estimate_projection_rms = rms
        rec.memory_revisions = [RevisionRecord(**_asdict(r)) for r in revision(priors, _Effects("memory", total))] if priors else []
        rec.capacity_bytes = mm.capacity_bytes
    return rec


def _asdict(x: Any) -> dict[str, Any]:
    d = {k: getattr(x, k) for k in x.__dataclass_fields__}
    d["text"] = str(x)
    return {k: v for k, v in d.items() if not (isinstance(v, float) and math.isnan(v))}


def save_search(run_dir: Path, tuner: Tuner, priors: list[Prior], proposals: dict[str, Proposal], stop_reason: str,
                kernel_verdicts: dict,
                bank_sources: list) -> SearchRecord:
    """Write the run's search record (sealed): why it stopped, each trial's proposal, the priors, the kernel verdicts,
    the bank runs it seeded from and what the tuner's models fitted (effects, revisions, the fit the report reads).
    The kernel verdicts are their component's open mappings: kept as their JSON (a value JSON cannot hold, as its
    text)."""
    rec = SearchRecord(stop_reason=stop_reason, proposals=dict(proposals), tuner_overhead_s=list(tuner.overhead_s),
                       kernel_verdicts=_json(kernel_verdicts), bank_sources=[str(s) for s in bank_sources],
                       priors=list(priors), models=models_record(tuner, priors))
    return RunDir(run_dir).write_search(rec)


def _json(x: dict) -> dict:
    return json.loads(json.dumps(x, default=str))
