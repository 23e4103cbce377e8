"""What one pre-flight estimate says: per-rank peak bytes by category, what it adds for what it cannot see,
and a roofline step time where the hardware's peaks are known."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GiB = 2**30

# The tracker's categories (MemTracker / FSDPMemTracker names) -> the five the report speaks of.
CATEGORY = {
    "Parameter": "parameters", "Sharded Param": "parameters", "Unsharded Param": "parameters", "Buffer": "parameters",
    "Gradient": "gradients", "Sharded Grad": "gradients", "Unsharded Grad": "gradients",
    "Optstate": "optimizer", "OptState": "optimizer",
    "Activation": "activations", "Inputs": "activations",
    "Temp": "temporaries", "Other": "temporaries",
    "All Gather": "communication", "Reduce Scatter": "communication",
}
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "communication")


class EstimateError(ValueError):
    """A setting the estimator cannot build (bad degrees, an unknown model flavour): one line, with the fix."""


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """One rank's memory at the moment of its peak, from one fake training step of the real model.

    ``tracked`` are tensor bytes the tracker saw (by the tracker's own category names); ``unseen_bytes`` is the
    measured constant for what no tensor tracker can see (see overhead.py); ``peak_bytes`` is their sum: the
    figure compared with a measured peak and used as the memory model's offset."""

    framework: str
    world_size: int
    layout: dict[str, Any]  # the parallel layout as applied: dp_shard, dp_replicate, tp, ac, micro-batch, dtype
    tracked: dict[str, int]  # tracker category -> bytes at the peak
    unseen_bytes: float
    unseen_source: str  # where the constant comes from (a measurement, or why there is none)
    step_time_s: float | None = None  # roofline compute time of one step on the contract's device, None if unknown
    step_time_note: str = ""
    wall_s: float = 0.0  # how long the estimate itself took here
    notes: tuple[str, ...] = field(default_factory=tuple)
    per_rank: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # Megatron: each estimated rank's peak

    @property
    def tracked_bytes(self) -> int:
        return sum(self.tracked.values())

    @property
    def peak_bytes(self) -> float:
        return self.tracked_bytes + self.unseen_bytes

    def by_category(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for k, v in self.tracked.items():
            out[CATEGORY.get(k, "temporaries")] += v
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "world_size": self.world_size, "layout": self.layout,
                "tracked_bytes": self.tracked_bytes, "tracked": self.tracked, "by_category": self.by_category(),
                "unseen_bytes": self.unseen_bytes, "unseen_source": self.unseen_source, "peak_bytes": self.peak_bytes,
                "step_time_s": self.step_time_s, "step_time_note": self.step_time_note, "wall_s": round(self.wall_s, 2),
                "notes": list(self.notes), **({"per_rank": list(self.per_rank)} if self.per_rank else {})}
