"""Every setting the knob space calls valid is accepted by the framework's own config code.

For each launch fixture: every valid one-knob neighbour of the launch's own setting and a sample of the space
is emitted, read back by the project (the same setting, the same workload) and, where the framework's parser
is importable, put to it (megatron-core's TransformerConfig and process-group arithmetic; torchtitan 0.2's
ConfigManager, ParallelDims and converter registry; torchtitan 0.3's ConfigManager and ParallelDims, from
its own target directory in a subprocess, when it is installed there). And a setting the framework refuses costs no launch:
the run records it as ``invalid`` with the framework's message.
"""

import random
from pathlib import Path

import pytest

from infrarsi.adapters import megatron as mg
from infrarsi.adapters import torchtitan as tt
from infrarsi.adapters import FrameworkRejected
from infrarsi.adapters.megatron import check as mcheck
from infrarsi.adapters.megatron.check import check_megatron
from infrarsi.adapters.torchtitan import check as tcheck
from infrarsi.adapters.torchtitan.check import (check_torchtitan, check_torchtitan03_many, torchtitan03_args,
                                               torchtitan03_dir)
from infrarsi.contract.model import Contract
from infrarsi.execute import make_executor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus

FIX = Path(__file__).parents[2] / "fixtures"
N_SAMPLE = 4  # per fixture, on top of every valid neighbour (the slow run draws 40)

# fixture -> (positional arguments, world size when the launch does not state it)
MEGATRON = {
    "deepseek_v2_lite.sh": ([], None), "gpt2_345m_idioms.sh": ([], None),
    "gpt3_175b.sh": (["/ckpt", "/tb", "/d/vocab.json", "/d/merges.txt", "/d/pile_text_document"], None),
    "llama2_70b_slurm.sh": ([], None), "llama3_8b_fp8.sh": ([], None), "mixtral_8x7b.sh": ([], None),
    "llama3_70b_sbatch_container.sh": ([], None), "gpt_pwd_paths.sh": ([], None),
}
TORCHTITAN = {"llama3_8b.toml": 8, "llama3_70b.toml": 64, "llama3_405b.toml": 128, "deepseek_v3_16b.toml": 8,
              "llama3_8b_hsdp.toml": 8, "llama3_405b_launch.sh": 128, "llama3_8b_v03.sh": 8,
              "llama3_70b_v03.cmd": 32, "deepseek_v3_16b_v03.cmd": 16, "llama3_8b_v03_loss_compile.cmd": 8,
              "deepseek_v3_16b_hsdp_v03.cmd": 16}


def _settings(space, base, n=N_SAMPLE):
    return space.neighbors(base) + space.sample(random.Random(0), n=n)


def test_every_fixture_is_covered():
    assert {p.name for p in (FIX / "megatron").glob("*.sh")} == set(MEGATRON)
    assert {p.name for p in (FIX / "torchtitan").iterdir() if p.suffix in (".toml", ".sh", ".cmd")} == set(TORCHTITAN)


@pytest.mark.parametrize("name", sorted(MEGATRON))
def test_megatron_valid_settings_round_trip_and_megatron_core_accepts_them(name):
    _megatron_sweep(name, N_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MEGATRON))
def test_megatron_many_sampled_settings(name):
    _megatron_sweep(name, 40)


@pytest.mark.parametrize("name", sorted(TORCHTITAN))
def test_torchtitan_valid_settings_round_trip_and_torchtitan_accepts_them(name):
    _torchtitan_sweep(name, N_SAMPLE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TORCHTITAN))
def test_torchtitan_many_sampled_settings(name):
    _refused_by_03(_torchtitan_sweep(name, 40))


