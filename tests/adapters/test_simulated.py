"""The simulated-cluster adapter: contracts, the scoped knob space, real launches of the simulator process,
and parsing of their outcomes (ok, out of memory, refused settings)."""

import subprocess
from pathlib import Path

import pytest

from infrarsi.adapters import get_adapter
from infrarsi.adapters.simulated import SimulatedAdapter, workload_for
from infrarsi.contract import ContractError, load_contract
from infrarsi.contract.model import Contract
from infrarsi.trial import TrialStatus
from infrarsi.workloads import simulated as sim

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = sorted((ROOT / "contracts").glob("sim-*.toml"))


def run(spec):
    p = subprocess.run(spec.argv, env={**__import__("os").environ, **spec.env}, capture_output=True, text=True,
                       timeout=spec.time_limit_s)
    return p.stdout, p.stderr, p.returncode


@pytest.fixture(scope="module")
def dense8b():
    return load_contract(ROOT / "contracts" / "sim-dense8b-h100x8.toml")


@pytest.mark.parametrize("path", CONTRACTS, ids=[p.stem for p in CONTRACTS])
def test_every_sim_contract_loads_and_its_baseline_is_valid(path):
    c = load_contract(path)
    w = workload_for(c)
    assert c.hardware.devices == w.world_size
    space = SimulatedAdapter().knob_space(c)
    base = space.complete(c.baseline)
    assert space.is_valid(base), space.validate(base)
    if "reference" in c.workload.args:
        assert c.workload.args["reference"] == w.name
        assert dict(base) == dict(sim.check_setting(w, w.baseline))  # the contract's baseline is the workload's
    assert space["fp8_recipe"].domain == ("none",) and space["bf16"].domain == (True,)  # numerics stay fixed
    assert not sim.simulate(w, base, noise_cv=0).oom
    assert len(CONTRACTS) >= 5


def test_space_follows_scope_and_keeps_data_parallel_derived(dense8b):
    space = get_adapter("simulated").knob_space(dense8b)
    assert space["tensor_parallel"].default == 4  # the baseline is the reference level
    assert space["data_parallel"].domain == (1, 2, 4, 8)
    assert space.is_valid(space.complete({"tensor_parallel": 2, "data_parallel": 4}))
    narrow = dense8b.model_copy(update={"scope": dense8b.scope.model_copy(update={"knobs": {"micro_batch_size": [1, 2]}})})
    s2 = SimulatedAdapter().knob_space(narrow)
    assert s2["tensor_parallel"].domain == (4,) and s2["micro_batch_size"].domain == (1, 2)
    bad = dense8b.model_copy(update={"scope": dense8b.scope.model_copy(update={"knobs": {"expert_parallel": [1, 2]}})})
    with pytest.raises(ContractError, match="expert_parallel"):
        SimulatedAdapter().knob_space(bad)


def test_launch_runs_and_parses_ok_oom_and_invalid(dense8b):
    a = SimulatedAdapter()
    space = a.knob_space(dense8b)
    base = space.complete(dense8b.baseline)
    spec = a.launch(dense8b, base)
    assert spec.argv[1:5] == ["-m", "infrarsi.workloads.simulated", "--workload", "dense8b-h100x8"]
    out = a.parse(dense8b, *run(spec))
    assert out.status is TrialStatus.OK
    exact = sim.simulate("dense8b-h100x8", base, noise_cv=0)
    assert out.metrics.step_time_s == pytest.approx(exact.step_time_s, rel=0.06)
    assert out.metrics.mfu == pytest.approx(exact.mfu, rel=0.06)
    assert out.metrics.peak_memory_bytes == pytest.approx(exact.peak_memory_bytes, rel=1e-3)
    assert len(out.metrics.losses) == 8

    again = a.parse(dense8b, *run(a.launch(dense8b, base)))  # a rerun draws fresh noise
    assert again.metrics.step_time_s != out.metrics.step_time_s
    assert again.metrics.losses == out.metrics.losses  # same data, same computation

    oom = a.parse(dense8b, *run(a.launch(dense8b, space.complete({"tensor_parallel": 1, "data_parallel": 8,
                                                                  "sequence_parallel": False}))))
    assert oom.status is TrialStatus.OOM and oom.metrics.step_time_s is None
    assert "CUDA out of memory" in oom.evidence[0]

    refused = a.parse(dense8b, *run(a.launch(dense8b, space.complete({"tensor_parallel": 2, "data_parallel": 2}))))
    assert refused.status is TrialStatus.INVALID and "world_size(8)" in " ".join(refused.evidence)


def test_contract_with_its_own_model_dims():
    c = Contract.model_validate({
        "name": "sim-custom", "workload": {"adapter": "simulated", "args": {
            "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "ffn_hidden_size": 13824,
            "vocab_size": 32000, "seq_length": 4096, "global_batch_size": 256, "nodes": 2, "train_iters": 6}},
        "hardware": {"kind": "H200", "devices": 16, "memory_capacity_gib": 140.4},
    })
    a = SimulatedAdapter()
    space = a.knob_space(c)
    s = space.complete({"tensor_parallel": 4, "data_parallel": 4, "sequence_parallel": True,
                        "distributed_optimizer": True})
    spec = a.launch(c, s)
    assert '"hidden_size": 5120' in spec.argv[4] and '"gpu": "H200"' in spec.argv[4]
    out = a.parse(c, *run(spec))
    assert out.status is TrialStatus.OK and out.metrics.tflops_per_device > 100
    wrong = c.model_copy(update={"hardware": c.hardware.model_copy(update={"devices": 8})})
    with pytest.raises(ContractError, match="set hardware.devices = 16"):
        a.knob_space(wrong)


def test_the_oom_traceback_names_the_frame_the_adapter_hands_the_process(dense8b):
    """The trial prints the log its adapter parses; the one framework word in it, the traceback's frame, is the
    adapter's to state (--oom-frame in its launch): without it the process prints the same traceback, frameless."""
    a = SimulatedAdapter()
    setting = a.knob_space(dense8b).complete({"tensor_parallel": 1, "data_parallel": 8, "sequence_parallel": False})
    spec = a.launch(dense8b, setting)
    _, err, rc = run(spec)
    lines = err.splitlines()
    assert rc == 1 and lines[0] == "[rank0]: Traceback (most recent call last):", err
    assert lines[1].startswith('[rank0]:   File "megatron/training/training.py", in train_step ('), err
    i = spec.argv.index("--oom-frame")
    bare = spec.model_copy(update={"argv": spec.argv[:i] + spec.argv[i + 2:]})
    _, err_bare, rc_bare = run(bare)
    assert rc_bare == 1 and err_bare.splitlines() == [lines[0], *lines[2:]]
