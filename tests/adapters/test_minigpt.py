"""The minigpt adapter: the knob space the contract allows, launches for any setting, and parsing of outcomes."""

from pathlib import Path

import pytest

from infrarsi.adapters.minigpt import MiniGPTAdapter
from infrarsi.contract import load_contract
from infrarsi.trial import TrialStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def contract():
    return load_contract(ROOT / "contracts" / "minigpt-cpu.toml")


def test_space_follows_the_scope_and_pins_the_rest(contract):
    space = MiniGPTAdapter().knob_space(contract)
    assert space["micro_batch_size"].domain == (1, 2, 4, 8, 16)
    assert space["micro_batch_size"].default == 2  # the contract's baseline
    assert space["data_parallel"].domain == (1,)  # out of scope: pinned
    v = space.validate(space.complete({"micro_batch_size": 16, "recompute_method": "block"}))
    assert any("recompute_method" in x.message for x in v)


def test_launch_spells_megatron_flags(contract):
    a = MiniGPTAdapter()
    s = a.knob_space(contract).complete({"micro_batch_size": 4, "recompute_granularity": "selective", "bf16": True})
    spec = a.launch(contract, s)
    argv = " ".join(spec.argv)
    assert "--micro-batch-size 4" in argv and "--recompute-granularity selective" in argv and "--bf16" in argv
    assert "--global-batch-size 16" in argv and "--seq-length 256" in argv
    assert spec.memory_cap_bytes == int(0.75 * 2**30) and spec.env["INFRARSI_MEMORY_CAP_BYTES"] == str(spec.memory_cap_bytes)
    dp = a.launch(contract, s.replace(data_parallel=2))
    assert "torch.distributed.run" in dp.argv and dp.processes == 2


def test_parse_garbage_is_a_crash_with_evidence(contract):
    p = MiniGPTAdapter().parse(contract, "hello\nnot a log line\n", "", 0)
    assert p.status is TrialStatus.CRASH and "without the measured iteration lines" in p.reason
    assert p.evidence == ["hello", "not a log line"]


def test_parse_oom_has_no_step_time(contract):
    err = "RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"
    p = MiniGPTAdapter().parse(contract, "", err, 1)
    assert p.status is TrialStatus.OOM and p.metrics.step_time_s is None and p.evidence == [err]
