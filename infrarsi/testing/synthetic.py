"""A known ground truth for testing and benchmarking the models: a Megatron-like knob space and
a simulator whose log step time and log peak memory are linear in the models' own design columns
plus Gaussian scatter. Trials whose peak exceeds capacity are OOMs (no step time, no peak).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..knobs.knob import Knob
from ..knobs.space import KnobSpace
from ..models import Design

GIB = 2**30


def ten_knob_space() -> KnobSpace:
    """Ten Megatron knobs, 13,824 points before constraints (enough for 10,000 candidates)."""
    knobs = [
        Knob(name="tensor_parallel", kind="int", domain=(1, 2, 4, 8), default=1, group="parallelism"),
        Knob(name="pipeline_parallel", kind="int", domain=(1, 2, 4), default=1, group="parallelism"),
        Knob(name="virtual_pipeline", kind="int", domain=(1, 2, 4), default=1, group="parallelism"),
        Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4, 8), default=1, group="memory"),
        Knob(name="sequence_parallel", kind="bool", group="parallelism"),
        Knob(name="recompute_granularity", kind="categorical", domain=("none", "selective", "full"), default="none", group="memory"),
        Knob(name="distributed_optimizer", kind="bool", group="memory"),
        Knob(name="overlap_grad_reduce", kind="bool", group="communication"),
        Knob(name="overlap_param_gather", kind="bool", group="communication"),
        Knob(name="use_flash_attn", kind="bool", group="kernel"),
    ]
    return KnobSpace(knobs)


@dataclass(frozen=True)
class SyntheticTruth:
    """Ground truth on the log scale. ``time_coef``/``mem_coef`` map design column names (e.g.
    ``"micro_batch_size=8"``, ``"log2(micro_batch_size)*recompute_granularity=full"``) to effects;
    columns not named have effect 0."""

    space: KnobSpace
    capacity_bytes: float
    time_coef: Mapping[str, float] = field(default_factory=dict)
    mem_coef: Mapping[str, float] = field(default_factory=dict)
    time_intercept: float = math.log(1.0)  # log seconds at the default setting
    mem_intercept: float = math.log(40 * GIB)  # log bytes at the default setting
    time_sigma: float = 0.02
    mem_sigma: float = 0.05
    interactions: Sequence[Sequence[str]] | None = None

    def _vec(self, coef: Mapping[str, float]) -> tuple[Design, np.ndarray]:
        d = Design(self.space, target="time", interactions=self.interactions, ordinal=False)  # per-value effects
        unknown = set(coef) - set(d.names)
        if unknown:
            raise ValueError(f"unknown columns {sorted(unknown)}; columns: {d.names}")
        return d, np.array([coef.get(n, 0.0) for n in d.names])

    def mean_log_time(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        d, b = self._vec(self.time_coef)
        return self.time_intercept + d.matrix(settings) @ b

    def mean_log_peak(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        d, b = self._vec(self.mem_coef)
        return self.mem_intercept + d.matrix(settings) @ b

    def simulate(
        self, settings: Sequence[Mapping[str, Any]], rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One run per setting: (step_times_s, peaks_bytes, ooms). An OOM has NaN time and NaN peak."""
        settings = list(settings)
        n = len(settings)
        log_peak = self.mean_log_peak(settings) + self.mem_sigma * rng.standard_normal(n)
        log_t = self.mean_log_time(settings) + self.time_sigma * rng.standard_normal(n)
        oom = log_peak > math.log(self.capacity_bytes)
        peaks = np.where(oom, np.nan, np.exp(log_peak))
        times = np.where(oom, np.nan, np.exp(log_t))
        return times, peaks, oom
