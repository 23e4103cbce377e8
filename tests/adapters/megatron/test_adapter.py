"""Megatron-LM adapter on launches modelled on Megatron-LM's examples/: parse, emit, round trip,
bad input, megatron-core validation, logs, and the Adapter interface on a real contract."""

import sys
from pathlib import Path

import pytest

from infrarsi.launch.command import shell_join
from infrarsi.adapters.megatron import (
    KNOB_FLAGS,
    MegatronAdapter,
    MegatronLaunchError,
    emit_megatron,
    megatron_core_check,
    parse_megatron,
    parse_megatron_file,
    parse_megatron_output,
    split_items,
    violations,
)
from infrarsi.contract.model import Contract
from infrarsi.trial import LaunchSpec, TrialStatus

FIX = Path(__file__).parents[2] / "fixtures" / "megatron"

# fixture -> (world size, expected fixed subset, expected setting subset)
EXPECT = {
    "gpt3_175b.sh": (128, dict(num_layers=96, hidden_size=12288, num_attention_heads=96, num_query_groups=96,
                               seq_length=2048, global_batch_size=1536, fp16=True),
                     dict(tensor_parallel=8, pipeline_parallel=16, data_parallel=1, bf16=False,
                          recompute_granularity="none", attention_backend="auto")),
    "llama3_8b_fp8.sh": (8, dict(num_layers=32, num_query_groups=8, seq_length=8192, global_batch_size=128,
                                 vocab_size=128256),
                         dict(tensor_parallel=2, data_parallel=4, sequence_parallel=True, fp8_recipe="delayed",
                              bf16=True, distributed_optimizer=True, overlap_param_gather=True,
                              attention_backend="fused", num_workers=1, nccl_algo="Ring", manual_gc=True)),
    "llama2_70b_slurm.sh": (64, dict(num_layers=80, num_attention_heads=64, num_query_groups=8, seed=1234,
                                     data_path="0.5 /data/redpajama_a_text_document 0.5 /data/redpajama_b_text_document"),
                            dict(tensor_parallel=8, pipeline_parallel=4, virtual_pipeline=2, data_parallel=2,
                                 recompute_granularity="selective", nccl_min_nchannels=16)),
    "mixtral_8x7b.sh": (32, dict(num_experts=8, moe_router_topk=2, global_batch_size=256),
                        dict(expert_parallel=8, pipeline_parallel=4, data_parallel=8, moe_token_dispatcher="alltoall",
                             moe_grouped_gemm=True, recompute_granularity="full", recompute_method="uniform")),
    "deepseek_v2_lite.sh": (8, dict(num_layers=27, num_experts=64, moe_router_topk=6, multi_latent_attention=True,
                                    train_iters=1000),
                            dict(expert_parallel=8, data_parallel=8, recompute_granularity="selective",
                                 num_workers=8, bf16=True)),
    "gpt2_345m_idioms.sh": (4, dict(num_layers=24, global_batch_size=64, fp16=True),
                            dict(tensor_parallel=2, sequence_parallel=True, data_parallel=2, tp_comm_overlap=False)),
    "llama3_70b_cp.cmd": (32, dict(seq_length=16384, global_batch_size=64),
                          dict(tensor_parallel=8, context_parallel=2, pipeline_parallel=2, data_parallel=1,
                               nccl_algo="Tree", attention_backend="flash")),
}


