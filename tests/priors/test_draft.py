"""Contract drafting: the deterministic offline draft, the LLM draft and its checks, and `infrarsi init
--from-request` (never locks without --yes)."""

from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

from infrarsi.cli import app
from infrarsi.contract import Contract, load_contract
from infrarsi.stages.draft import draft_contract, off_limits, parse_command, parse_launch
from infrarsi.testing.openai_server import Reply

SCRIPT = """#!/bin/bash
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
TP=2
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES)
MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32
    --seq-length 4096
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} \\
    --micro-batch-size 1 --global-batch-size 256 --train-iters 100 --lr 3e-4 \\
    --bf16 --num-workers 4 --tensor-model-parallel-size $TP --use-distributed-optimizer
"""
FIXED = {"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "seq_length": 4096,
         "global_batch_size": 256, "train_iters": 100, "lr": 3e-4}
FIXED_BY_ADAPTER = {**FIXED, "num_query_groups": 32}  # Megatron: no --group-query-attention -> groups = heads
REQUEST = "Make training faster on our 16 H100s. Don't touch the data pipeline, and keep the parallel layout fixed."


@pytest.fixture
def launch(tmp_path):
    p = tmp_path / "train_gpt.sh"
    p.write_text(SCRIPT)
    return p


def test_parse_launch_reads_fixed_args_and_world_size(launch):
    parsed = parse_launch(launch)  # through the Megatron adapter's parser
    assert parsed.adapter == "megatron" and parsed.program == "pretrain_gpt.py"
    assert parsed.fixed == FIXED_BY_ADAPTER and parsed.world_size == 16
    assert parsed.setting["tensor_parallel"] == 2 and parsed.setting["distributed_optimizer"] is True
    generic = parse_command(launch)  # the fallback reader agrees on what it can see
    assert generic.fixed == FIXED and generic.world_size == 16
    assert generic.flags["tensor_model_parallel_size"] == 2 and generic.flags["bf16"] is True


def test_request_keywords_put_topics_off_limits():
    assert off_limits("don't touch the data pipeline") == {"num_workers"}
    assert "tensor_parallel" in off_limits("keep the parallel layout as is")
    assert off_limits("tune the data pipeline and the parallel layout") == set()  # positive mentions remove nothing
    assert "kernel_*" in off_limits("no kernel changes please")


def test_offline_draft_is_deterministic_valid_and_follows_the_request(launch):
    text = draft_contract(REQUEST, launch)
    assert text == draft_contract(REQUEST, launch)
    c = Contract.model_validate(tomllib.loads(text))
    assert c.workload.adapter == "megatron" and dict(c.workload.args) == FIXED_BY_ADAPTER
    assert (c.hardware.kind, c.hardware.devices, c.hardware.memory_capacity_gib) == ("H100-80GB", 16, 80.0)
    assert "num_workers" not in c.scope.knobs and "tensor_parallel" not in c.scope.knobs
    assert "recompute_granularity" in c.scope.knobs  # everything else stays tunable
    assert c.baseline["tensor_parallel"] == 2 and c.baseline["distributed_optimizer"] is True
    assert c.baseline["num_workers"] == 4  # off limits, so the baseline pins the launch's value


def test_llm_draft_that_changes_the_workload_is_rejected_then_falls_back(server, llm, launch, tmp_path):
    base = tomllib.loads(draft_contract(REQUEST, launch))
    cheat = json.loads(json.dumps(base))
    cheat["workload"]["args"]["global_batch_size"] = 64  # would change the task
    from infrarsi.stages.draft import to_toml

    server.script(Reply(json={"toml": to_toml(cheat), "notes": "smaller batch is faster"}),
                  Reply(json={"toml": "name = [", "notes": ""}))
    text = draft_contract(REQUEST, launch, llm=llm, record_dir=tmp_path / "run")
    assert "workload.args must be exactly" in server.requests[1]["messages"][-1]["content"]
    assert text == draft_contract(REQUEST, launch)  # the offline draft


def test_llm_draft_that_validates_is_returned(server, llm, launch):
    data = tomllib.loads(draft_contract(REQUEST, launch))
    data["scope"]["knobs"] = {"recompute_granularity": ["none", "full"]}
    data["budget"] = {"max_trials": 12}
    from infrarsi.stages.draft import to_toml

    server.script(Reply(json={"toml": to_toml(data), "notes": "check memory_capacity_gib"}))
    text = draft_contract(REQUEST, launch, llm=llm)
    c = Contract.model_validate(tomllib.loads(text))
    assert c.scope.knobs == {"recompute_granularity": ["none", "full"]} and c.budget.max_trials == 12
    assert "# check memory_capacity_gib" in text


def test_cli_writes_a_draft_and_never_locks_without_yes(launch, tmp_path):
    run = tmp_path / "runs" / "r1"
    res = CliRunner().invoke(app, ["init", "--from-request", REQUEST, "--launch", str(launch), "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    draft = tmp_path / "runs" / "r1.contract.toml"
    assert draft.is_file() and not (run / "contract.lock").exists()
    assert "review it" in res.output and f"infrarsi init {draft}" in res.output.replace("\n", "")
    assert load_contract(draft).workload.launch == str(launch.resolve())

    res = CliRunner().invoke(app, ["init", "--from-request", REQUEST, "--launch", str(launch), "--run-dir", str(run), "--yes"])
    assert res.exit_code == 0, res.output
    assert (run / "contract.lock").is_file()


def test_cli_from_request_needs_a_launch(tmp_path):
    res = CliRunner().invoke(app, ["init", "--from-request", "faster", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "--launch is required" in res.output
    res = CliRunner().invoke(app, ["init", "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2
