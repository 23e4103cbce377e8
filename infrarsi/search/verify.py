"""Re-verification: the top candidates are rerun interleaved with the baseline (A B A B ...), and promoted
only when the lower bound of the speedup's 95% CI exceeds 1 + the minimum detectable effect.

Statistic: each A/B pair ran back to back, so slow drifts of the machine cancel in the pair's log ratio
r_i = log(t_baseline_i / t_candidate_i). The speedup is exp(mean r); its CI is the t-interval
exp(mean r +- t_{0.975, n-1} sd(r) / sqrt(n)). Under an A/A test (candidate == baseline) with
log-normal noise, the lower bound exceeds 0 with probability 2.5%, and exceeds log(1 + mde) far less:
``scripts/bench_aa.py`` measures the false-promotion rate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30 (beyond: 1.96 + small correction).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df: int) -> float:
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= 30 else 1.96 + 2.4 / df


@dataclass(frozen=True)
class Speedup:
    speedup: float  # baseline time / candidate time (> 1 = faster)
    lo: float  # 95% CI
    hi: float
    pairs: int

    def to_dict(self) -> dict[str, float]:
        return {"speedup": self.speedup, "ci95": [self.lo, self.hi], "pairs": self.pairs}


def speedup_ci(baseline_s: Sequence[float], candidate_s: Sequence[float]) -> Speedup:
    """Paired speedup and its 95% CI from interleaved runs: baseline_s[i] and candidate_s[i] ran as pair i."""
    if len(baseline_s) != len(candidate_s) or len(baseline_s) < 2:
        raise ValueError(f"need >= 2 interleaved pairs of equal length, got {len(baseline_s)} and {len(candidate_s)}")
    r = [math.log(a / b) for a, b in zip(baseline_s, candidate_s)]
    n = len(r)
    m = statistics.fmean(r)
    half = t975(n - 1) * statistics.stdev(r) / math.sqrt(n)
    return Speedup(math.exp(m), math.exp(m - half), math.exp(m + half), n)


def promote(s: Speedup, mde: float) -> tuple[bool, str]:
    """The promotion rule, with the arithmetic in the reason."""
    bar = 1.0 + mde
    if s.lo > bar:
        return True, f"speedup {s.speedup:.3f}x, CI [{s.lo:.3f}, {s.hi:.3f}]: lower bound > 1 + mde = {bar:.3f}"
    return False, f"speedup {s.speedup:.3f}x, CI [{s.lo:.3f}, {s.hi:.3f}]: lower bound <= 1 + mde = {bar:.3f}, not promoted"