_BASE03 = ["--module", "llama3", "--config", "llama3_8b"]
_OWN_WORDS = [  # what the 0.3 rules of the knob space stand for
    (_BASE03 + ["--parallelism.tensor_parallel_degree", "2", "activation-checkpoint:full"], 8),
    (_BASE03 + ["--compile.enable", "--compile.components", "loss", "--compile.enable_async_tensor_parallel"], 8),
    (_BASE03 + ["--parallelism.tensor_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "0"], 8),
]


@pytest.fixture(scope="module")
def checked_by_03():
    """Every 0.3 fixture's valid neighbours and sample, and the refusals above, in one batch (one process)."""
    if torchtitan03_dir() is None:
        pytest.skip("torchtitan 0.3 is not installed in its target directory")
    jobs = [j for name in sorted(TORCHTITAN) if not name.endswith(".toml") and name != "llama3_405b_launch.sh"
            for j in _torchtitan_sweep(name, N_SAMPLE)]
    got = check_torchtitan03_many(_OWN_WORDS + jobs)
    return list(zip(_OWN_WORDS + jobs, got))


# slow (~17 s): torchtitan's own config code accepting the valid settings stays covered by default by
# test_torchtitan_valid_settings_round_trip_and_torchtitan_accepts_them (0.2.2, every fixture) and, for a 0.3 launch,
# tests/adapters/test_equivalence.py::test_torchtitan_03_hsdp_moe_job_round_trips_with_its_replicate_degree
@pytest.mark.slow
def test_torchtitan_03_accepts_every_valid_setting_of_the_03_launches(checked_by_03):
    sweep = checked_by_03[len(_OWN_WORDS):]
    assert len(sweep) > 50
    assert [(" ".join(a), ms) for (a, _), ms in sweep if ms] == []


def test_torchtitan_03_refuses_in_its_own_words():
    if torchtitan03_dir() is None:
        pytest.skip("torchtitan 0.3 is not installed in its target directory")
    got = check_torchtitan03_many(_OWN_WORDS)  # the refusals alone: one process, not the slow sweep's batch
    assert got[0] == []
    assert "Async TP requires 'model' in --compile.components and --compile.enable" in got[1][0]
    assert "dp_shard must -1 or >=1" in got[2][0]


def _refused_by_03(jobs):
    if not jobs or torchtitan03_dir() is None:
        return
    got = check_torchtitan03_many(jobs)
    assert [(" ".join(a), ms) for (a, _), ms in zip(jobs, got) if ms] == []


def _megatron_sweep(name, n):
    args, _ = MEGATRON[name]
    p = mg.parse_megatron_file(FIX / "megatron" / name, args=args)
    p.device = "H100-80GB"
    assert p.problems == [] and p.world_size
    space = mg.knob_space_for(p)
    base = space.complete(p.setting)
    settings = _settings(space, base, n)
    assert len(settings) > n
    refused = []
    for s in settings:
        spec = mg.emit_megatron(p, s)
        back = mg.parse_megatron_argv(spec.argv, env=spec.env, sbatch=None)
        back.world_size = p.world_size
        assert {k: back.setting[k] for k in s if k != "data_parallel"} == {k: s[k] for k in s if k != "data_parallel"}
        assert back.fixed == p.fixed  # the workload comes through byte for byte
        refused += [(dict(s), m) for m in check_megatron(p, s)]
    assert refused == []


def _torchtitan_sweep(name, n):
    world = TORCHTITAN[name]
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / name, world_size=world)
    p.device = "H100-80GB"
    space = tt.knob_space_for(p)
    base = space.complete(p.setting)
    refused, jobs03 = [], []
    for s in _settings(space, base, n):
        spec = tt.emit_torchtitan(p, s, world_size=world)
        back = tt.parse_torchtitan_argv(spec.argv, env=spec.env, base_dir=p.base_dir)
        if back.world_size is None:
            back = tt.with_world(back, world)
        assert {k: back.setting[k] for k in s} == dict(s)
        assert {k: v for k, v in back.fixed.items() if k != "global_batch_size"} == \
            {k: v for k, v in p.fixed.items() if k != "global_batch_size"}
        assert back.fixed["global_batch_size"] == p.fixed["global_batch_size"]
        if p.style == "cli":  # 0.3: its own process, one batch of command lines
            args03 = torchtitan03_args(p, spec.argv, spec.env)
            if (args03, world) not in jobs03:
                jobs03.append((args03, world))
        else:
            refused += [(dict(s), m) for m in check_torchtitan(p, spec.argv, env=spec.env, world_size=world)]
    assert refused == []
    return jobs03


@pytest.mark.skipif(not mcheck.available(), reason="the optional megatron-core extra is absent")
def test_megatron_core_words_reach_the_caller():
    p = mg.parse_megatron_file(FIX / "megatron" / "mixtral_8x7b.sh")
    msgs = check_megatron(p, {**p.setting, "tensor_parallel": 3, "data_parallel": None})
    assert any("num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)" in m for m in msgs)
    grid = check_megatron(p, {**p.setting, "expert_parallel": 8, "pipeline_parallel": 8, "tensor_parallel": 1})
    assert grid and "world_size (32) is not divisible by expert_tensor_model_pipeline_parallel size (64)" in grid[0]


@pytest.mark.skipif(not tcheck.available(), reason="the optional torchtitan extra is absent")
def test_a_setting_torchtitan_refuses_is_an_invalid_trial_with_no_launch(tmp_path):
    """The job file has a field torchtitan does not know: the project's reader skips it, so the space calls the
    setting valid, but ConfigManager refuses it. The run records the trial as invalid with torchtitan's words,
    and nothing is launched."""
    job = (FIX / "torchtitan" / "llama3_8b.toml").read_text().replace(
        "[parallelism]\n", "[parallelism]\ntensor_parallel_size = 2  # a Megatron spelling\n")
    (tmp_path / "job.toml").write_text(job)
    c = Contract.model_validate({"name": "c", "workload": {"adapter": "torchtitan", "launch": "job.toml"},
                                 "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80}})
    adapter = tt.TorchtitanAdapter(base_dir=tmp_path)
    assert adapter.knob_space(c).is_valid(adapter.knob_space(c).complete(adapter.parsed(c).setting))
    with pytest.raises(FrameworkRejected, match="torchtitan ConfigManager"):
        adapter.launch(c, {})
    record = RunRecord(tmp_path / "run")
    with Runner(record, make_executor("local"), adapter, c) as runner:
        trial = runner.submit({}).result()
    assert trial.status is TrialStatus.INVALID
    assert "torchtitan ConfigManager" in trial.reason and "tensor_parallel_size" in " ".join(trial.evidence)
    assert record.launch_info(trial.id) is None and trial.cost.wall_s == 0  # never launched