@pytest.fixture(scope="module")
def parsed():
    return {name: parse_megatron_file(FIX / name) for name in EXPECT}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_parse_reads_fixed_args_and_setting(parsed, name):
    world, fixed, setting = EXPECT[name]
    p = parsed[name]
    assert p.world_size == world
    assert {k: p.fixed.get(k) for k in fixed} == fixed
    assert {k: p.setting[k] for k in setting} == setting


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_round_trip_keeps_fixed_setting_and_unrelated_flags(parsed, name):
    p = parsed[name]
    # the unchanged setting gives back the same command, token for token
    assert emit_megatron(p, p.setting).argv == p.argv()
    s = dict(p.setting)
    s.update(tensor_parallel=2 if p.fixed["num_attention_heads"] % 2 == 0 else 1, pipeline_parallel=1,
             virtual_pipeline=1, sequence_parallel=True, recompute_granularity="full", recompute_method="block",
             recompute_num_layers=2, overlap_param_gather=False, fp8_recipe="tensorwise", bf16=not p.fixed.get("fp16"),
             nccl_algo="NVLS", manual_gc=not s["manual_gc"], micro_batch_size=2)
    s["data_parallel"] = p.world_size // (s["tensor_parallel"] * s["context_parallel"])
    spec = emit_megatron(p, s)
    assert spec.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and spec.env["NCCL_ALGO"] == "NVLS"
    back = parse_megatron(shell_join(spec.argv, spec.env))
    if p.launch.nnodes is None or "srun" in p.launch.kinds:
        s["data_parallel"] = back.setting["data_parallel"]  # srun's node count came from #SBATCH lines
    assert back.fixed == p.fixed
    assert back.setting == s
    unrelated = [it.tokens for it in split_items(p.args) if it.flag not in KNOB_FLAGS]
    assert [it.tokens for it in split_items(back.args) if it.flag not in KNOB_FLAGS] == unrelated
    assert back.launch.launcher == p.launch.launcher and back.launch.program == p.launch.program


def test_emit_rewrites_in_place_and_switches_spellings():
    line = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --seq-length 4096 --global-batch-size 64 --tensor-model-parallel-size=2 "
            "--recompute-activations --fp8-format hybrid --fp8-param-gather --bf16 --my-plugin-flag x y")
    p = parse_megatron(line)
    assert p.setting["recompute_granularity"] == "selective" and p.setting["fp8_recipe"] == "delayed"
    spec = emit_megatron(p, {"tensor_parallel": 4, "data_parallel": 2, "recompute_granularity": "none", "fp8_recipe": "none"})
    args = spec.argv[4:]  # after torchrun --nproc-per-node 8 pretrain_gpt.py
    assert "--tensor-model-parallel-size=4" in args  # same form, same place
    assert args.index("--tensor-model-parallel-size=4") == p.args.index("--tensor-model-parallel-size=2")
    for gone in ("--recompute-activations", "--fp8-format", "--fp8-param-gather"):
        assert gone not in args
    assert args[-3:] == ["--my-plugin-flag", "x", "y"]  # an unknown flag is kept with its values
    # TP and CP 1: the launch does not force CUDA_DEVICE_MAX_CONNECTIONS
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in emit_megatron(p, {"tensor_parallel": 1, "data_parallel": 8}).env
    vp = emit_megatron(parse_megatron_file(FIX / "llama2_70b_slurm.sh"), {"virtual_pipeline": 4}).argv
    assert vp[vp.index("--num-layers-per-virtual-pipeline-stage") + 1] == "5"  # 80 / (pp 4 * vp 4)


def test_launcher_can_be_rebuilt_for_srun(parsed):
    spec = emit_megatron(parsed["mixtral_8x7b.sh"], parsed["mixtral_8x7b.sh"].setting, launcher="srun")
    assert spec.argv[:4] == ["srun", "--nodes=4", "--ntasks-per-node=8", "python"]
    assert (spec.nodes, spec.processes, spec.devices) == (4, 8, 32)


