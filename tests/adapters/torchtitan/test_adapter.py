"""torchtitan adapter on job files and launches modelled on torchtitan's llama3 8B/70B/405B and
DeepSeek-V3 16B configs, both styles (0.2.x TOML, 0.3.x --module/--config): parse, emit, round trip,
bad input, step-line parsing and failure classification."""

from pathlib import Path

import pytest

from infrarsi.launch.command import shell_join
from infrarsi.adapters.torchtitan import (
    TorchtitanAdapter,
    TorchtitanLaunchError,
    classify_torchtitan_failure,
    emit_torchtitan,
    knob_space_for,
    parse_torchtitan,
    parse_torchtitan_file,
    parse_torchtitan_log,
    parse_torchtitan_output,
    violations,
)
from infrarsi.contract.model import Contract
from infrarsi.trial import TrialStatus

FIX = Path(__file__).parents[2] / "fixtures" / "torchtitan"

# fixture -> (world size given, style, expected world, fixed subset, setting subset)
EXPECT = {
    "llama3_8b.toml": (8, "toml", 8, dict(num_layers=32, num_query_groups=8, seq_length=8192, global_batch_size=8,
                                          train_iters=1000),
                       dict(tensor_parallel=1, data_parallel=8, micro_batch_size=1, recompute_granularity="selective",
                            torch_compile=False, bf16=True, fp8_recipe="none")),
    "llama3_70b.toml": (None, "toml", None, dict(num_layers=80, num_attention_heads=64, global_batch_size=64),
                        dict(tensor_parallel=8, data_parallel=8, sequence_parallel=True, recompute_granularity="full",
                             fp8_recipe="tensorwise", torch_compile=True)),
    "llama3_405b_launch.sh": (None, "toml", 128, dict(num_layers=126, seq_length=8192, global_batch_size=32,
                                                      train_iters=50),
                              dict(tensor_parallel=8, data_parallel=16, async_tp=True, recompute_granularity="full",
                                   nccl_proto="Simple", fp8_recipe="tensorwise")),
    "deepseek_v3_16b.toml": (8, "toml", 8, dict(num_experts=64, moe_router_topk=6, num_layers=27, global_batch_size=32),
                             dict(expert_parallel=8, data_parallel=8, micro_batch_size=4, torch_compile=True)),
    "llama3_8b_v03.sh": (None, "cli", 8, dict(num_layers=32, seq_length=8192, global_batch_size=16),
                         dict(micro_batch_size=2, torch_compile=True, recompute_granularity="full", data_parallel=8)),
    "llama3_70b_v03.cmd": (None, "cli", 32, dict(num_layers=80, global_batch_size=16, train_iters=100, seed="42"),
                           dict(tensor_parallel=8, pipeline_parallel=2, data_parallel=2, recompute_granularity="full",
                                sequence_parallel=True)),
    "deepseek_v3_16b_v03.cmd": (None, "cli", 16, dict(num_experts=64, global_batch_size=64, train_iters=200),
                                dict(expert_parallel=4, data_parallel=16, fsdp_reshard_after_forward="never",
                                     recompute_granularity="none", torch_compile=True)),
}


@pytest.fixture(scope="module")
def parsed():
    return {name: parse_torchtitan_file(FIX / name, world_size=EXPECT[name][0]) for name in EXPECT}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_parse_both_styles(parsed, name):
    _, style, world, fixed, setting = EXPECT[name]
    p = parsed[name]
    assert p.style == style and p.world_size == world
    assert {k: p.fixed.get(k) for k in fixed} == fixed
    assert {k: p.setting[k] for k in setting} == setting
    assert violations(p) == []


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_round_trip(parsed, name):
    p = parsed[name]
    world = p.world_size or 64
    s = dict(p.setting)
    tp = 4 if s["tensor_parallel"] != 4 else 2
    s.update(tensor_parallel=tp, sequence_parallel=True, micro_batch_size=1, recompute_granularity="none",
             torch_compile=True, async_tp=True, nccl_algo="Tree", cpu_offload=True,
             fsdp_reshard_after_forward="always")
    s["data_parallel"] = world // (tp * s["pipeline_parallel"] * s["context_parallel"])
    spec = emit_torchtitan(p, s, world_size=world)
    back = parse_torchtitan(shell_join(spec.argv, spec.env), base_dir=FIX)
    assert back.setting == s
    assert {k: v for k, v in back.fixed.items()} == {**p.fixed, "global_batch_size": p.fixed["global_batch_size"]
                                                    or back.fixed["global_batch_size"]}
    if p.launch is not None:
        # every argument the setting does not own survives as written, in order
        owned = {"parallelism.tensor_parallel_degree", "training.local_batch_size", "compile.enable",
                 "parallelism.enable_async_tensor_parallel", "compile.enable_async_tensor_parallel",
                 "training.enable_cpu_offload", "parallelism.fsdp_reshard_after_forward",
                 "activation_checkpoint.mode", "training.global_batch_size", "parallelism.enable_sequence_parallel"}
        kept = [o.tokens for o in p.overrides if o.key not in owned and o.subcommand is None]
        assert [o.tokens for o in back.overrides if o.key not in owned and o.subcommand is None] == kept
        assert back.launch.launcher == p.launch.launcher
    if p.style == "cli":
        assert spec.argv[-1] == "activation-checkpoint:none"  # the subcommand stays last


