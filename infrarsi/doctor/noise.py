"""Run-to-run noise of the baseline: CV, a bootstrap CI of the median, minimum detectable effect.

Inputs are the steady-state step times of n repeated baseline runs (seconds; one number per run,
the adapter's median over the contract's measured window).

Minimum detectable effect (MDE), relative. Two settings A and B are each run n times; compare the
means of their log step times. With per-run noise CV (sd of log t ~= sd(t)/mean(t) for small CV) the
difference of the two means has sd = CV * sqrt(2/n). A two-sided test at alpha = 0.05 with 80% power
detects a true relative change d when

    d >= (z_{1-alpha/2} + z_{power}) * CV * sqrt(2/n) = (1.960 + 0.842) * CV * sqrt(2/n) = 2.80 * CV * sqrt(2/n)

and so needs  n >= 2 * (2.80 * CV / d)^2  repeats per setting to detect d. Example: CV 3% and
n = 5 give MDE = 2.80 * 0.03 * 0.632 = 5.3%; detecting 2% needs n >= 2 * (2.80 * 0.03 / 0.02)^2 = 35.3 -> 36.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from ..rundir.records import TARGET_EFFECT, LossBands, NoiseProfile  # the record's type lives with the run's records

Z_ALPHA = 1.959964  # z_{0.975}: two-sided 5% test
Z_POWER = 0.841621  # z_{0.80}: 80% power
Z_SUM = Z_ALPHA + Z_POWER  # 2.80


def cv(xs: Sequence[float]) -> float:
    """Coefficient of variation: sample sd (n-1) / mean. Needs >= 2 values."""
    if len(xs) < 2:
        raise ValueError(f"CV needs at least 2 runs, got {len(xs)}")
    m = statistics.fmean(xs)
    return statistics.stdev(xs) / m if m > 0 else math.inf


def bootstrap_median_ci(xs: Sequence[float], *, level: float = 0.95, n_boot: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the median: resample the runs with replacement ``n_boot`` times,
    take each resample's median, report the (1-level)/2 and (1+level)/2 quantiles. Seeded: the same
    runs always give the same interval."""
    a = np.asarray(xs, dtype=float)
    if a.size == 0:
        raise ValueError("bootstrap needs at least one value")
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(a, size=(n_boot, a.size), replace=True), axis=1)  # (n_boot,)
    lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def mde(cv_: float, repeats: int) -> float:
    """Smallest relative change detectable with ``repeats`` runs per setting (see module doc)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return Z_SUM * cv_ * math.sqrt(2.0 / repeats)


def repeats_for(effect: float, cv_: float) -> int:
    """Runs per setting needed to detect a relative change ``effect``: ceil(2 (2.80 CV / effect)^2), >= 2."""
    if effect <= 0:
        raise ValueError(f"effect must be > 0, got {effect}")
    if not math.isfinite(cv_):
        return 10**6
    return max(2, math.ceil(2.0 * (Z_SUM * cv_ / effect) ** 2))


def confirmable(cv_: float, repeats: int, verify_pairs: int) -> float:
    """The smallest relative speedup verification can confirm (80% power) with the bar 1 + mde(cv, repeats) and at most
    ``verify_pairs`` A/B pairs under the sequential rule (verify/speedup.py): the pairs' log ratios have sd
    cv * sqrt(2), the last look spends alpha = ALPHA / pairs, so a true speedup S is confirmed when
    log S >= log(1 + mde) + (t_{1 - alpha, pairs - 1} + z_0.80) * cv * sqrt(2) / sqrt(pairs)."""
    from ..stats import ALPHA, t_quantile

    if not math.isfinite(cv_):
        return math.inf
    n = max(verify_pairs, 3)
    t = t_quantile(1 - ALPHA / n, n - 1)
    return (1 + mde(cv_, repeats)) * math.exp((t + Z_POWER) * cv_ * math.sqrt(2.0 / n)) - 1


def repeats_to_confirm(cv_: float, speedup: float, verify_pairs: int, *, most: int = 200) -> int | None:
    """The fewest doctor repeats with which ``speedup`` is confirmable (None: not even with ``most``)."""
    for n in range(2, most + 1):
        if confirmable(cv_, n, verify_pairs) <= speedup:
            return n
    return None


def median_phases(phases: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per phase, the median over runs of its seconds per step (phases missing in a run are skipped)."""
    names: dict[str, None] = {}
    for p in phases:
        names.update(dict.fromkeys(p))
    return {n: statistics.median([p[n] for p in phases if n in p]) for n in names}


def noise_warning(n: NoiseProfile) -> str | None:
    """One line when the noise hides a ``target_effect`` change at the measured repeat count."""
    if n.mde <= n.target_effect:
        return None
    return (f"noise too high to detect a {n.target_effect:.0%} change with {n.repeats} repeats (MDE {n.mde:.1%}, "
            f"CV {n.cv:.1%}); {n.repeats_for_target} repeats per setting would: raise budget.doctor_repeats, "
            f"or quiet the machine")


def profile(step_times_s: Sequence[float], *, trial_ids: Sequence[int], phases: Sequence[Mapping[str, float]] = (),
            loss_max_rel_diff: float = 0.0, loss_reproduces: bool = True, reference_losses: Sequence[float] = (),
            baseline: Mapping | None = None, target_effect: float = TARGET_EFFECT,
            numerics: LossBands | None = None) -> NoiseProfile:
    n = len(step_times_s)
    c = cv(step_times_s)
    return NoiseProfile(
        repeats=n, step_times_s=list(step_times_s), trial_ids=list(trial_ids),
        median_step_s=statistics.median(step_times_s), cv=c, ci95=bootstrap_median_ci(step_times_s),
        mde=mde(c, n), mde_by_repeats={k: mde(c, k) for k in (2, 3, 5, 10, 20)},
        target_effect=target_effect, repeats_for_target=repeats_for(target_effect, c),
        phases=median_phases(phases), loss_max_rel_diff=loss_max_rel_diff, loss_reproduces=loss_reproduces,
        reference_losses=list(reference_losses), baseline=dict(baseline or {}), numerics=numerics,
    )
