"""The ten ways a setting the knob space called valid used to be refused by the framework (or a launch was read
wrong), each on a launch in the shape teams write, checked against the frameworks' own code where it is installed."""

import shlex
from pathlib import Path

import pytest

from infrarsi.adapters import megatron as mg
from infrarsi.adapters import torchtitan as tt
from infrarsi.launch.bash import interpret_script
from infrarsi.adapters.megatron import check as mcheck
from infrarsi.adapters.megatron.check import check_megatron
from infrarsi.adapters.torchtitan import check as tcheck
from infrarsi.adapters.torchtitan.check import check_torchtitan, torchtitan_config
from infrarsi.launch.command import split_launcher
from infrarsi.contract.model import Contract

FIX = Path(__file__).parents[1] / "fixtures"
needs_torchtitan = pytest.mark.skipif(not tcheck.available(), reason="the optional torchtitan extra is absent")
needs_mcore = pytest.mark.skipif(not mcheck.available(), reason="the optional megatron-core extra is absent")


def _megatron(name: str, **kw) -> mg.MegatronLaunch:
    return mg.parse_megatron_file(FIX / "megatron" / name, **kw)


# 1. coupled flags ------------------------------------------------------------------------------------------
def test_fp8_param_gather_leaves_with_the_distributed_optimizer():
    p = _megatron("llama3_70b_sbatch_container.sh")
    assert "--fp8-param-gather" in p.args and p.setting["distributed_optimizer"]
    off = mg.emit_megatron(p, {**p.setting, "distributed_optimizer": False}).argv
    assert "--fp8-param-gather" not in off and "--use-distributed-optimizer" not in off
    assert "--fp8-format" in off  # fp8 itself stays
    assert "--fp8-param-gather" in mg.emit_megatron(p, p.setting).argv


def test_local_attention_backend_is_offered_only_with_the_local_spec():
    p = _megatron("gpt3_175b.sh")
    assert "local" not in mg.knob_space_for(p)["attention_backend"].domain
    argv = p.argv() + ["--spec", "local"]
    q = mg.parse_megatron_argv(argv)
    assert "local" in mg.knob_space_for(q)["attention_backend"].domain


# 2. torchtitan degrees -------------------------------------------------------------------------------------
def test_the_replicate_degree_follows_data_parallel_instead_of_vetoing_the_layout():
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b_hsdp.toml", world_size=8)
    space = tt.knob_space_for(p)
    base = space.complete(p.setting)
    assert base["data_parallel_replicate"] == 2 and base["data_parallel"] == 8  # HSDP 2 x 4, as the job says
    moved = space.derive(base.replace(tensor_parallel=8))  # the space proposes a layout and derives the rest
    assert (moved["data_parallel"], moved["data_parallel_replicate"], moved["distributed_optimizer"]) == (1, 1, False)
    assert space.is_valid(moved) and moved in space.neighbors(base)
    bad = base.replace(tensor_parallel=8, data_parallel=1)  # stated with replicate 2 kept: no shard degree gives it
    assert not space.is_valid(bad)
    rule = next(c for c in space.constraints if c.name == "dp_covers_replicate")
    assert "not a multiple of data_parallel_replicate 2" in rule(bad)
    with pytest.raises(tt.TorchtitanLaunchError, match="dp_shard must -1 or >=1"):
        tt.emit_torchtitan(p, bad)  # never `--parallelism.data_parallel_shard_degree 0`


@needs_torchtitan
def test_torchtitan_parallel_dims_refuses_a_zero_shard_degree():
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b_hsdp.toml", world_size=8)
    argv = ["torchrun", "--nproc-per-node=8", "-m", "torchtitan.train", "--job.config_file", p.toml_path,
            "--parallelism.tensor_parallel_degree", "8", "--parallelism.data_parallel_shard_degree", "0"]
    assert any("dp_shard must -1 or >=1" in m for m in check_torchtitan(p, argv, world_size=8))


# 3. hardware-blind domains ---------------------------------------------------------------------------------
def _contract(launch: str, kind: str, devices: int, adapter: str = "megatron") -> Contract:
    return Contract.model_validate({"name": "c", "workload": {"adapter": adapter, "launch": launch},
                                    "hardware": {"kind": kind, "devices": devices, "memory_capacity_gib": 80}})


