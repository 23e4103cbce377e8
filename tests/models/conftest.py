"""A small knob space with a known memory/time ground truth, shared by the model tests."""

from __future__ import annotations

import math

import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.testing.synthetic import GIB, SyntheticTruth

# Log-scale effects relative to each knob's default. Memory: micro-batch grows activations,
# recompute and TP shrink them, the distributed optimizer shards optimizer state.
MEM_COEF = {
    "micro_batch_size=2": 0.6,
    "micro_batch_size=4": 1.2,
    "micro_batch_size=8": 1.8,
    "recompute_granularity=selective": -0.3,
    "recompute_granularity=full": -0.7,
    "tensor_parallel=2": -0.35,
    "tensor_parallel=4": -0.7,
    "distributed_optimizer=True": -0.25,
}
TIME_COEF = {
    "micro_batch_size=2": -0.15,
    "micro_batch_size=4": -0.25,
    "micro_batch_size=8": -0.3,
    "recompute_granularity=selective": 0.05,
    "recompute_granularity=full": 0.3,
    "tensor_parallel=2": 0.1,
    "tensor_parallel=4": 0.25,
    "overlap_grad_reduce=True": -0.08,
}


def small_space() -> KnobSpace:
    """4 * 3 * 3 * 2 * 2 = 144 settings, 10 feature columns."""
    return KnobSpace(
        [
            Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4, 8), default=1),
            Knob(name="recompute_granularity", kind="categorical", domain=("none", "selective", "full"), default="none"),
            Knob(name="tensor_parallel", kind="int", domain=(1, 2, 4), default=1),
            Knob(name="distributed_optimizer", kind="bool"),
            Knob(name="overlap_grad_reduce", kind="bool"),
        ]
    )


@pytest.fixture
def space() -> KnobSpace:
    return small_space()


@pytest.fixture
def truth(space: KnobSpace) -> SyntheticTruth:
    # default setting: 48 GiB of 64 GiB; micro-batch 4 or 8 without memory savers runs out of memory;
    # the scatter (0.1 on the log scale) stands for what a linear model of memory leaves unexplained
    return SyntheticTruth(
        space,
        capacity_bytes=64 * GIB,
        time_coef=TIME_COEF,
        mem_coef=MEM_COEF,
        time_intercept=math.log(2.0),
        mem_intercept=math.log(48 * GIB),
        time_sigma=0.02,
        mem_sigma=0.1,
        interactions=[],
    )


@pytest.fixture
def mem_coef() -> dict[str, float]:
    return dict(MEM_COEF)


@pytest.fixture
def time_coef() -> dict[str, float]:
    return dict(TIME_COEF)
