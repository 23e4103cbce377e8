"""The A/B pairs' speedup and the rule that promotes: the top candidates are rerun interleaved with the baseline
(A B A B ...), and promoted only when the lower bound of the speedup's interval exceeds 1 + the minimum detectable
effect.

Sequential (:func:`decide`): pairs are added one at a time and the rule looks after each, from ``FIRST_LOOK`` pairs
up to the contract's ``budget.verify_pairs`` (N). Looking after every pair at a fixed-n 95% CI would promote an A/A
candidate far more often than 2.5% (each look is another chance). So each look k (n_k pairs) spends part of a
one-sided ``ALPHA`` = 2.5%: alpha_k = ALPHA * (n_k - n_{k-1}) / N, the first look ALPHA * FIRST_LOOK / N (the linear
alpha-spending function), and its interval is exp(mean r +- t_{1 - alpha_k, n_k - 1} sd(r) / sqrt(n_k)). The
alphas add up to ALPHA over every look the budget allows, so by the union bound the chance that ANY look's lower
bound clears 1 (let alone 1 + mde) under an A/A test is <= 2.5%, however the run stops (conservative: the looks are
correlated). The rule stops at the first look whose lower bound clears 1 + mde (promoted), whose upper bound falls
below it (it cannot be shown: stopping for that never raises the false promotions), whose upper bound falls below
the lower bound of a candidate already promoted in this verification (``outrank``: the best is the highest lower
bound, so it cannot become the best; stopping never promotes anything), or when N pairs ran.

Statistic: each A/B pair ran back to back, so slow drifts of the machine cancel in the pair's log ratio
r_i = log(t_baseline_i / t_candidate_i). The speedup is exp(mean r); its CI is the t-interval
exp(mean r +- t_{0.975, n-1} sd(r) / sqrt(n)) for one look (:func:`speedup_ci`). Under an A/A test (candidate == baseline) with
log-normal noise, the lower bound exceeds 0 with probability 2.5%, and exceeds log(1 + mde) far less:
``scripts/bench_aa.py`` measures the false-promotion rate.

One name for one interval: the interval of the look that decided is a **95% CI** (:data:`CI_NAME`, the records' key
``ci95``), and that is the level the rule really gives, not the look's own nominal level (98.75% at a first look of 3
pairs out of 12, 99.58% at a later one). Each look's two-sided interval misses the true speedup with probability at
most 2 alpha_k, and these add up to 2 ALPHA = 5% over every look the budget allows, so with probability 95% or more
every look's interval covers it at once (a repeated confidence interval), the one the rule stopped at included,
however the stop was chosen. ``tests/verify/test_speedup.py`` measures the coverage.

The headline figure is the geometric mean of the pairs' ratios, exp(mean r), which is exactly the ratio of the two
sides' geometric mean step times (:attr:`Speedup.baseline_s`, :attr:`Speedup.candidate_s`): those are the times to
print beside it (the ratio of the medians is another statistic).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ..stats import ALPHA, t_quantile



LEVEL = 1 - 2 * ALPHA  # the confidence the interval has, one look or many (module doc)
CI_NAME = f"{LEVEL:.0%} CI"  # its name in every line, table, plot and commit message


@dataclass(frozen=True)
class Speedup:
    speedup: float  # baseline time / candidate time (> 1 = faster): exp(mean log ratio), a geometric mean
    lo: float  # the 95% CI (module doc: one look, or the sequential rule's looks)
    hi: float
    pairs: int

    def to_dict(self) -> dict[str, float]:
        return {"speedup": self.speedup, "ci95": [self.lo, self.hi], "pairs": self.pairs}


def geometric_means(baseline_s: Sequence[float], candidate_s: Sequence[float]) -> tuple[float, float]:
    """(baseline, candidate) geometric mean step times in seconds, whose ratio is the pairs' speedup exactly."""
    if not baseline_s or len(baseline_s) != len(candidate_s):
        raise ValueError(f"need pairs of equal length, got {len(baseline_s)} and {len(candidate_s)}")
    return (math.exp(statistics.fmean(math.log(x) for x in baseline_s)),
            math.exp(statistics.fmean(math.log(x) for x in candidate_s)))


