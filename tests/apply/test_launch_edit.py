"""The tuned setting as a minimal edit of the user's launch file, read back by the project's own reader."""

import difflib
import shutil
from pathlib import Path

import pytest

from infrarsi.adapters import megatron as mg
from infrarsi.adapters import torchtitan as tt
from infrarsi.adapters.megatron import MegatronAdapter
from infrarsi.adapters.torchtitan import TorchtitanAdapter
from infrarsi.apply.launch_edit import EditError, edit_script, edit_toml

FIX = Path(__file__).parents[1] / "fixtures"


def _diff(a: str, b: str) -> list[str]:
    return [ln for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def _edit_megatron(name: str, change: dict) -> tuple[str, str, mg.MegatronLaunch]:
    path = FIX / "megatron" / name
    p = mg.parse_megatron_file(path)
    spec = mg.emit_megatron(p, {**p.setting, **change})
    n = len(p.launch.launcher) + len(p.launch.program)

    def read(t):
        q = mg.parse_megatron(t, path=str(path))
        return q.args, q.env, q.setting, q.fixed

    text = path.read_text()
    e = edit_script(text, read, target_args=spec.argv[n:], target_env=spec.env, launch_line=p.launch.line,
                    env_keys=MegatronAdapter().env_keys(), path=name)
    return text, e.text, mg.parse_megatron(e.text, path=str(path))


def test_variables_defaults_arrays_and_exports_are_edited_where_they_are_written():
    change = dict(tensor_parallel=4, data_parallel=2, overlap_param_gather=False, nccl_algo="Tree", manual_gc=False)
    old, new, back = _edit_megatron("llama3_8b_fp8.sh", change)
    assert _diff(old, new) == ["-export NCCL_ALGO=${NCCL_ALGO:-Ring}", "+export NCCL_ALGO=${NCCL_ALGO:-Tree}",
                               "-TP_SIZE=2", "+TP_SIZE=4", "-    --manual-gc", "-    --overlap-param-gather"]
    assert all(back.setting[k] == v for k, v in change.items() if k != "data_parallel")


def test_a_quoted_array_element_and_an_option_string_lose_only_the_flag():
    old, new, back = _edit_megatron("llama3_8b_fp8.sh", dict(fp8_recipe="none"))
    assert _diff(old, new) == ['-        "--fp8-format hybrid"', '-        "--fp8-amax-history-len 1024"',
                               '-        "--fp8-amax-compute-algo max"']
    old, new, back = _edit_megatron("deepseek_v2_lite.sh", dict(recompute_granularity="none", micro_batch_size=2))
    assert _diff(old, new) == ['-    ac_options="--recompute-activations"', '+    ac_options=""',
                               "-    --micro-batch-size 1 --global-batch-size 256 \\",
                               "+    --micro-batch-size 2 --global-batch-size 256 \\"]


def test_a_computed_value_is_replaced_at_the_flag_and_new_flags_go_before_the_redirection():
    old, new, back = _edit_megatron("gpt2_345m_idioms.sh", dict(tensor_parallel=1, sequence_parallel=False,
                                                                 data_parallel=4, manual_gc=True))
    d = _diff(old, new)
    assert '-    SP_FLAGS="--sequence-parallel"' in d and '+    SP_FLAGS=""' in d
    assert "+    --tensor-model-parallel-size 1 $SP_FLAGS \\" in d  # TP=$(( GPUS / 2 )) is left as it is
    assert d[-1] == '+    "${EXTRA[@]}" --fp16 --manual-gc 2>&1 | tee logs/train.log'
    assert back.setting["manual_gc"] and back.setting["tensor_parallel"] == 1


def _edit_torchtitan(name: str, world: int, change: dict):
    path = FIX / "torchtitan" / name
    p = tt.parse_torchtitan_file(path, world_size=world)
    spec = tt.emit_torchtitan(p, {**p.setting, **change}, world_size=world)
    n = len(p.launch.launcher) + len(p.launch.program)

    def read(t):
        q = tt.parse_torchtitan(t, path=str(path), base_dir=path.parent, world_size=world)
        return q.launch.args, q.env, q.setting, q.fixed

    text = path.read_text()
    e = edit_script(text, read, target_args=spec.argv[n:], target_env=spec.env, launch_line=p.launch.line or 1,
                    env_keys=TorchtitanAdapter().env_keys(), path=name, last=TorchtitanAdapter.last_word)
    return text, e.text


def test_torchtitan_overrides_go_before_user_arguments_and_the_ac_choice_stays_last():
    old, new = _edit_torchtitan("llama3_405b_launch.sh", 128, dict(tensor_parallel=4, data_parallel=32, micro_batch_size=1,
                                                                   nccl_proto="default"))
    assert _diff(old, new) == [
        "-export NCCL_PROTO=Simple",
        "-    --metrics.log_freq 1 --training.steps 50 --activation_checkpoint.mode full \"$@\"",
        "+    --metrics.log_freq 1 --training.steps 50 --activation_checkpoint.mode full "
        "--parallelism.tensor_parallel_degree 4 --training.local_batch_size 1 \"$@\""]
    old, new = _edit_torchtitan("llama3_70b_v03.cmd", 32, dict(pipeline_parallel=1, data_parallel=4,
                                                               recompute_granularity="selective"))
    assert new.split()[-1] == "activation-checkpoint:selective"
    assert "--parallelism.pipeline_parallel_degree 1" in new and "--debug.seed 42" in new


def test_a_toml_job_file_keeps_its_comments():
    text = (FIX / "torchtitan" / "llama3_8b.toml").read_text()
    e = edit_toml(text, {"activation_checkpoint.mode": "full", "parallelism.tensor_parallel_degree": 2,
                         "training.global_batch_size": 8})
    assert _diff(text, e.text) == ["+global_batch_size = 8", "-tensor_parallel_degree = 1", "+tensor_parallel_degree = 2",
                                   '-mode = "selective"  # ["none", "selective", "full"]',
                                   '+mode = "full"  # ["none", "selective", "full"]']


def test_an_edit_that_does_not_read_back_is_refused():
    path = FIX / "megatron" / "mixtral_8x7b.sh"
    p = mg.parse_megatron_file(path)
    n = len(p.launch.launcher) + len(p.launch.program)
    target = mg.emit_megatron(p, {**p.setting, "expert_parallel": 4}).argv[n:]

    def read(t):  # a reader that never sees the change (the launch comes from elsewhere)
        return p.args, p.env, p.setting, p.fixed

    with pytest.raises(EditError, match="--expert-model-parallel-size 8 -> 4"):
        edit_script(path.read_text(), read, target_args=target, target_env=p.env, launch_line=p.launch.line,
                    env_keys=set())


def _through_apply(path: Path, setting: dict, *, kind: str = "H100-80GB", devices: int = 64):
    """apply's in-place edit (edit_launch_file) of ``path`` for ``setting``, as `infrarsi apply` makes it."""
    from infrarsi.apply.launch_edit import edit_launch_file
    from infrarsi.contract.model import Contract

    c = Contract.model_validate({"name": path.stem, "workload": {"adapter": "megatron", "launch": str(path)},
                                 "hardware": {"kind": kind, "devices": devices, "memory_capacity_gib": 80}})
    ad = mg.MegatronAdapter()
    spec = ad.launch(c, setting)
    _, e = edit_launch_file(ad, c, setting)
    return e.text, mg.parse_megatron(e.text, path=str(path)), spec


def test_exports_and_flags_go_by_the_commands_place_after_lines_above_it_were_removed():
    # --recompute-activations stood alone on a line of the option string above the multi-line srun command: the
    # export went in at the command's old line, inside the continued command ("no ... pretrain_*.py command found")
    path = FIX / "megatron" / "llama2_70b_slurm.sh"
    new, back, spec = _through_apply(path, {"recompute_granularity": "none", "nccl_algo": "Tree", "manual_gc": True})
    lines = new.splitlines()
    assert lines[lines.index("export NCCL_ALGO=Tree") + 1].startswith("srun -l")
    assert back.setting["recompute_granularity"] == "none" and back.setting["manual_gc"]
    assert back.env["NCCL_ALGO"] == "Tree" and back.args == spec.argv[-len(back.args):]
    assert "--manual-gc 2>&1 | tee" in new  # before the redirection of the (moved) command


def test_a_change_that_reads_only_with_another_waits_for_it():
    # PP 4 -> 16 cannot be read while --num-layers-per-virtual-pipeline-stage 10 stays (80 / 16 layers per rank)
    new, back, _ = _through_apply(FIX / "megatron" / "llama2_70b_slurm.sh",
                                  {"tensor_parallel": 4, "pipeline_parallel": 16, "data_parallel": 1,
                                   "virtual_pipeline": 1})
    assert back.setting["pipeline_parallel"] == 16 and back.setting["virtual_pipeline"] == 1
    assert "PP=16" in new.splitlines()


def test_a_cpu_contracts_launch_is_edited_in_place():
    # a CPU trial runs torchrun as `python -m torch.distributed.run --standalone`: the user's torchrun line stays
    new, back, _ = _through_apply(Path(__file__).parents[2] / "contracts/megatron-cpu/train.sh",
                                  {"tensor_parallel": 1, "sequence_parallel": False, "data_parallel": 2},
                                  kind="cpu", devices=2)
    assert "torchrun --nproc-per-node ${NPROC} launchers/pretrain_gpt_cpu.py" in new
    assert back.setting["tensor_parallel"] == 1 and not back.setting["sequence_parallel"]


def test_an_edit_the_reader_cannot_read_back_is_a_one_line_refusal():
    path = FIX / "megatron" / "mixtral_8x7b.sh"
    p = mg.parse_megatron_file(path)
    n = len(p.launch.launcher) + len(p.launch.program)
    spec = mg.emit_megatron(p, {**p.setting, "nccl_algo": "Tree"})

    def read(t):  # the reader refuses the edited text (as a launch whose command the edit broke)
        if "NCCL_ALGO=Tree" in t:
            raise mg.MegatronLaunchError("no `torchrun/srun/python ... pretrain_*.py` command found")
        return p.args, p.env, p.setting, p.fixed

    with pytest.raises(EditError, match="cannot be read back") as e:
        edit_script(path.read_text(), read, target_args=spec.argv[n:], target_env=spec.env,
                    launch_line=p.launch.line, env_keys={"NCCL_ALGO"})
    assert "\n" not in str(e.value)


def test_the_adapters_edit_is_the_users_launch_never_the_trials_form():
    # a CPU trial runs torchrun as this interpreter's `-m torch.distributed.run` with OMP_NUM_THREADS: the edit
    # target is the user's program arguments and environment, with the knobs written in
    import sys

    from infrarsi.contract.model import Contract

    path = Path(__file__).parents[2] / "contracts/megatron-cpu/train.sh"
    c = Contract.model_validate({"name": "cpu", "workload": {"adapter": "megatron", "launch": str(path)},
                                 "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 80}})
    ad = mg.MegatronAdapter()
    setting = {"tensor_parallel": 1, "sequence_parallel": False, "data_parallel": 2}
    spec, target = ad.trial_form(c, ad.launch(c, setting), setting), ad.edit(c, setting)
    assert spec.argv[:3] == [sys.executable, "-m", "torch.distributed.run"] and spec.env["OMP_NUM_THREADS"] == "1"
    assert target.args == spec.argv[-len(target.args):] and "--tensor-model-parallel-size" in target.args
    assert target.args[target.args.index("--tensor-model-parallel-size") + 1] == "1"
    assert "OMP_NUM_THREADS" not in target.env and target.job_values is None


def test_a_torchtitan_setting_that_needs_the_projects_launcher_is_not_written_in_place(tmp_path):
    # a kernel patch runs through launchers/torchtitan_cpu.py: the user's launch cannot say it
    from infrarsi.contract.model import Contract

    shutil.copytree(FIX / "torchtitan", tmp_path / "tt")
    c = Contract.model_validate({"name": "tt", "workload": {"adapter": "torchtitan",
                                                            "launch": str(tmp_path / "tt" / "llama3_8b_v03.sh")},
                                 "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80}})
    ad = TorchtitanAdapter()
    assert ad.edit(c, {"micro_batch_size": 2}).args  # without the patch: the user's overrides
    with pytest.raises(tt.TorchtitanLaunchError, match="changes the launcher itself"):
        ad.edit(c, {"micro_batch_size": 2, "kernel_rmsnorm": "kernels/rmsnorm/cand.py"})