def test_emit_keeps_global_batch_and_spelling():
    p = parse_torchtitan_file(FIX / "llama3_8b_v03.sh")
    # local batch 2 x DP 8 = 16: halving the local batch must not halve the global batch
    spec = emit_torchtitan(p, {"micro_batch_size": 1})
    args = spec.argv
    assert args[args.index("--training.local-batch-size") + 1] == "1"  # the hyphen spelling is kept, in place
    assert args[args.index("--training.global_batch_size") + 1] == "16"
    pp = emit_torchtitan(p, {"pipeline_parallel": 2, "data_parallel": 4}).argv
    assert "--training.disable_cuda_graphs" in pp and pp.index("--training.disable_cuda_graphs") < len(pp) - 1
    assert emit_torchtitan(p, p.setting).argv == p.launch.argv()
    ds = parse_torchtitan_file(FIX / "deepseek_v3_16b_v03.cmd")
    off = emit_torchtitan(ds, {"torch_compile": False, "sequence_parallel": False, "tensor_parallel": 2,
                               "data_parallel": 8})
    assert "--compile.no-enable" in off.argv and "--parallelism.no-enable-sequence-parallel" in off.argv
    back = parse_torchtitan(shell_join(off.argv, off.env))
    assert back.setting["torch_compile"] is False and back.setting["sequence_parallel"] is False
    # the TOML file itself is never rewritten: a 0.2 change is an override after the job file
    toml = parse_torchtitan_file(FIX / "llama3_70b.toml", world_size=64)
    tp4 = emit_torchtitan(toml, {"tensor_parallel": 4}).argv  # DP left out: it follows the world size
    assert tp4[tp4.index("--parallelism.data_parallel_shard_degree") + 1] == "16"
    spec = emit_torchtitan(toml, {"fp8_recipe": "rowwise"})
    assert spec.argv[spec.argv.index("--model.converters") + 1] == "quantize.linear.float8"
    assert spec.argv[spec.argv.index("--quantize.linear.float8.recipe_name") + 1] == "rowwise"
    assert parse_torchtitan(shell_join(spec.argv), base_dir=FIX).setting["fp8_recipe"] == "rowwise"


def test_spaces_follow_the_version():
    v02 = knob_space_for(parse_torchtitan_file(FIX / "llama3_70b.toml"))
    bad = [v.constraint for v in v02.validate({**dict(v02.default()), "tensor_parallel": 8, "sequence_parallel": False,
                                               "data_parallel": 8})]
    assert "sp_follows_tp" in bad  # 0.2 applies SP whenever TP > 1
    v03 = knob_space_for(parse_torchtitan_file(FIX / "llama3_8b_v03.sh"))
    assert v03["fp8_recipe"].domain == ("none",)  # fp8 is decided in the config function's code
    assert "virtual_pipeline" not in v03
    # FSDP shards optimizer state: the same knob Megatron's --use-distributed-optimizer sets, tied to the shard degree
    assert "distributed_optimizer" in v03 and parse_torchtitan_file(FIX / "llama3_8b_v03.sh").setting["distributed_optimizer"]


def test_bad_input_names_the_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[parallelism]\ntensor_parallel_degree = "8"\n')
    with pytest.raises(TorchtitanLaunchError, match=r"parallelism\.tensor_parallel_degree = '8' is a string"):
        parse_torchtitan_file(bad)
    bad.write_text('[activation_checkpoint]\nmode = "memory_budget"\n')
    with pytest.raises(TorchtitanLaunchError, match="activation_checkpoint.mode 'memory_budget' has no catalog"):
        parse_torchtitan_file(bad)
    with pytest.raises(TorchtitanLaunchError, match=r"parallelism\.tensor_parallel_degree: 'two' is not an integer"):
        parse_torchtitan("torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b "
                         "--parallelism.tensor-parallel-degree two")
    with pytest.raises(TorchtitanLaunchError, match="does not exist"):
        parse_torchtitan("torchrun -m torchtitan.train --job.config_file nowhere.toml", base_dir=tmp_path)
    bad.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[float8]\nenable_fsdp_float8_all_gather = true\n')
    assert any("[float8] is not a torchtitan 0.2 table" in n for n in parse_torchtitan_file(bad).notes)
    odd = parse_torchtitan("torchrun --nproc_per_node=8 -m torchtitan.train --module llama3 --config llama3_8b "
                           "--parallelism.tensor_parallel_degree 3")
    assert "tensor parallel 3 does not divide 32 attention heads (32 % 3 = 2)" in violations(odd)