def test_fp8_recipes_follow_the_contracts_gpu():
    h100 = mg.MegatronAdapter(base_dir=FIX / "megatron").knob_space(_contract("llama3_8b_fp8.sh", "H100-80GB", 8))
    b200 = mg.MegatronAdapter(base_dir=FIX / "megatron").knob_space(_contract("llama3_8b_fp8.sh", "B200", 8))
    assert "mxfp8" not in h100["fp8_recipe"].domain and "delayed" in h100["fp8_recipe"].domain
    assert "mxfp8" in b200["fp8_recipe"].domain
    tt_h100 = tt.TorchtitanAdapter(base_dir=FIX / "torchtitan").knob_space(
        _contract("llama3_70b.toml", "H100-80GB", 64, "torchtitan"))
    assert "mxfp8" not in tt_h100["fp8_recipe"].domain and "rowwise" in tt_h100["fp8_recipe"].domain


# 4. async TP on torchtitan 0.3 ---------------------------------------------------------------------------
def test_async_tp_needs_the_model_compiled():
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b_v03_loss_compile.cmd", world_size=8)
    space = tt.knob_space_for(p)
    s = space.complete(p.setting)
    msgs = [v.message for v in space.validate(s.replace(async_tp=True))]
    assert any("Async TP requires 'model' in --compile.components and --compile.enable" in m for m in msgs), msgs
    full = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b_v03.sh", world_size=8)  # compiles the model
    fs = tt.knob_space_for(full)
    assert not [v for v in fs.validate(fs.complete(full.setting).replace(async_tp=True, tensor_parallel=2,
                                                                       sequence_parallel=True, data_parallel=4))
                if v.constraint == "async_tp_needs_compiled_model"]


# 5. the emitter ------------------------------------------------------------------------------------------
@needs_torchtitan
def test_fp8_off_in_a_02_job_is_a_job_file_torchtitan_accepts(tmp_path):
    src = tmp_path / "llama3_70b.toml"
    src.write_text((FIX / "torchtitan" / "llama3_70b.toml").read_text())
    p = tt.parse_torchtitan_file(src, world_size=64)
    spec = tt.emit_torchtitan(p, {**p.setting, "fp8_recipe": "none"})
    assert "''" not in shlex.join(spec.argv) and "--model.converters" not in spec.argv
    assert check_torchtitan(p, spec.argv, world_size=64) == []
    job = spec.argv[spec.argv.index("--job.config_file") + 1]
    assert torchtitan_config(["--job.config_file", job]).model.converters == []
    # the old spelling is what torchtitan refuses
    assert check_torchtitan(p, [*spec.argv[:spec.argv.index("--job.config_file")], "--job.config_file", str(src),
                                "--model.converters", ""], world_size=64)


@needs_torchtitan
def test_rowwise_turns_the_fp8_all_gather_off():
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_70b.toml", world_size=64)
    spec = tt.emit_torchtitan(p, {**p.setting, "fp8_recipe": "rowwise"})
    assert "--quantize.linear.float8.no-enable-fsdp-float8-all-gather" in spec.argv
    assert check_torchtitan(p, spec.argv, world_size=64) == []
    cfg = torchtitan_config(["--job.config_file", p.toml_path, "--quantize.linear.float8.recipe_name", "rowwise"])
    from infrarsi.adapters.torchtitan.check import torchtitan_job_checks

    assert any("enable_fsdp_float8_all_gather" in m for m in torchtitan_job_checks(cfg, world_size=64))


