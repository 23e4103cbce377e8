"""Workload signatures: built from contracts and descriptions, compared by a documented distance."""

from __future__ import annotations

import math

import pytest

from infrarsi.bank import WorkloadSignature, signature_from, workload_distance
from infrarsi.contract.model import Contract

from .conftest import LLAMA8B, LLAMA70B, MIXTRAL


def test_signature_from_a_contract_uses_its_fixed_args_and_adapter():
    c = Contract.model_validate({
        "name": "llama8b-h100", "hardware": {"kind": "H100", "memory_capacity_gib": 80},
        "workload": {"adapter": "megatron", "args": {"num_layers": 32, "hidden_size": 4096, "seq_length": 8192,
                                                     "global_batch_size": 256, "data_path": "/data/x", "lr": 3e-4}},
    })
    s = signature_from(c)
    assert (s.name, s.framework, s.num_layers, s.hidden_size, s.seq_length, s.global_batch_size) == (
        "llama8b-h100", "megatron", 32, 4096, 8192, 256)
    assert signature_from(c.workload).hidden_size == 4096


def test_signature_aliases_and_errors():
    s = signature_from({"layers": 2, "hidden": 64, "seq": 128, "gbs": 8, "experts": 4, "topk": 2},
                       framework="minigpt", framework_version="0.1")
    assert (s.num_layers, s.hidden_size, s.seq_length, s.global_batch_size, s.num_experts, s.moe_router_topk) == (
        2, 64, 128, 8, 4, 2)
    assert s.is_moe and s.framework_version == "0.1"
    with pytest.raises(ValueError, match="hidden_size.*integer"):
        signature_from({"hidden_size": "big"})


def test_workload_distance_is_the_documented_formula():
    a = signature_from(LLAMA8B)
    assert workload_distance(a, a) == 0
    longer = signature_from({**LLAMA8B, "seq_length": 2 * LLAMA8B["seq_length"]})
    assert workload_distance(a, longer) == pytest.approx(0.75 * math.log(2))
    moe = signature_from(MIXTRAL)
    # dense vs MoE: 2.0, plus the vocab difference
    assert workload_distance(a, moe) == pytest.approx(2.0 + 0.1 * math.log(128256 / 32000))
    big = signature_from(LLAMA70B)
    assert 0.5 * math.log(2) < workload_distance(a, longer) < workload_distance(a, big) < workload_distance(a, moe) + 1
    other_fw = signature_from({**LLAMA8B, "framework": "torchtitan"})
    assert workload_distance(a, other_fw) == pytest.approx(0.5)


def test_same_task_ignores_name_and_version_and_params_scale():
    a = signature_from(LLAMA8B)
    assert a.same_task(signature_from({**LLAMA8B, "name": "renamed", "framework_version": "0.16"}))
    assert not a.same_task(signature_from(LLAMA70B))
    assert 7e9 < a.params() < 9e9  # llama3-8b: ~8.0e9 parameters
    assert WorkloadSignature().params() == 0