def speedup_ci(baseline_s: Sequence[float], candidate_s: Sequence[float]) -> Speedup:
    """Paired speedup and its fixed-n 95% CI from interleaved runs: baseline_s[i] and candidate_s[i] ran as pair i
    (one look; the verify step's looks use :func:`decide`)."""
    return interval(baseline_s, candidate_s, 0.025)


def promote(s: Speedup, mde: float) -> tuple[bool, str]:
    """The promotion rule, with the arithmetic in the reason."""
    bar = 1.0 + mde
    figs = f"speedup {s.speedup:.3f}x, {CI_NAME} [{s.lo:.3f}, {s.hi:.3f}]"
    if s.lo > bar:
        return True, f"{figs}: lower bound > 1 + mde = {bar:.3f}"
    return False, f"{figs}: lower bound <= 1 + mde = {bar:.3f}, not promoted"


FIRST_LOOK = 3  # pairs before the first look: two give a t interval with df = 1 (t = 12.7 at 2.5%)


def look_alpha(pairs: int, max_pairs: int) -> float:
    """The one-sided alpha the look at ``pairs`` pairs spends (linear spending over ``max_pairs``; see module doc)."""
    if not FIRST_LOOK <= pairs <= max_pairs:
        raise ValueError(f"looks run from {FIRST_LOOK} to {max_pairs} pairs, got {pairs}")
    return ALPHA * (FIRST_LOOK if pairs == FIRST_LOOK else 1) / max_pairs


def interval(baseline_s: Sequence[float], candidate_s: Sequence[float], alpha: float) -> Speedup:
    """The paired speedup with its two-sided interval at level 1 - 2 alpha (pairs as in :func:`speedup_ci`)."""
    if len(baseline_s) != len(candidate_s) or len(baseline_s) < 2:
        raise ValueError(f"need >= 2 interleaved pairs of equal length, got {len(baseline_s)} and {len(candidate_s)}")
    r = [math.log(a / b) for a, b in zip(baseline_s, candidate_s)]
    n = len(r)
    m = statistics.fmean(r)
    half = t_quantile(1 - alpha, n - 1) * statistics.stdev(r) / math.sqrt(n)
    return Speedup(math.exp(m), math.exp(m - half), math.exp(m + half), n)


@dataclass(frozen=True)
class Decision:
    """Where the sequential rule stands after the pairs so far."""

    state: str  # "promote" | "reject" (cannot clear the bar) | "outranked" (cannot beat a promoted candidate)
    #             | "budget" (pairs ran out) | "continue"
    speedup: Speedup | None  # None before the first look
    alpha: float  # the one-sided alpha this look spends (0 before the first); the interval is still a 95% CI
    reason: str

    @property
    def done(self) -> bool:
        return self.state != "continue"

    @property
    def promoted(self) -> bool:
        return self.state == "promote"


def decide(baseline_s: Sequence[float], candidate_s: Sequence[float], *, mde: float, max_pairs: int,
           outrank: float | None = None) -> Decision:
    """The sequential rule after ``len(baseline_s)`` ok pairs (module doc), with the arithmetic in the reason.
    ``outrank``: the lower bound of the best candidate promoted before this one (None: none was)."""
    n = len(baseline_s)
    max_pairs = max(max_pairs, FIRST_LOOK)
    if n < FIRST_LOOK:
        return Decision("continue", None, 0.0, f"{n} of at least {FIRST_LOOK} pairs")
    a = look_alpha(min(n, max_pairs), max_pairs)
    s = interval(baseline_s, candidate_s, a)
    bar = 1.0 + mde
    figs = (f"speedup {s.speedup:.3f}x, {CI_NAME} [{s.lo:.3f}, {s.hi:.3f}] after {n} pairs (sequential: look "
            f"{n - FIRST_LOOK + 1} of {max_pairs - FIRST_LOOK + 1}, spending alpha {a:.4f} of {ALPHA})")
    if s.lo > bar:
        return Decision("promote", s, a, f"{figs}: lower bound > 1 + mde = {bar:.3f}")
    if s.hi < bar:
        return Decision("reject", s, a, f"{figs}: upper bound < 1 + mde = {bar:.3f}, not promoted (it cannot clear "
                                       f"the bar)")
    if outrank is not None and s.hi < outrank:
        return Decision("outranked", s, a, f"{figs}: upper bound < {outrank:.3f}, the lower bound of a candidate "
                                           f"already promoted: it cannot rank above it, not promoted")
    if n >= max_pairs:
        return Decision("budget", s, a, f"{figs}: the interval still holds 1 + mde = {bar:.3f} after the contract's "
                                       f"{max_pairs} pairs (budget.verify_pairs), not promoted")
    return Decision("continue", s, a, figs)


