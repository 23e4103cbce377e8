"""Out of memory before launching: a setting whose estimated peak is above capacity by more than the estimate's
stated error is not launched.

The fake-step estimate (estimate/run.py) states how far a measured peak may be from it: ``residual_sd`` on the log
scale (0.05: 3.7% rms, at most 10% on real torchtitan trials; BENCHMARKS.md). A setting is skipped when

    log(estimated peak / capacity) > SKIP_Z x residual_sd          (2 sd: 10.5% above capacity at sd 0.05)

so a setting inside that band, where the estimate cannot tell, still runs and its trial decides. Only a figure the
fake step itself made counts (``basis`` "fake step"): the analytical fallback states no error of its own, and a
contract without the estimate (minigpt's default offset is analytical) skips nothing. The skipped setting is
recorded (status ``skipped``, the figures in its evidence) and told to the memory model as "peak > capacity", the
censored observation an OOM is; it costs no device time and no trial of the budget.

    why = over_capacity(estimate, setting, capacity_bytes)   # a one-line reason with the arithmetic, or None
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..trial.memory_estimate import MemoryEstimate

SKIP_Z = 2.0  # sds of the estimate's stated error above capacity before a setting is not launched
GiB = 2**30


def over_capacity(estimate: MemoryEstimate | None, setting: Mapping[str, Any],
                  capacity_bytes: float | None) -> str | None:
    """Why ``setting`` is not launched (its estimated peak is above capacity beyond the estimate's stated error), or
    None (no estimate that states its error, no capacity, a figure the fake step did not make, or it may fit)."""
    if estimate is None or estimate.residual_sd is None or not capacity_bytes:
        return None
    if estimate.basis(setting) != "fake step":
        return None
    sd = estimate.residual_sd
    peak = float(estimate(setting))
    limit = float(capacity_bytes) * math.exp(SKIP_Z * float(sd))
    if peak <= limit:
        return None
    return (f"estimated peak {peak / GiB:.3f} GiB per rank > capacity {capacity_bytes / GiB:.3f} GiB x "
            f"exp({SKIP_Z:g} x the estimate's stated error {float(sd):.2f}) = {limit / GiB:.3f} GiB "
            f"({peak / capacity_bytes - 1:+.0%} over capacity): not launched")
