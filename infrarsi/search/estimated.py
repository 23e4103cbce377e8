"""EstimatedTime: the search's time model starting from a predicted step time (the prior mean), learning its residual.

Where a step-time model can price the contract's job (:mod:`infrarsi.estimate.step_model`: a Megatron or torchtitan
launch on a GPU it knows), the search need not start from "every knob value is as fast as the default, give or take
2.7x". The time part here is :class:`~.time.JointTime` (one GP: additive effects plus a kernel on the knob values) with
``z = log(estimate(setting)) - center`` as one more column whose coefficient starts at 1, so what the trials teach is
the estimate's error:

    y = log t = c + a z + X beta + g + eps
    c ~ Normal(center, LEVEL_SD^2)         center: the pool's median log estimate; the whole cluster faster or slower
    a ~ Normal(1, TRUST_SD^2)              how far the estimate's spread holds (1: as priced; 0 or below: the trials
                                           overturn it, so a wrong estimate cannot pin the search)
    beta_j ~ Normal(0, RESIDUAL_SD^2)      a knob value the estimate reads: what it misprices, around 0
    beta_j ~ the given prior               a knob value it does not read (NCCL env, a kernel patch): as before
    g ~ the kernel part                    what none of these explains near the trials (:mod:`.surrogate`)

Before any trial it ranks by the estimate alone (the initial design draws from the estimate's fastest quarter,
:func:`.steps.design_step`); after a few, by the estimate corrected where the trials disagree with it. The additive
TimeModel the report shows is the one without the offset (:class:`~.time._AdditiveBase`: effects relative to the
baseline, the prior check), so the report reads as before.

    t = EstimatedTime(estimate, reads=knobs)   # estimate(setting) -> seconds, or None where it cannot price the
                                               # setting; reads: the knobs it reads (None: all; stated, not probed)
    t.bind(setup); t.fit(history); mean, sd = t.predict(settings)   # log seconds: (n,), (n,)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from ..knobs import Setting
from .time import JointTime

# How far the level of the estimate may be off (log scale): e^1 = 2.7x. The step-time model's own band where per-GPU
# work is small is 0.945-3.0x measured / predicted (estimate/step_model.py INTERVALS); one trial pins the level.
LEVEL_SD = 1.0
# How far one knob value's effect may be mispriced (log scale, sd): 0.15 = +-15%. The step-time model's rank errors
# where work per GPU is small are of this size (issue 68's held-out A100 check: TP 4 -43%, TP 8 -68% inside a node
# against ~0 at TP 1, i.e. effects of log 0.3-0.5 relative to one another at 2-3 sd).
RESIDUAL_SD = 0.15
# How far the trials may find the estimate's spread wrong: its coefficient ~ Normal(1, 0.5^2). An estimate whose
# ranking is upside down (coefficient -1, 4 sd away) is overturned by the trials instead of pinning the search: with
# the estimate as a fixed offset (coefficient 1), the reversed prior of scripts/bench_search.py kept the search at
# 0.53 of the optimum after 30 trials (2 variants).
TRUST_SD = 0.5


def _column_knobs(name: str) -> set[str]:
    """The knobs a design column is made of: ``"tp=2"`` -> {tp}, ``"log2(tp)*pp=2"`` -> {tp, pp}."""
    out = set()
    for part in name.split("*"):
        head = part.split("=")[0]
        out.add(head[5:-1] if head.startswith("log2(") and head.endswith(")") else head)
    return out


class EstimatedTime(JointTime):
    """:class:`~.time.JointTime` with the estimate as one more column: see the module docstring."""

    def __init__(self, estimate: Callable[[Mapping[str, Any]], float | None], *, reads: Collection[str] | None,
                 level_sd: float = LEVEL_SD, residual_sd: float = RESIDUAL_SD, trust_sd: float = TRUST_SD,
                 **kw: Any) -> None:
        """``reads``: the knobs ``estimate`` prices (their values' priors move to the residual's); None: all of them.
        Required, so that a caller states it: an estimate that reads fewer knobs than it is credited with would
        overrule the priors of the ones it does not read."""
        if min(level_sd, residual_sd, trust_sd) <= 0:
            raise ValueError(f"level_sd ({level_sd}), residual_sd ({residual_sd}) and trust_sd ({trust_sd}) must be > 0")
        super().__init__(**kw)
        self.estimate, self.level_sd, self.residual_sd, self.trust_sd = estimate, level_sd, residual_sd, trust_sd
        self.reads = None if reads is None else frozenset(reads)

    def _bound(self) -> None:
        super()._bound()
        self._log_est: dict[Setting, float] = {}  # log seconds, NaN where the estimate cannot price the setting
        reads = self.reads
        names = ["intercept", *self.additive.design.names] + (["bubble"] if self.column is not None else [])
        # design columns whose knob values the estimate prices (their prior moves to the residual's)
        self._read = np.array([i > 0 and (reads is None or _column_knobs(n) <= set(reads))
                               for i, n in enumerate(names)])
        if self.column is not None:
            self._read[-1] = True
        priced = self.log_estimate(self.setup.pool)
        self.center = float(np.median(priced))  # log seconds: the pool's median layout, where the column is 0

    def log_estimate(self, settings: Sequence[Setting]) -> np.ndarray:
        """log(estimate) per setting, (n,) log seconds; a setting the estimate cannot price gets the median of those
        it priced (so it ranks as an average layout, its residual learned like any other)."""
        for s in settings:
            if s not in self._log_est:
                t = self.estimate(s)
                self._log_est[s] = math.log(t) if t is not None and math.isfinite(t) and t > 0 else math.nan
        out = np.array([self._log_est[s] for s in settings], dtype=float)
        if np.isnan(out).any():
            known = [v for v in self._log_est.values() if not math.isnan(v)]
            out[np.isnan(out)] = float(np.median(known)) if known else 0.0
        return out

    def design(self, settings: Sequence[Setting]) -> np.ndarray:
        """JointTime's design, then the estimate's column log(estimate) - center: (n, p + 1 [+ 1] + 1)."""
        return np.hstack([super().design(settings), (self.log_estimate(settings) - self.center)[:, None]])

    def coefficient_prior(self) -> tuple[np.ndarray, np.ndarray]:
        """The intercept at the pool's median estimate +- ``level_sd``; the columns the estimate reads at
        0 +- ``residual_sd``; the others as given; the estimate's coefficient at 1 +- ``trust_sd``."""
        m0, s0 = super().coefficient_prior()
        m0, s0 = m0.copy(), s0.copy()
        m0[0], s0[0] = self.center, self.level_sd
        m0[self._read], s0[self._read] = 0.0, self.residual_sd
        return np.append(m0, 1.0), np.append(s0, self.trust_sd)

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        if self.surrogate is not None or not len(settings):
            return super().predict(settings)
        x = self.design(settings)  # before any trial: the prior alone
        m0, s0 = self.coefficient_prior()
        return x @ m0, np.sqrt((x * x) @ (s0 ** 2))

    def sample(self, settings: Sequence[Setting]) -> np.ndarray:
        if self.surrogate is not None:
            return super().sample(settings)
        x = self.design(settings)
        m0, s0 = self.coefficient_prior()
        return x @ (m0 + s0 * self.additive.standard_normal(len(m0)))