def search_speedup(baseline_s: Sequence[float], candidate_s: Sequence[float], *,
                   cv: float) -> tuple[float, float, float, float] | None:
    """The search's speedup of a candidate and its one-sided bounds at ``ALPHA``, before any pair: (x, lower, upper,
    spread), or None without figures on both sides. ``baseline_s``/``candidate_s``: the search's figures (seconds:
    the doctor's and the re-baselined runs of the baseline, the candidate's search trials); ``cv``: the doctor's
    run-to-run CV::

        x     = exp(mean log b - mean log c)
        s     = max(cv, sd(log b)) * sqrt(1/n_b + 1/n_c)       sd(log b): the baseline's spread over the search
        upper = x * exp(z_{1 - ALPHA} * s),  lower = x * exp(-z_{1 - ALPHA} * s)

    (drift and load widen it, never narrow it)."""
    if not baseline_s or not candidate_s:
        return None
    lb, lc = [math.log(x) for x in baseline_s], [math.log(x) for x in candidate_s]
    spread = max(cv, statistics.stdev(lb) if len(lb) > 1 else 0.0)
    s = spread * math.sqrt(1 / len(lb) + 1 / len(lc))
    x = math.exp(statistics.fmean(lb) - statistics.fmean(lc))
    z = statistics.NormalDist().inv_cdf(1 - ALPHA)
    return x, x * math.exp(-z * s), x * math.exp(z * s), spread


def first_look_lower(speedup: float, *, cv: float, max_pairs: int) -> float:
    """The lower bound :func:`decide`'s first look gives pairs whose speedup is ``speedup`` exactly and whose log
    ratios spread as two runs at run-to-run CV ``cv`` do (sd cv * sqrt(2)):
    speedup * exp(-t_{1 - alpha_1, FIRST_LOOK - 1} * cv * sqrt(2) / sqrt(FIRST_LOOK)). What a promotion at the
    first look is expected to set as the bar a later candidate must outrank."""
    n = FIRST_LOOK
    t = t_quantile(1 - look_alpha(n, max(max_pairs, n)), n - 1)
    return speedup * math.exp(-t * cv * math.sqrt(2.0) / math.sqrt(n))


def outranked_before_pairs(baseline_s: Sequence[float], candidate_s: Sequence[float], *, cv: float,
                           outrank: float | None) -> str | None:
    """Before its first pair: why a candidate need not be verified at all (its pairs could only end ``outranked``),
    or None to verify it. ``baseline_s``/``candidate_s``/``cv``: as :func:`search_speedup`; ``outrank``: the lower
    bound of the best candidate already promoted (None: none was, so verify).

    The candidate is left unverified when the upper bound of its search speedup (:func:`search_speedup`) is under
    ``outrank``. Why this keeps the referee: it never promotes, it only declines a second promotion that ``decide``
    could reach only by an upper bound above ``outrank``; and a candidate that reached verification was picked as one
    of the fastest of the search, so its search figure is biased fast (the winner's curse): its ``upper`` overstates
    the speedup its pairs would show, which makes the skip conservative. The A/A figure (a candidate exactly as fast
    as the promoted one, skipped in at most ALPHA of draws at CV 1-15%): scripts/bench_prune.py outrank."""
    got = None if outrank is None else search_speedup(baseline_s, candidate_s, cv=cv)
    if got is None:
        return None
    x, _, upper, spread = got
    if upper >= outrank:
        return None
    z = statistics.NormalDist().inv_cdf(1 - ALPHA)
    return (f"not verified: its search speedup {x:.3f}x ({len(candidate_s)} search run(s) against {len(baseline_s)} "
            f"of the baseline) has an upper bound of {upper:.3f}x (z {z:.2f} x spread {spread:.1%} x "
            f"sqrt(1/{len(baseline_s)} + 1/{len(candidate_s)})) < {outrank:.3f}, the lower bound of a candidate "
            f"already promoted: its pairs could not rank it above that one")