def test_bad_input_errors_name_the_flag_or_line(tmp_path):
    with pytest.raises(MegatronLaunchError, match=r"--tensor-model-parallel-size: 'eight' is not an integer"):
        parse_megatron("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --tensor-model-parallel-size eight")
    with pytest.raises(MegatronLaunchError, match=r"--num-layers: 'x32' is not an integer"):
        parse_megatron("torchrun pretrain_gpt.py --num-layers x32")
    with pytest.raises(MegatronLaunchError, match=r"--recompute-granularity: 'partial' is not one of full, selective"):
        parse_megatron("torchrun pretrain_gpt.py --recompute-granularity partial")
    script = tmp_path / "loop.sh"
    script.write_text("#!/bin/bash\nTP=2\n\nfor n in 1 2; do\n  echo $n\ndone\ntorchrun pretrain_gpt.py --num-layers 2\n")
    with pytest.raises(MegatronLaunchError, match=r"loop\.sh:4: `for` is not supported"):
        parse_megatron_file(script)
    script.write_text('X=1\nif grep -q foo bar; then\n  X=2\nfi\ntorchrun pretrain_gpt.py\n')
    with pytest.raises(MegatronLaunchError, match=r":2: cannot evaluate the condition `grep -q foo bar`"):
        parse_megatron_file(script)
    script.write_text('ARGS=(\n  --num-layers 2\n\ntorchrun pretrain_gpt.py ${ARGS[@]}\n')
    with pytest.raises(MegatronLaunchError, match=r":1: array opened with \( is never closed"):
        parse_megatron_file(script)
    with pytest.raises(MegatronLaunchError, match="no `torchrun/srun/python ... pretrain_\\*.py` command"):
        parse_megatron("echo hello")


def test_violations_show_numbers_and_megatron_core_agrees():
    p = parse_megatron("torchrun --nproc_per_node 8 --nnodes 3 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                       "--num-attention-heads 32 --seq-length 4096 --global-batch-size 96 --tensor-model-parallel-size 3 "
                       "--sequence-parallel --bf16")
    v = violations(p)
    assert p.setting["data_parallel"] == 8
    assert "tensor parallel 3 does not divide 32 attention heads (32 % 3 = 2)" in v
    assert any("num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)" in m for m in v)
    ok = parse_megatron_file(FIX / "llama3_8b_fp8.sh")
    assert violations(ok) == []
    assert megatron_core_check(ok.fixed, {**ok.setting, "recompute_granularity": "full", "recompute_method": None})


ITER = (" [2026-11-30 10:00:{s:02d}] iteration {i:8d}/{n:8d} | consumed samples: {c:12d} | elapsed time per "
        "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | learning rate: 1.500000E-04 | "
        "global batch size:   128 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |")


def test_parse_output_ok_and_oom():
    lines = [ITER.format(s=i, i=i, n=10, c=128 * i, ms=1000.0 + 10 * i, tf=400.0, loss=10.0 - i / 10) for i in range(1, 8)]
    lines.append("[Rank 0] (after 5 iterations) memory (MB) | allocated: 30000.5 | max allocated: 52000.1 | "
                 "reserved: 60000.0 | max reserved: 61000.0")
    run = parse_megatron_output("\n".join(lines), "", 0, warmup_steps=2, measured_steps=4,
                                tokens_per_step=128 * 8192, peak_flops=989e12)
    assert run.status is TrialStatus.OK
    assert run.metrics.step_time_s == pytest.approx(1.045)  # median of 1030, 1040, 1050, 1060 ms
    assert run.metrics.peak_memory_bytes == pytest.approx(61000.0 * 2**20)
    assert run.metrics.mfu == pytest.approx(400e12 / 989e12)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
           "79.10 GiB of which 1.02 GiB is free.")
    run = parse_megatron_output(lines[0], oom, 1, warmup_steps=2, measured_steps=4)
    assert run.status is TrialStatus.OOM and run.metrics.step_time_s is None and "CUDA out of memory" in run.evidence[0]
    run = parse_megatron_output("", "pretrain_gpt.py: error: unrecognized arguments: --bogus", 2,
                                warmup_steps=2, measured_steps=4)
    assert run.status is TrialStatus.INVALID


def test_adapter_on_a_contract():
    c = Contract.model_validate({
        "name": "mixtral", "workload": {"adapter": "megatron", "launch": str(FIX / "mixtral_8x7b.sh")},
        "hardware": {"kind": "H100-80GB", "devices": 32, "memory_capacity_gib": 80},
        "scope": {"knobs": {"expert_parallel": [2, 4, 8], "moe_token_dispatcher": ["alltoall", "flex"]}},
    })
    ad = MegatronAdapter()
    space = ad.knob_space(c)
    assert space.names == ["expert_parallel", "moe_token_dispatcher"]
    spec = ad.launch(c, {"expert_parallel": 4, "moe_token_dispatcher": "flex"})
    back = parse_megatron(shell_join(spec.argv, spec.env))
    assert back.setting["expert_parallel"] == 4 and back.setting["moe_token_dispatcher"] == "flex"
    assert spec.devices == 32 and spec.nodes == 4 and spec.processes == 8
    bad = Contract.model_validate({**c.model_dump(), "scope": {"knobs": {"torch_compile": [True]}}})
    with pytest.raises(ValueError, match="torch_compile"):
        ad.knob_space(bad)