# Real line format (torchtitan metrics.py; colours and rank prefixes as torchrun --tee prints them).
LOG = "\n".join([
    "[rank0]:[titan] 2026-02-24 19:46:10,100 - root - INFO - Training starts at step 1",
    "[rank0]:[titan] 2026-02-24 19:46:12,508 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.25310  "
    "\x1b[38;2;180;60;0mgrad_norm:  4.5253  \x1b[38;2;54;234;195mmemory: 33.21GiB(34.95%)  \x1b[34mtps: 86  "
    "\x1b[36mtflops: 4.98  \x1b[35mmfu: 0.50%\x1b[39m",
    *[f"[rank0]:[titan] 2026-02-24 19:46:1{i},508 - root - INFO - step: {i:2}  loss: {9 - i / 10:8.5f}  grad_norm: "
      f"26.6250  memory: 66.91GiB(37.51%)  tps: {8000 + 10 * i:,}  tflops: 314.71  mfu: 13.99%" for i in range(2, 8)],
    "[rank1]:[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  7  loss:  8.30000  grad_norm: 26.6250  "
    "memory: 70.00GiB(39.00%)  tps: 8,070  tflops: 314.71  mfu: 13.99%",
    "[rank0]:[titan] 2026-02-24 19:46:18,000 - root - INFO - validate step:  7  loss:  8.3000  memory: 66.91GiB(37.51%)  tps: 20,000",
])


def test_step_lines_and_metrics():
    steps = parse_torchtitan_log(LOG)
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6, 7]
    assert steps[0].loss == pytest.approx(12.2531) and steps[0].memory_gib == 33.21 and steps[0].tps == 86
    run = parse_torchtitan_output(LOG, "", 0, warmup_steps=2, measured_steps=4, world_size=8, tokens_per_step=8 * 8192)
    assert run.status is TrialStatus.OK
    # tps is per device: step time = 65536 tokens / (tps x 8); median tps over steps 3..6 = 8045
    assert run.metrics.step_time_s == pytest.approx(8 * 8192 / (8045 * 8))
    assert run.metrics.mfu == pytest.approx(0.1399)
    assert run.metrics.peak_memory_bytes == pytest.approx(70.00 * 2**30)  # the highest any rank printed (rank 1)
    assert run.metrics.tokens_per_s == pytest.approx(8045 * 8)


@pytest.mark.parametrize("text, status", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has a total capacity of 79.11 GiB",
     TrialStatus.OOM),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     TrialStatus.CRASH),
    ("ValueError: Invalid field names in <class 'JobConfig'> data: {'float8'}", TrialStatus.INVALID),
    ("[rank0]:[titan] step: 12  loss:      nan  grad_norm:     nan  memory: 66.91GiB(37.51%)  tps: 8,000  "
     "tflops: 314.71  mfu: 13.99%", TrialStatus.NUMERICS_DRIFT),
])
def test_failures_are_classified(text, status):
    got = classify_torchtitan_failure(text)
    assert got is not None and got[0] is status and got[2]
    run = parse_torchtitan_output("", text, 1, warmup_steps=2, measured_steps=4, world_size=8, tokens_per_step=1)
    assert run.status is status and run.metrics.step_time_s is None


def test_adapter_on_a_contract():
    c = Contract.model_validate({
        "name": "llama3-8b", "workload": {"adapter": "torchtitan", "launch": str(FIX / "llama3_8b.toml")},
        "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80},
        "scope": {"knobs": {"tensor_parallel": [1, 2], "recompute_granularity": ["selective", "full"]}},
    })
    ad = TorchtitanAdapter()
    space = ad.knob_space(c)
    assert space.names == ["tensor_parallel", "recompute_granularity"]
    spec = ad.launch(c, {"tensor_parallel": 2, "recompute_granularity": "full", "data_parallel": 4})
    assert spec.argv[:3] == ["torchrun", "--nproc-per-node=8", "-m"] and spec.devices == 8
    back = parse_torchtitan(shell_join(spec.argv), base_dir=FIX)
    assert back.setting["tensor_parallel"] == 2 and back.setting["recompute_granularity"] == "full"
    assert back.fixed["global_batch_size"] == 8  # kept although DP went from 8 to 4
    run = ad.parse(c, LOG, "", 0)
    assert run.status is TrialStatus.OK
