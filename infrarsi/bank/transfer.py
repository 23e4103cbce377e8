"""Transfer: carry what one run learned to another workload and other hardware.

Three pieces, each a plain function:

- ``map_setting(setting, space)``: a past setting expressed in a new knob space. Knobs the new
  space lacks are dropped, knobs the old setting lacks take the new default, an int value outside the
  new domain moves to the nearest valid value (log2 distance: 3 -> 2 or 4, never 0); a categorical
  or bool value outside the domain, or a setting the new constraints reject, gives None.
- ``transfer_prior(prior, ...)``: one knob-value effect re-expressed for the target.
  * Time: a relative effect (log step-time ratio) carries over as is, its sd widened:
        time_sd'^2 = time_sd^2 + (0.15 * d_hw)^2 + (0.25 * d_wl)^2
    (a different GPU generation, d_hw ~ 1, adds 0.15: "10% faster" may be 0-25% there).
  * Memory: bytes, not ratios, are what a memory knob saves (recompute frees the same activations
    whatever GPU holds them). When the workload is the same task and both reference peaks (peak at
    the knob defaults: the source's stored one, the target's estimate) are known, the saved bytes are
    re-based on the target's reference:
        delta = P_src * (exp(m) - 1);  m' = ln((P_tgt + delta) / P_tgt)   (floored at 5% of P_tgt)
        sd'   = sd * P_src * exp(m) / (P_tgt * exp(m'))                  (delta method)
    When the workload differs, absolute bytes do not carry (a bigger model's recompute frees more),
    so the relative effect is kept; likewise when either reference peak is unknown. Then it is widened:
        mem_sd'^2 = mem_sd^2 + (0.05 * d_hw)^2 + (0.25 * d_wl)^2
- ``combine(priors, weights)``: several sources' beliefs about one knob value as one Prior, by
  moment-matching their mixture (weights = similarities): mean = sum w_i m_i; var = sum w_i (sd_i^2
  + m_i^2) - mean^2. Disagreeing sources widen the result instead of cancelling into confidence.

``priors_from_effects(time_effects, memory_effects)`` turns the models' posterior effects
(``TimeModel.effects()``, ``MemoryModel.effects()``: feature, mean, 90% interval) into the Prior rows
``Bank.add_posteriors`` stores. ``distill(trials, space)`` gets Prior-shaped effects straight from
trials (Bayesian ridge on the one-hot encoding) for a run whose models stored none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..knobs.setting import Setting
from ..knobs.space import KnobSpace
from ..trial.prior import Z90, Prior
from ..trial.record import WARMUP_ROLE
from ..trial.status import TrialStatus

# Widening per unit of distance (log-scale sd added in quadrature); see the module docstring.
TIME_SD_PER_HW = 0.15
TIME_SD_PER_WL = 0.25
MEM_SD_PER_HW = 0.05
MEM_SD_PER_WL = 0.25
MIN_PEAK_FRACTION = 0.05  # a re-based memory effect never claims more than 95% of the peak saved


def map_setting(setting: Mapping[str, Any], space: KnobSpace) -> Setting | None:
    """``setting`` expressed in ``space`` (see the module docstring), or None when it cannot be."""
    out: dict[str, Any] = {}
    for k in space.knobs:
        if k.name not in setting:
            out[k.name] = k.default
            continue
        v = setting[k.name]
        if v in k.domain and not (k.kind != "bool" and isinstance(v, bool)):
            out[k.name] = v
        elif k.kind == "int" and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k.name] = _nearest_int(v, k.domain)
        else:
            return None
    s = Setting(out)
    return s if space.is_valid(s) else None


def _nearest_int(v: float, domain: Sequence[int]) -> int:
    """Nearest by log2 ratio when both are positive (parallel sizes and batch counts scale by factors),
    else by absolute difference; ties go to the smaller value."""
    def dist(x: int) -> float:
        if v > 0 and x > 0:
            return abs(math.log2(x / v))
        return abs(x - v) + 1e3  # a non-positive value is only chosen when nothing positive exists
    return min(sorted(domain), key=dist)


def transfer_prior(prior: Prior, *, hw_distance: float, wl_distance: float, same_task: bool,
                   source_peak_bytes: float | None = None, target_peak_bytes: float | None = None,
                   rationale: str = "") -> Prior:
    """``prior`` (learned at the source) re-expressed for the target; see the module docstring."""
    time_sd = math.sqrt(prior.time_sd**2 + (TIME_SD_PER_HW * hw_distance) ** 2 + (TIME_SD_PER_WL * wl_distance) ** 2)
    m, msd = prior.mem_mean, prior.mem_sd
    how = "relative"
    if same_task and source_peak_bytes and target_peak_bytes:
        delta = source_peak_bytes * math.expm1(m)  # bytes added (+) or saved (-) at the source
        new_peak = max(target_peak_bytes + delta, MIN_PEAK_FRACTION * target_peak_bytes)
        m2 = math.log(new_peak / target_peak_bytes)
        msd = msd * source_peak_bytes * math.exp(m) / new_peak
        m = m2
        how = f"{delta / 2**30:+.2f} GiB re-based"
    mem_sd = math.sqrt(msd**2 + (MEM_SD_PER_HW * hw_distance) ** 2 + (MEM_SD_PER_WL * wl_distance) ** 2)
    detail = f"transferred (d_hw {hw_distance:.2f}, d_wl {wl_distance:.2f}, memory {how})"
    why = f"{rationale}; {detail}" if rationale else detail
    return Prior(knob=prior.knob, value=prior.value, time_mean=prior.time_mean, time_sd=max(time_sd, 1e-6),
                 mem_mean=m, mem_sd=max(mem_sd, 1e-6), source="bank", rationale=why)


def combine(priors: Sequence[Prior], weights: Sequence[float], *, rationale: str = "") -> Prior:
    """One Prior from several about the same knob value: the moment-matched mixture (weights need not
    sum to 1; they are normalised)."""
    if not priors or len(priors) != len(weights):
        raise ValueError(f"combine: {len(priors)} priors and {len(weights)} weights; give one weight per prior")
    w = np.asarray(weights, float)
    if not np.all(w > 0):
        raise ValueError(f"combine: weights must be positive, got {list(weights)}")
    w = w / w.sum()

    def moments(means: list[float], sds: list[float]) -> tuple[float, float]:
        mu = float(np.dot(w, means))
        var = float(np.dot(w, np.square(sds) + np.square(means))) - mu**2
        return mu, math.sqrt(max(var, 1e-12))

    tm, ts = moments([p.time_mean for p in priors], [p.time_sd for p in priors])
    mm, ms = moments([p.mem_mean for p in priors], [p.mem_sd for p in priors])
    p0 = priors[0]
    return Prior(knob=p0.knob, value=p0.value, time_mean=tm, time_sd=ts, mem_mean=mm, mem_sd=ms, source="bank",
                 rationale=rationale or "; ".join(p.rationale for p in priors if p.rationale)[:500])


def priors_from_effects(time_effects: Sequence[Any], memory_effects: Sequence[Any] = (), *,
                        space: KnobSpace | None = None, min_sd: float = 1e-3) -> list[Prior]:
    """Prior rows from the models' effects (objects with ``feature`` "knob=value", ``mean``, ``lo``, ``hi``
    on the log scale, 90% interval): sd = (hi - lo) / (2 x 1.645). Interaction columns and features the
    ``space`` does not have are skipped; a value is typed back from the space's domain (or parsed as
    int/bool when no space is given). A feature in only one list gets mean 0, sd 1 for the other."""
    rows: dict[str, dict[str, float]] = {}
    for target, effects in (("time", time_effects), ("mem", memory_effects)):
        for e in effects:
            if e.feature.count("=") != 1 or "*" in e.feature or ":" in e.feature:
                continue
            sd = max((e.hi - e.lo) / (2 * Z90), min_sd)
            rows.setdefault(e.feature, {})[target] = (float(e.mean), sd)  # type: ignore[assignment]
    out = []
    for feat, r in rows.items():
        knob, _, text = feat.partition("=")
        value = _typed(knob, text, space)
        if value is _MISSING:
            continue
        tm, ts = r.get("time", (0.0, 1.0))
        mm, ms = r.get("mem", (0.0, 1.0))
        out.append(Prior(knob=knob, value=value, time_mean=tm, time_sd=ts, mem_mean=mm, mem_sd=ms, source="bank",
                         rationale="posterior of the run's models"))
    return out


_MISSING = object()


def _typed(knob: str, text: str, space: KnobSpace | None) -> Any:
    if space is not None:
        if knob not in space:
            return _MISSING
        return next((v for v in space[knob].domain if str(v) == text), _MISSING)
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return text


def distill(trials: Sequence[Any], space: KnobSpace, *, prior_sd: float = 0.5, min_sd: float = 0.02) -> list[Prior]:
    """Knob-value effects from a run's trials: Bayesian linear regression of log step time (ok trials; a warm-up's
    figures are not data) and log peak memory (ok trials that report it) on ``space.encode`` (one-hot, default =
    reference), coefficients ~ N(0, prior_sd^2), noise variance from the residuals. Returns one Prior per feature
    seen in at least one ok trial. Trials may be Trial or StoredTrial objects."""
    ok = []
    for t in trials:
        t = getattr(t, "trial", t)
        if t.status is TrialStatus.OK and t.role != WARMUP_ROLE:  # a warm-up's figures are not data
            ok.append(t)
    if not ok:
        return []
    X = space.encode([t.setting for t in ok])
    seen = X.sum(axis=0) > 0
    t_mu, t_sd = _bayes_ridge(X, np.log([t.metrics.step_time_s for t in ok]), prior_sd, min_sd)
    with_mem = [i for i, t in enumerate(ok) if t.metrics.peak_memory_bytes]
    if len(with_mem) >= 2:
        m_mu, m_sd = _bayes_ridge(X[with_mem], np.log([ok[i].metrics.peak_memory_bytes for i in with_mem]), prior_sd, min_sd)
    else:
        m_mu, m_sd = np.zeros(X.shape[1]), np.full(X.shape[1], prior_sd)
    out = []
    for j, name in enumerate(space.feature_names):
        if not seen[j]:
            continue
        knob, _, _ = name.partition("=")
        value = next(v for v in space[knob].domain if f"{knob}={v}" == name)
        out.append(Prior(knob=knob, value=value, time_mean=float(t_mu[j]), time_sd=float(t_sd[j]),
                         mem_mean=float(m_mu[j]), mem_sd=float(m_sd[j]), source="bank",
                         rationale=f"distilled from {len(ok)} ok trials"))
    return out


def _bayes_ridge(X: np.ndarray, y: np.ndarray, prior_sd: float, min_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of b in y = a + X b + e, b ~ N(0, prior_sd^2), a flat; e's sd from the
    residuals (floored at min_sd). X: (n, p), y: (n,)."""
    n, p = X.shape
    Z = np.hstack([np.ones((n, 1)), X])
    prec = np.zeros((p + 1, p + 1))
    prec[1:, 1:] = np.eye(p) / prior_sd**2
    sigma2 = max(float(np.var(y)), min_sd**2)
    for _ in range(5):  # alternate: coefficients given the noise, noise given the coefficients
        A = Z.T @ Z / sigma2 + prec + 1e-9 * np.eye(p + 1)
        cov = np.linalg.inv(A)
        beta = cov @ Z.T @ y / sigma2
        resid = y - Z @ beta
        dof = max(n - min(p + 1, n - 1), 1)
        sigma2 = max(float(resid @ resid) / dof, min_sd**2)
    A = Z.T @ Z / sigma2 + prec + 1e-9 * np.eye(p + 1)
    cov = np.linalg.inv(A)
    beta = cov @ Z.T @ y / sigma2
    return beta[1:], np.sqrt(np.diag(cov)[1:])
