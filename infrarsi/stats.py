"""The one-sided error rate every test of the project spends, and Student t's quantiles: shared by the doctor's
minimum detectable effect (doctor/noise.py), the pruning rule (execute/prune.py) and the verification's sequential
rule (verify/speedup.py), so that they agree on what "95%" means."""

from __future__ import annotations

import functools

ALPHA = 0.025  # one-sided: the same 2.5% a fixed-n 95% CI's lower bound spends


@functools.lru_cache(maxsize=1024)
def t_quantile(p: float, df: int) -> float:
    """Student t's ``p`` quantile with ``df`` degrees of freedom (scipy; cached: a run asks the same few)."""
    from scipy.stats import t as student_t  # at first use (~0.6 s): a command that stops on bad input never pays it

    return float(student_t.ppf(p, df))
