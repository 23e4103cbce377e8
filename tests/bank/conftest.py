"""Fixtures for the experience-bank tests: a fresh bank file, declared hardware and workloads, trials."""

from __future__ import annotations

from typing import Any

import pytest

from infrarsi.bank import Bank
from infrarsi.trial import Cost, Metrics, Trial

GiB = 2**30

A100 = {"kind": "A100-80GB", "devices": 8, "memory_capacity_gib": 80, "interconnect": "nvlink"}
H100 = {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80, "interconnect": "nvlink"}
LLAMA8B = {"name": "llama3-8b", "framework": "megatron", "num_layers": 32, "hidden_size": 4096,
           "num_attention_heads": 32, "num_query_groups": 8, "ffn_hidden_size": 14336, "vocab_size": 128256,
           "seq_length": 8192, "global_batch_size": 256}
LLAMA70B = {**LLAMA8B, "name": "llama3-70b", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
            "ffn_hidden_size": 28672}
MIXTRAL = {**LLAMA8B, "name": "mixtral-8x7b", "num_experts": 8, "moe_router_topk": 2, "vocab_size": 32000}


def make_trial(i: int, setting: dict[str, Any], step: float | None, *, status: str = "ok",
               peak_gib: float | None = 10.0, role: str = "search", wall_s: float = 30.0) -> Trial:
    """A trial record as a runner would write it: ok with a step time, or a failure with its reason."""
    return Trial(id=i, setting=setting, status=status, role=role,
                 metrics=Metrics(step_time_s=step if status == "ok" else None,
                                 peak_memory_bytes=None if peak_gib is None else peak_gib * GiB,
                                 losses=[2.5, 2.4]),
                 cost=Cost(wall_s=wall_s, devices=8),
                 reason="" if status == "ok" else f"{status} in trial {i}",
                 evidence=[] if status == "ok" else [f"log line for {status}"])


@pytest.fixture
def bank(tmp_path):
    b = Bank(tmp_path / "bank.sqlite")
    yield b
    b.close()
