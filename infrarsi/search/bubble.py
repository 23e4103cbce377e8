"""Bubble: the pipeline's idle share of a step, as one column of the time GP's additive part.

Why: with p pipeline stages of v virtual stages each and m micro-batches per step, a 1F1B schedule leaves each stage
idle for (p - 1) / (v m) of its work (Narayanan et al., 2021, "Efficient large-scale language model training on GPU
clusters"), and m = global batch / (micro-batch x data parallel). So the bubble grows with the pipeline depth, the
micro-batch *and* the data-parallel degree together, and shrinks with interleaving: a product of four knobs, which
one effect per knob value (and the 2-3-way interaction columns of models/_design.py) cannot say. One column can:

    b(s) = ln(1 + (pp - 1) * mbs * dp / (vp * G))       per setting; 0 without pipelining
    log t = ... + beta_b * b(s)                         beta_b ~ Normal(mean, sd): 1 is the textbook schedule

G stands for the global batch (in samples), which the space does not name: a valid setting's mbs * dp divides it,
and where one micro-batch per step is allowed the largest such product is it (elsewhere b is the bubble's log
scaled by a constant the coefficient absorbs). The trials teach beta_b: how far the real schedule is from the
textbook one (p2p sends, uneven stages, warm-up).

    col = BubbleColumn.for_space(space, pool, meanings)   # None when no knob means pipeline_parallel
    col.values(settings)                              # b(s): (n,)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..knobs import KnobSpace, Setting

PP, VP, MBS, DP = "pipeline_parallel", "virtual_pipeline", "micro_batch_size", "data_parallel"


@dataclass(frozen=True)
class BubbleColumn:
    samples_per_step: float  # G: the largest micro-batch x data parallel of the valid settings seen
    names: tuple[str, str, str, str]  # the space's knobs that mean pipeline parallel, virtual pipeline, micro-batch, DP

    @classmethod
    def for_space(cls, space: KnobSpace, pool: Sequence[Setting],
                  meanings: Mapping[str, str] | None = None) -> "BubbleColumn | None":
        """``meanings``: {knob name: catalog name} (search/meaning.py; default: the knobs' own names)."""
        by = {m: k for k, m in (meanings or {k: k for k in space.names}).items()}
        pp, vp, mbs, dp = (by.get(m, "") for m in (PP, VP, MBS, DP))
        if not pp or not pool or max(s[pp] for s in pool) <= 1:
            return None
        g = max(_get(s, mbs) * _get(s, dp) for s in pool)
        return cls(float(g), (pp, vp, mbs, dp))

    def values(self, settings: Sequence[Setting]) -> np.ndarray:
        """b(s) per setting, (n,): ln(1 + bubble fraction)."""
        pp, vp, mbs, dp = self.names
        return np.array([math.log1p((s[pp] - 1) * _get(s, mbs) * _get(s, dp) / (_get(s, vp) * self.samples_per_step))
                         for s in settings], dtype=float)


def _get(s: Setting, name: str) -> float:
    """A knob's value as a number, 1 when the space has no such knob."""
    v = s.get(name, 1)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 1.0
