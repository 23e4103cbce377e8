"""Which time priors the trials contradict. A prior that is set aside is widened to the config's ``time_sd`` (its
mean kept), so a confident, wrong prior cannot pin the search; the report flags it (``models.revision``).

Two tests, each enough on its own:

- ``z_conflicts``: a prior-free fit of the same trials puts the prior's feature more than ``z`` combined sds away
  from the prior. Robust, but slow: with ~40 columns and 20 trials a prior-free fit knows little about each one.
- ``evidence_conflicts``: per knob, the Bayes factor of "this knob's priors are as wide as an unknown knob's" over
  "as stated", from the time model's marginal likelihood (``GridPosterior.log_evidence``) with every other prior in
  place. The other knobs' priors explain their share of each trial, so a reversed, confident prior loses quickly,
  and a right one gains: a tight prior that predicts the trials has the higher evidence (Occam's factor).

    conflicts = evidence_conflicts(make_model, priors, settings, times, widen_sd=1.0, log_bf=2.3)
    # make_model(priors) -> an unfitted TimeModel; returns {feature: why} for the priors to set aside

Neither test can fire without trials that contradict the prior, and a confident wrong prior keeps them from being
run: the search exploits it. ``untested_claim`` names the value to probe: the strongest claim the incumbent rests on
that no trial has tested.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..trial.prior import Z90, Prior


def z_conflicts(free_effects: Sequence[Any], priors: Sequence[Prior], *, z: float, widen_sd: float,
                n: int) -> dict[str, str]:
    """Priors more than ``z`` combined sds from the prior-free fit's effects (``free_effects``: its Effects)."""
    by_feature = {q.feature: q for q in priors}
    out = {}
    for e in free_effects:
        p = by_feature.get(e.feature)
        if p is None or p.time_sd >= widen_sd:
            continue
        sd_data = max((e.hi - e.lo) / (2 * Z90), 1e-9)
        gap = abs(e.mean - p.time_mean) / math.hypot(sd_data, p.time_sd)
        if gap > z:
            out[e.feature] = (f"prior {math.expm1(p.time_mean):+.0%} (sd {p.time_sd:.2f}), trials alone "
                              f"{math.expm1(e.mean):+.0%} [{math.expm1(e.lo):+.0%}, {math.expm1(e.hi):+.0%}]: "
                              f"{gap:.1f} sd apart after {n} trials")
    return out


def evidence_conflicts(make_model: Callable[[list[Prior]], Any], priors: Sequence[Prior], settings: Sequence[Any],
                       times: Sequence[float], *, widen_sd: float, log_bf: float,
                       stated: float | None = None) -> dict[str, str]:
    """{feature: why} for the priors of each knob whose widened priors the trials favour by more than ``log_bf``
    (natural log of the Bayes factor; 2.3 = 10:1). Only priors tighter than ``widen_sd`` are tested. ``stated``: the
    log evidence of ``priors`` on these trials when the caller has fitted that model already. Greedy: the
    knob with the largest factor is widened first and the rest are tested again against that model, so one badly
    wrong knob does not make every other knob look wrong too (widening any knob absorbs some of its misfit)."""
    priors = list(priors)
    n = sum(1 for t in times if t is not None and math.isfinite(t))
    if n < 3:
        return {}
    out: dict[str, str] = {}
    if stated is None:
        stated = make_model(priors).fit(settings, times).posterior.log_evidence
    while True:
        knobs = sorted({p.knob for p in priors if p.time_sd < widen_sd})
        gains = {}
        for knob in knobs:
            wide = _widened(priors, knob, widen_sd)
            gains[knob] = make_model(wide).fit(settings, times).posterior.log_evidence - stated
        if not gains or max(gains.values()) <= log_bf:
            return out
        knob = max(gains, key=gains.get)
        for p in priors:
            if p.knob == knob and p.time_sd < widen_sd:
                out[p.feature] = (f"prior {math.expm1(p.time_mean):+.0%} (sd {p.time_sd:.2f}): the trials favour an "
                                  f"open prior on {knob} {math.exp(min(gains[knob], 700)):.3g}:1 after {n} trials")
        priors = _widened(priors, knob, widen_sd)
        stated += gains[knob]


def _widened(priors: list[Prior], knob: str, sd: float) -> list[Prior]:
    return [p.model_copy(update={"time_sd": sd}) if p.knob == knob and p.time_sd < sd else p for p in priors]


def untested_claim(priors: Sequence[Prior], space: Any, incumbent: Any, ran: Sequence[Any], *, skip: set[str],
                   min_claim: float, max_sd: float) -> tuple[str, Any] | None:
    """(knob, value) of the strongest claim ``incumbent`` rests on that no trial in ``ran`` has tested: a confident
    prior (every sd involved <= ``max_sd``) says ``value`` is at least ``min_claim`` slower than the incumbent's value
    of ``knob`` (log time; a value without a prior is the knob's reference, 0). None when there is no such claim;
    knobs in ``skip`` are not considered."""
    levels: dict[str, dict[Any, Prior]] = {}
    for p in priors:
        levels.setdefault(p.knob, {})[p.value] = p
    best: tuple[float, str, Any] | None = None
    for knob, ps in levels.items():
        if knob in skip or knob not in incumbent:
            continue
        v0 = incumbent[knob]
        for u in space[knob].domain:
            claim = (ps[u].time_mean if u in ps else 0.0) - (ps[v0].time_mean if v0 in ps else 0.0)
            sds = [ps[v].time_sd for v in (u, v0) if v in ps]
            if u == v0 or claim < min_claim or not sds or max(sds) > max_sd:
                continue
            if any(s[knob] == u for s in ran) or (best is not None and claim <= best[0]):
                continue
            best = (claim, knob, u)
    return None if best is None else (best[1], best[2])