# 6. reading scripts --------------------------------------------------------------------------------------
def test_backticks_pwd_and_bare_sbatch_flags():
    p = _megatron("llama3_70b_sbatch_container.sh", cwd="/home/team/llm")
    assert p.world_size == 64  # --exclusive and --overcommit do not swallow --ntasks-per-node
    assert p.launch.program == ["pretrain_gpt.py"]  # the backtick date stays one word in --output
    out = next(a for a in p.launch.launcher if a.startswith("--output="))
    assert out.endswith("_`date +'date_%y-%m-%d_time_%H-%M-%S'`.log")
    # ${PWD} is kept as the user wrote it (resolved where the launch starts), not this machine's folder
    assert p.args[p.args.index("--data-cache-path") + 1] == "${PWD}/data_cache"
    pinned = _megatron("llama3_70b_sbatch_container.sh", env={"PWD": "/home/team/llm"})  # the contract's script_env
    assert pinned.args[pinned.args.index("--data-cache-path") + 1] == "/home/team/llm/data_cache"
    res = interpret_script('X=$(hostname -s)\nY="a `b c` d"\necho $X $Y\n', cwd="/w")
    assert res.commands[0].argv == ["echo", "$(hostname -s)", "a", "`b c`", "d"]
    assert split_launcher(["srun", "python", "x.py"], sbatch=["--exclusive", "--nodes=2", "--overcommit",
                                                               "--ntasks-per-node=4"]).world_size == 8


# 7. positional arguments ---------------------------------------------------------------------------------
def test_positional_arguments_come_from_the_contract():
    p = _megatron("gpt3_175b.sh")
    assert any(m.startswith("--data-path has no value: $DATA_PATH is the script's positional argument 5")
               and "workload.script_args" in m for m in p.problems)
    assert any(m in mg.violations(p) for m in p.problems)
    args = ["/ckpt", "/tb", "/data/gpt2-vocab.json", "/data/gpt2-merges.txt", "/data/pile_text_document"]
    c = Contract.model_validate({"name": "c", "workload": {"adapter": "megatron", "launch": "gpt3_175b.sh",
                                                           "script_args": args},
                                 "hardware": {"kind": "H100-80GB", "devices": 128, "memory_capacity_gib": 80}})
    a = mg.MegatronAdapter(base_dir=FIX / "megatron")
    q = a.parsed(c)
    assert q.problems == [] and q.fixed["data_path"] == "/data/pile_text_document"
    spec = a.launch(c, {})
    assert spec.argv[spec.argv.index("--vocab-file") + 1] == "/data/gpt2-vocab.json"
    bare = Contract.model_validate({**c.model_dump(), "workload": {"adapter": "megatron", "launch": "gpt3_175b.sh"}})
    with pytest.raises(ValueError, match="--data-path has no value"):
        mg.MegatronAdapter(base_dir=FIX / "megatron").launch(bare, {})


# 8. sbatch keeps the user's srun options -------------------------------------------------------------------
def test_srun_launch_keeps_its_container_options_as_a_batch_job():
    p = _megatron("llama3_70b_sbatch_container.sh")
    argv = mg.emit_megatron(p, {**p.setting, "tensor_parallel": 8, "data_parallel": 2}, launcher="srun").argv
    assert argv[:len(p.launch.launcher)] == p.launch.launcher
    assert "--container-image=nvcr.io/nvidia/nemo:24.09" in argv


# 9. one vocabulary -----------------------------------------------------------------------------------------
def test_fsdp_says_distributed_optimizer():
    fsdp = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b.toml", world_size=8)
    assert fsdp.setting["distributed_optimizer"] is True  # shard degree 8 shards optimizer state
    space = tt.knob_space_for(fsdp)
    tp8 = space.complete(fsdp.setting).replace(tensor_parallel=8, sequence_parallel=True, data_parallel=1)
    assert [v.constraint for v in space.validate(tp8)] == ["optimizer_sharded_by_fsdp"]
    assert space.is_valid(tp8.replace(distributed_optimizer=False))


# 10. too strict --------------------------------------------------------------------------------------------
@needs_mcore
def test_fp8_with_fp16_or_fp32_params_is_valid_and_megatron_core_agrees():
    p = _megatron("llama3_8b_fp8.sh")
    space = mg.knob_space_for(p)
    fp32 = space.complete(p.setting).replace(bf16=False)
    assert fp32["fp8_recipe"] == "delayed" and space.is_valid(fp32) and check_megatron(p, fp32) == []
    fp16 = mg.parse_megatron_argv(p.argv() + ["--fp16"])
    fp16.world_size = 8
    s16 = {**fp16.setting, "bf16": False}
    assert mg.violations(fp16, s16) == []


def test_async_tp_at_tp1_is_inert_on_02():
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / "llama3_8b.toml", world_size=8)
    space = tt.knob_space_for(p)
    assert space.is_valid(space.complete(p.setting).replace(async_tp=True))
