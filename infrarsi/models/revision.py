"""Effects and prior revision: what each knob value costs, and which priors the trials contradicted.

``Effect``: one model column's posterior on the log scale (mean and central 90% interval) and the
same as a percentage change of step time or peak memory relative to the knob's default::

    recompute_granularity=selective: -38% [-45, -30] memory

``revision(priors, model) -> list[PriorRevision]``: for each prior whose feature is a column of
the model, the prior's 90% interval (mean +- 1.645 sd, time_* or mem_* fields by the model's target)
next to the posterior's. ``miscalibrated`` is True when the two 90% intervals do not overlap, and
``direction`` says how the prior was wrong:

- ``"wrong sign"``: the posterior interval excludes 0 on the other side of the prior's mean;
- ``"stronger than believed"`` / ``"weaker than believed"``: same sign (or no effect), other size;
- ``"consistent"``: the intervals overlap (``miscalibrated`` False).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..trial.prior import Z90, Prior

if TYPE_CHECKING:
    from ._base import LogLinearModel


def pct(x: float) -> float:
    """Log-scale effect -> percentage change: -0.1 -> -9.5 (%)."""
    return 100.0 * math.expm1(x)


@dataclass(frozen=True)
class Effect:
    """Posterior of one column. ``mean``/``lo``/``hi`` are on the log scale (90% central interval);
    ``pct*`` are the same as percentage changes relative to the default value."""

    feature: str
    target: Literal["time", "memory"]
    mean: float
    lo: float
    hi: float
    prior_mean: float
    prior_sd: float
    source: str  # where the prior came from: llm | offline | bank | uninformative

    @property
    def pct_mean(self) -> float:
        return pct(self.mean)

    @property
    def pct_lo(self) -> float:
        return pct(self.lo)

    @property
    def pct_hi(self) -> float:
        return pct(self.hi)

    def __str__(self) -> str:
        return f"{self.feature}: {self.pct_mean:+.0f}% [{self.pct_lo:+.0f}, {self.pct_hi:+.0f}] {self.target}"


def effects_of(model: "LogLinearModel", *, nuts: bool = False) -> list[Effect]:
    """Posterior of every column of a fitted model (main effects, then interactions): mean and central 90%
    interval, from the fitted posterior or, with ``nuts=True``, from its NUTS draws."""
    d = model.design
    t = d.to_levels  # coefficients -> per-value effects (ordered knobs are coded by steps)
    if nuts:
        if model.nuts_draws is None:
            raise RuntimeError("no NUTS draws: call run_nuts() after fit() first")
        b = model.nuts_draws["beta"] @ t.T
        mean, lo, hi = b.mean(0), np.quantile(b, 0.05, axis=0), np.quantile(b, 0.95, axis=0)
    else:
        a = np.zeros((d.p, d.p + 1))
        a[:, 1:] = t
        post = model.posterior.linear(a)
        mean, lo, hi = post.mean(), post.marginal_quantiles(0.05), post.marginal_quantiles(0.95)
    return [
        Effect(feature=name, target=model.target, mean=float(mean[j]), lo=float(lo[j]), hi=float(hi[j]),
               prior_mean=float(d.level_prior_mean[j]), prior_sd=float(d.level_prior_sd[j]), source=d.prior_source[j])
        for j, name in enumerate(d.names)
    ]


@dataclass(frozen=True)
class PriorRevision:
    """A prior next to the posterior the trials gave it (log scale, 90% intervals)."""

    feature: str
    target: Literal["time", "memory"]
    source: str
    rationale: str
    prior_mean: float
    prior_lo: float
    prior_hi: float
    post_mean: float
    post_lo: float
    post_hi: float
    miscalibrated: bool
    direction: str  # consistent | wrong sign | stronger than believed | weaker than believed

    def __str__(self) -> str:
        flag = "MISCALIBRATED" if self.miscalibrated else "ok"
        return (
            f"{self.feature} ({self.target}, {self.source}): prior {pct(self.prior_mean):+.0f}% "
            f"[{pct(self.prior_lo):+.0f}, {pct(self.prior_hi):+.0f}] -> posterior {pct(self.post_mean):+.0f}% "
            f"[{pct(self.post_lo):+.0f}, {pct(self.post_hi):+.0f}]: {flag}, {self.direction}"
        )


def revision(priors: Sequence[Prior], model: "LogLinearModel") -> list[PriorRevision]:
    """Prior vs posterior for every prior whose feature is a main-effect column of ``model``
    (priors about knobs outside the model's space are skipped). The model must have been fit."""
    target = model.target
    effects = {e.feature: e for e in model.effects()}
    out: list[PriorRevision] = []
    for pr in priors:
        e = effects.get(pr.feature)
        if e is None:
            continue
        m, sd = (pr.time_mean, pr.time_sd) if target == "time" else (pr.mem_mean, pr.mem_sd)
        lo, hi = m - Z90 * sd, m + Z90 * sd
        mis = e.hi < lo or e.lo > hi
        out.append(
            PriorRevision(
                feature=pr.feature,
                target=target,
                source=pr.source,
                rationale=pr.rationale,
                prior_mean=m,
                prior_lo=lo,
                prior_hi=hi,
                post_mean=e.mean,
                post_lo=e.lo,
                post_hi=e.hi,
                miscalibrated=mis,
                direction=_direction(m, e, mis),
            )
        )
    return out


def _direction(prior_mean: float, e: Effect, miscalibrated: bool) -> str:
    if not miscalibrated:
        return "consistent"
    if prior_mean > 0 and e.hi < 0 or prior_mean < 0 and e.lo > 0:
        return "wrong sign"
    return "stronger than believed" if abs(e.mean) > abs(prior_mean) else "weaker than believed"
