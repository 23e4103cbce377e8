"""Semantics: what a few knobs of a Megatron-style launch mean for step time, as weak priors the search holds for the
knob values no one gave it a prior on.

Why: cold (no priors from the caller), every knob value starts at "up to ~2.7x either way" (``TunerConfig.time_sd``),
so the search spends trials learning what every practitioner knows -- that recompute re-runs part of the forward pass
and fp32 misses the tensor cores, so both cost time; that overlapping a collective with compute does not slow a step.
The memory side has the same kind of knowledge already (``structured.STRUCTURE`` / ``SAVERS``: what splits and what
saves memory); this is its step-time half. On the perturbed clusters, cold, it adds +0.03 of the optimum at 30 trials
on both the family and the held-out variants (60 paired runs each, BENCHMARKS.md).

The beliefs are directions with a round size and a wide sd, not formulas: nothing here depends on the model, the
hardware or any simulator constant, and each sd leaves the truth room on either side (full recompute: +22% with sd
0.2, where re-running the forward pass of a step whose backward costs twice the forward is ~+33%; fp32: +49% with sd
0.3, which leaves room for a CPU without bf16 instructions, where bf16 is no faster). Knobs whose effect depends on the
workload (the parallel layout, the micro-batch, virtual pipeline stages, fp8) get none. A belief the trials contradict
is set aside like any prior (``TunerConfig.prior_conflict_z``, ``.prior_check``), and the report lists these priors
with source "semantic".

    semantic_priors(space, given=priors)   # one Prior per non-default value of a knob below that no given prior states
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..knobs import KnobSpace
from ..trial.prior import Prior

# knob -> {value: (level, sd, why)}: a level of ln(step time) per value, the first value of each entry the reference
# (level 0, sd 0). A prior states the effect of a value against the knob's default, whatever the space's default is:
# mean = level(value) - level(default), sd = hypot of theirs.
TIME: dict[str, dict[object, tuple[float, float, str]]] = {
    "recompute_granularity": {
        "none": (0.0, 0.0, "no recompute"),
        "selective": (0.05, 0.15, "selective recompute re-runs core attention in the backward pass: a little more "
                                  "compute per step"),
        "full": (0.2, 0.2, "full recompute re-runs each layer's forward pass in the backward pass: a step does about a "
                           "third more compute"),
    },
    "bf16": {
        True: (0.0, 0.0, "bf16 compute"),
        False: (0.4, 0.3, "fp32 matmuls miss the tensor / matrix units and move twice the bytes: slower wherever those "
                          "exist (a CPU without bf16 instructions is the exception the sd leaves room for)"),
    },
    "tp_comm_overlap": {False: (0.0, 0.0, "no overlap"),
                        True: (-0.03, 0.15, "overlapping tensor-parallel communication with GEMMs hides some of it")},
    "overlap_grad_reduce": {False: (0.0, 0.0, "no overlap"),
                            True: (-0.03, 0.15, "overlapping the gradient reduction with the backward pass hides some "
                                                "of it")},
    "overlap_param_gather": {False: (0.0, 0.0, "no overlap"),
                             True: (-0.02, 0.15, "overlapping the parameter all-gather with the forward pass hides "
                                                 "some of it")},
    "moe_grouped_gemm": {False: (0.0, 0.0, "one GEMM per local expert"),
                         True: (-0.05, 0.15, "one grouped GEMM over the local experts instead of one GEMM each")},
    "sequence_parallel": {False: (0.0, 0.0, "all-reduce"),
                          True: (0.0, 0.15, "reduce-scatter + all-gather move what the all-reduce moved: about the "
                                            "same time")},
    "distributed_optimizer": {False: (0.0, 0.0, "replicated optimizer state"),
                              True: (0.0, 0.15, "reduce-scatter + all-gather of the sharded state move what the "
                                                "gradient all-reduce moved: about the same time")},
}


def semantic_priors(space: KnobSpace, *, given: Sequence[Prior] = (), mem_sd: float = 1.0,
                    meanings: Mapping[str, str] | None = None) -> list[Prior]:
    """A Prior for each value of a knob of ``space`` that means a ``TIME`` knob, other than the knob's default (both in
    ``TIME``), that no prior in ``given`` states (by feature). Their memory side says nothing (mean 0, ``mem_sd``: the
    memory model's own open prior). ``meanings``: {knob name: catalog name} (search/meaning.py; default: each knob
    means its own name)."""
    stated = {p.feature for p in given}
    by = {m: k for k, m in (meanings if meanings is not None else {k: k for k in space.names}).items()}
    out = []
    for meaning, levels in TIME.items():
        knob = by.get(meaning)
        if knob is None or knob not in space or space[knob].default not in levels:
            continue
        ref, ref_sd, _ = levels[space[knob].default]
        for value in space[knob].domain:
            if value == space[knob].default or value not in levels or f"{knob}={value}" in stated:
                continue
            level, sd, why = levels[value]
            out.append(Prior(knob=knob, value=value, time_mean=level - ref, time_sd=math.hypot(sd, ref_sd),
                             mem_mean=0.0, mem_sd=mem_sd, source="semantic",
                             rationale=why if ref_sd == 0 else f"{why}; against the default: {levels[space[knob].default][2]}"))
    return out
