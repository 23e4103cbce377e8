"""The pre-flight estimate of a torchtitan (0.2.2) job: torchtitan's own config, model and parallelize code on a
fake process group. Skipped when the optional torchtitan extra is not installed."""

import importlib.util
from pathlib import Path

import pytest

from infrarsi.contract.model import Contract
from infrarsi.estimate import EstimateError, estimate

# Optional third-party extra (pip install -e '.[torchtitan]'). Looked up, not imported: importing torchtitan at
# collection imports triton before the kernel tests can set TRITON_INTERPRET.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                                reason="torchtitan (the optional torchtitan extra) is not installed")

JOB = """
[model]
name = "llama3"
flavor = "debugmodel"
[optimizer]
name = "AdamW"
lr = 8e-4
[training]
local_batch_size = 2
seq_len = 128
steps = 10
dataset = "c4_test"
[parallelism]
data_parallel_shard_degree = -1
[activation_checkpoint]
mode = "selective"
"""


@pytest.fixture(scope="module")
def contract(tmp_path_factory) -> Contract:
    job = Path(tmp_path_factory.mktemp("job")) / "debug.toml"
    job.write_text(JOB)
    return Contract.model_validate({
        "name": "tt-debug", "workload": {"adapter": "torchtitan", "launch": str(job)},
        "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 4.0},
        "scope": {"knobs": {"recompute_granularity": ["none", "selective", "full"], "tensor_parallel": [1, 2],
                            "micro_batch_size": [2, 4], "pipeline_parallel": [1, 2]}}})


def _n_params() -> int:
    import torch
    from torchtitan.models.llama3 import Transformer, llama3_args

    with torch.device("meta"):
        return sum(p.numel() for p in Transformer(llama3_args["debugmodel"]).parameters())


def test_fsdp_shards_parameters_and_adam_state_over_the_fake_world(contract):
    e = estimate(contract, {})
    assert e.layout["fsdp"] and e.layout["dp_shard"] == 2 and e.world_size == 2
    assert e.tracked["Sharded Param"] == pytest.approx(4 * _n_params() / 2, rel=0.01)  # fp32 shards, 1/2 each
    assert e.tracked["OptState"] == pytest.approx(2 * e.tracked["Sharded Param"], rel=0.01)  # exp_avg + exp_avg_sq


@pytest.mark.slow
def test_activation_checkpointing_modes_order_activations(contract):
    act = {m: estimate(contract, {"recompute_granularity": m}).tracked_bytes for m in ("none", "selective", "full")}
    assert act["full"] < act["selective"] < act["none"]


@pytest.mark.slow
def test_tensor_parallel_layout_and_refusals(contract):
    e = estimate(contract, {"tensor_parallel": 2})
    assert e.layout["tp"] == 2 and e.layout["dp_shard"] == 1
    with pytest.raises(EstimateError, match="pipeline"):
        estimate(contract, {"pipeline_parallel": 2})
