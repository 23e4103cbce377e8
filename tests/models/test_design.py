"""Design: main columns are KnobSpace.encode; interactions follow the knobs present; priors map
to columns by feature name."""

from __future__ import annotations

import numpy as np
import pytest

from infrarsi.models import Design
from infrarsi.models.synthetic import megatron_like_space
from infrarsi.priors.prior import Prior


def test_main_columns_are_the_space_encoding_and_interactions_follow_knobs():
    space = megatron_like_space()
    d = Design(space, target="time")
    cands = space.sample(0, 300)
    x = d.matrix(cands)
    np.testing.assert_array_equal(x[:, : len(space.feature_names)], space.encode(cands))
    assert "log2(micro_batch_size)*recompute_granularity=full" in d.names
    assert "log2(tensor_parallel)*sequence_parallel=True" in d.names
    assert "log2(pipeline_parallel)*log2(virtual_pipeline)*log2(micro_batch_size)" in d.names
    j = d.names.index("log2(micro_batch_size)*recompute_granularity=full")
    row = d.matrix([{"micro_batch_size": 8, "recompute_granularity": "full"}])[0]
    assert row[j] == 3.0  # log2(8 / 1) * 1


def test_interactions_only_for_present_knobs(space):
    d = Design(space, target="memory")
    assert d.interactions == (("micro_batch_size", "recompute_granularity"),)
    with pytest.raises(ValueError, match="unknown knob"):
        Design(space, target="time", interactions=[("micro_batch_size", "sequence_parallel")])
    assert Design(space, target="time", interactions=[]).p == len(space.feature_names)


def test_priors_map_to_columns(space):
    pr = Prior(knob="recompute_granularity", value="full", time_mean=0.3, time_sd=0.1, mem_mean=-0.6, mem_sd=0.2, source="llm")
    d = Design(space, target="memory", priors=[pr])
    j = d.names.index("recompute_granularity=full")
    assert (d.prior_mean[j], d.prior_sd[j], d.prior_source[j]) == (-0.6, 0.2, "llm")
    assert d.prior_sd[0] == 1.0 and d.prior_source[0] == "uninformative"
    with pytest.raises(ValueError, match="two priors for recompute_granularity=full"):
        Design(space, target="time", priors=[pr, pr])
    with pytest.raises(ValueError, match=r"settings\[1\] has tensor_parallel=3"):
        d.matrix([{}, {"tensor_parallel": 3}])