def test_a_trials_checkpoints_and_tensorboard_go_into_its_own_directory(tmp_path):
    """--save and --tensorboard-dir (either spelling) point into RUN_DIR/trials/<n>/outputs, filled in at launch (the
    repository is read-only to a trial); --load stays what the launch says (it is read)."""
    from infrarsi.adapters.megatron.adapter import trial_outputs
    from infrarsi.trial import TRIAL_DIR, LaunchSpec

    c = Contract.model_validate({
        "name": "gpt3", "workload": {"adapter": "megatron", "launch": str(FIX / "gpt3_175b.sh"),
                                      "script_args": ["ckpt", "tb", "vocab.json", "merges.txt", "data_text_document"]},
        "hardware": {"kind": "H100-80GB", "devices": 128, "memory_capacity_gib": 80}})
    ad = MegatronAdapter()
    launch = ad.launch(c, {})
    assert launch.argv.count("ckpt") == 2  # the launch a person runs (apply writes it) keeps its paths
    argv = ad.trial_outputs(launch).argv
    assert argv[argv.index("--save") + 1] == f"{TRIAL_DIR}/outputs/checkpoints"
    assert argv[argv.index("--tensorboard-dir") + 1] == f"{TRIAL_DIR}/outputs/tensorboard"
    assert argv[argv.index("--load") + 1] == "ckpt"
    assert trial_outputs(["x", "--save=/r/ck", "--wandb-save-dir", "w", "--save-interval", "5"]) == \
        ["x", f"--save={TRIAL_DIR}/outputs/checkpoints", "--wandb-save-dir", f"{TRIAL_DIR}/outputs/wandb",
         "--save-interval", "5"]
    spec = LaunchSpec(argv=argv).for_trial(tmp_path / "run" / "trials" / "3")
    assert spec.argv[argv.index("--save") + 1] == str(tmp_path.resolve() / "run/trials/3/outputs/checkpoints")


def test_the_launch_is_the_users_form_and_the_runners_is_the_trial_form(tmp_path):
    """contracts/megatron-cpu.toml: ``launch`` is the launch a person runs (torchrun as train.sh writes it, no memory
    cap, no working directory of the trial's); the runner's launch of the same setting is the trial form (this
    interpreter's torch.distributed.run --standalone, OMP_NUM_THREADS=1, the contract's cap, the launch's folder)."""
    from infrarsi.adapters import contract_adapter
    from infrarsi.contract import load_contract
    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner

    path = Path(__file__).resolve().parents[3] / "contracts" / "megatron-cpu.toml"
    c = load_contract(path)
    ad = contract_adapter(c.workload.adapter, path)
    setting = ad.knob_space(c).complete(c.baseline).to_dict()
    user = ad.launch(c, setting)
    assert user.argv[0] == "torchrun" and "--standalone" not in user.argv
    assert user.memory_cap_bytes is None and "OMP_NUM_THREADS" not in user.env and user.cwd is None
    runner = Runner(RunRecord(tmp_path), LocalExecutor(LocalExecutor.Config()), ad, c)
    trial = runner._precheck(setting)  # the one place the runner makes a trial's launch
    assert isinstance(trial, LaunchSpec), trial
    assert trial.argv[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert trial.argv[4:] == ad.trial_outputs(user).argv[1:]  # torchrun's options, the program and its arguments
    assert trial.memory_cap_bytes == c.hardware.memory_capacity_bytes and trial.env["OMP_NUM_THREADS"] == "1"
    assert trial.cwd == str(path.parents[1])  # where train.sh is run from (the repository root: launch_cwd)
