"""Launches read through their layers (sbatch -> srun -> bash -> torchrun, containers, "$@"), and edited in place.

Each chain under tests/fixtures/chains/ is a small repository tree written the way teams write their launches. For
each: the knobs are read where they are set, the tuned launch is emitted by the adapter (with its framework's own
checks), apply's in-place edit changes the file where each knob is written and no other, and the edited tree reads
back to the tuned setting.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from infrarsi.adapters.megatron import MegatronAdapter
from infrarsi.adapters.workload import Workload
from infrarsi.apply.launch_edit import edit_launch_files
from infrarsi.contract.model import Contract

CHAINS = Path(__file__).parents[1] / "fixtures" / "chains"


def _tree(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(CHAINS / name, root)
    return root


def _contract(root: Path, launch: str, *, adapter: str = "megatron", devices: int, kind: str = "H100-80GB",
              **workload: Any) -> Contract:
    return Contract.model_validate({"name": root.name, "workload": {"adapter": adapter, "launch": str(root / launch),
                                                                     "cwd": str(root), **workload},
                                    "hardware": {"kind": kind, "devices": devices, "memory_capacity_gib": 80}})


def _apply(root: Path, contract: Contract, adapter, setting: dict) -> dict[str, int]:
    """The tuned launch for ``setting``, emitted by the adapter and written into ``root`` by apply's in-place edit;
    the lines changed per file (relative path), for the files that changed."""
    spec = adapter.launch(contract, setting)
    edits = edit_launch_files(adapter, contract, setting)
    assert edits is not None
    # the edited files compute the user's job, by the framework's own comparison (what apply checks before writing)
    others = {str(p): e.text for p, e in edits[1:]}
    assert Workload(contract, None, adapter).differences(setting, edits[0][1].text, others) == []
    changed = {}
    for path, e in edits:
        if e.changed_lines:
            path.write_text(e.text)
            changed[path.resolve().relative_to(root.resolve()).as_posix()] = e.changed_lines
    return changed


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_megatron_slurm_example_sbatch_srun_bash_torchrun(tmp_path):
    root = _tree("megatron_slurm", tmp_path)
    c = _contract(root, "scripts/sbatch_gpt.sh", devices=16)
    ad = MegatronAdapter()
    p = ad.parsed(c)
    # TP is exported in the sbatch file and used by train_gpt.sh; the model and PP are train_gpt.sh's
    assert p.setting["tensor_parallel"] == 4 and p.setting["pipeline_parallel"] == 2
    assert p.setting["nccl_algo"] == "Ring" and p.world_size == 16 and p.setting["data_parallel"] == 2
    assert p.fixed["num_layers"] == 96 and p.fixed["data_path"] == "/lustre/data/my-gpt3_00_text_document"
    assert p.launch.launcher[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert [h.line for h in p.chain.hops] == [26] and p.launch.line == 78
    before = _snapshot(root)
    tuned = {"tensor_parallel": 8, "data_parallel": 1, "micro_batch_size": 2, "nccl_algo": "Tree"}
    changed = _apply(root, c, ad, tuned)
    assert changed == {"scripts/sbatch_gpt.sh": 4, "scripts/train_gpt.sh": 2}
    after = _snapshot(root)
    assert "export TP=8" in after["scripts/sbatch_gpt.sh"] and "export NCCL_ALGO=Tree" in after["scripts/sbatch_gpt.sh"]
    assert "    --micro-batch-size 2" in after["scripts/train_gpt.sh"]
    assert "TP=${TP:-8}" in after["scripts/train_gpt.sh"]  # its default is not what the launch ran with: untouched
    assert {k for k in before if before[k] != after[k]} == set(changed)
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_nemo_launcher_sbatch_srun_pyxis_sh_c(tmp_path):
    root = _tree("nemo_launcher", tmp_path)
    c = _contract(root, "results/gpt3_5b/nemo-megatron-gpt3_5b_submission.sh", devices=16)
    ad = MegatronAdapter()
    p = ad.parsed(c)
    # 2 nodes x 8 tasks (the #SBATCH lines), python per task, the flags inside srun's `sh -c "..."`
    assert p.world_size == 16 and p.setting["tensor_parallel"] == 2 and p.setting["data_parallel"] == 8
    assert p.setting["micro_batch_size"] == 2 and p.setting["nccl_proto"] == "Simple"
    assert "--container-image" in p.launch.launcher and "--no-container-mount-home" in p.launch.launcher
    assert p.launch.launcher[-2:] == ["python3", "-u"] and p.launch.line == 25
    tuned = {"micro_batch_size": 4, "nccl_proto": "default", "overlap_param_gather": True}
    changed = _apply(root, c, ad, tuned)
    assert list(changed) == ["results/gpt3_5b/nemo-megatron-gpt3_5b_submission.sh"]
    text = (root / "results/gpt3_5b/nemo-megatron-gpt3_5b_submission.sh").read_text()
    assert "NCCL_PROTO" not in text and "--micro-batch-size 4" in text
    assert text.rstrip().endswith('--eval-iters 32 --overlap-param-gather"')  # inside the sh -c string
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_pyxis_sbatch_with_a_sourced_cluster_file(tmp_path):
    root = _tree("pyxis_sbatch", tmp_path)
    c = _contract(root, "scripts/llama3_8b.sbatch", devices=32)
    ad = MegatronAdapter()
    p = ad.parsed(c)
    assert p.world_size == 32 and p.setting["tensor_parallel"] == 2 and p.setting["data_parallel"] == 16
    assert p.setting["nccl_min_nchannels"] == 4  # exported by the sourced cluster_env.sh
    assert p.setting["micro_batch_size"] == 1 and p.setting["recompute_granularity"] == "selective"
    assert p.launch.launcher[:2] == ["srun", "--mpi=pmix"] and "--container-workdir=/workspace/repo" in p.launch.launcher
    before = _snapshot(root)
    tuned = {"tensor_parallel": 4, "data_parallel": 8, "micro_batch_size": 2, "nccl_min_nchannels": 8,
             "recompute_granularity": "none"}
    changed = _apply(root, c, ad, tuned)
    assert changed == {"scripts/cluster_env.sh": 2, "scripts/llama3_8b.sbatch": 2, "scripts/pretrain_llama3_8b.sh": 3}
    after = _snapshot(root)
    assert "export NCCL_MIN_NCHANNELS=8" in after["scripts/cluster_env.sh"]
    assert "export MICRO_BATCH=2" in after["scripts/llama3_8b.sbatch"]
    assert "TP=4" in after["scripts/pretrain_llama3_8b.sh"].splitlines()
    assert "--recompute-activations" not in after["scripts/pretrain_llama3_8b.sh"]
    assert {k for k in before if before[k] != after[k]} == set(changed)
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_apptainer_sbatch_srun_apptainer_exec_bash(tmp_path):
    root = _tree("apptainer_sbatch", tmp_path)
    c = _contract(root, "scripts/train_mixtral.sbatch", devices=32)
    ad = MegatronAdapter()
    p = ad.parsed(c)
    # srun -N 4 (one task per node) -> apptainer exec ... IMAGE -> bash run_mixtral.sh -> torchrun 8 per node
    assert p.world_size == 32 and p.setting["pipeline_parallel"] == 4 and p.setting["expert_parallel"] == 8
    assert p.setting["nccl_algo"] == "Tree" and p.setting["moe_token_dispatcher"] == "alltoall"
    assert p.launch.kinds == ["srun", "container", "torchrun"]
    assert p.launch.launcher[1:3] == ["apptainer", "exec"] and "/lustre/images/megatron-lm_25.01.sif" in p.launch.launcher
    tuned = {"pipeline_parallel": 2, "data_parallel": 16, "nccl_algo": "Ring", "moe_token_dispatcher": "allgather"}
    changed = _apply(root, c, ad, tuned)
    assert changed == {"scripts/run_mixtral.sh": 4, "scripts/train_mixtral.sbatch": 2}
    assert "PP=2" in (root / "scripts/run_mixtral.sh").read_text().splitlines()
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_torchtitan_run_train_sh_through_the_teams_wrapper(tmp_path):
    from infrarsi.adapters.torchtitan import TorchtitanAdapter

    root = _tree("torchtitan_run_train", tmp_path)
    c = _contract(root, "scripts/train_llama3_8b.sh", adapter="torchtitan", devices=8)
    ad = TorchtitanAdapter()
    p = ad.parsed(c)
    # the job file's values under the wrapper's overrides, which reach torchrun through run_train.sh's "$@"
    assert p.world_size == 8 and p.setting["tensor_parallel"] == 2 and p.setting["micro_batch_size"] == 2
    assert p.setting["nccl_proto"] == "Simple" and p.fixed["train_iters"] == 200
    assert p.toml_path == "./torchtitan/models/llama3/train_configs/llama3_8b.toml"
    before = _snapshot(root)
    tuned = {"tensor_parallel": 4, "data_parallel": 2, "micro_batch_size": 1, "nccl_proto": "default",
             "recompute_granularity": "full"}
    changed = _apply(root, c, ad, tuned)
    assert list(changed) == ["scripts/train_llama3_8b.sh"]  # run_train.sh and the job file untouched
    after = _snapshot(root)
    assert "--activation_checkpoint.mode full \"$@\"" in after["scripts/train_llama3_8b.sh"]  # with the wrapper's own
    assert {k for k in before if before[k] != after[k]} == set(changed)
    back = TorchtitanAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_a_wrapper_passing_its_arguments_on(tmp_path):
    root = _tree("args_wrapper", tmp_path)
    c = _contract(root, "scripts/pretrain_llama2_7b.sh", devices=8, script_args=["--eval-iters", "0"])
    ad = MegatronAdapter()
    p = ad.parsed(c)
    # exec bash megatron_run.sh 8 FLAGS "$@" -> NPROC=$1; shift; source the model; torchrun ... "$@"
    assert p.world_size == 8 and p.setting["tensor_parallel"] == 2 and p.setting["micro_batch_size"] == 2
    assert p.setting["nccl_min_nchannels"] == 16 and p.fixed["num_layers"] == 32
    assert p.args[-2:] == ["--eval-iters", "0"]  # the contract's script_args, passed on twice
    before = _snapshot(root)
    tuned = {"tensor_parallel": 1, "data_parallel": 8, "micro_batch_size": 4, "overlap_param_gather": True,
             "nccl_min_nchannels": 32}
    changed = _apply(root, c, ad, tuned)
    assert list(changed) == ["scripts/pretrain_llama2_7b.sh"]  # the shared runner and the model file untouched
    after = _snapshot(root)
    assert '    --overlap-grad-reduce \\\n    --overlap-param-gather "$@"' in after["scripts/pretrain_llama2_7b.sh"]
    assert {k for k in before if before[k] != after[k]} == set(changed)
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


@pytest.fixture
def knobs_cli():
    from typer.testing import CliRunner

    from infrarsi import cli as infrarsi_cli

    if not any(c.name == "knobs" for c in infrarsi_cli.app.registered_commands):
        infrarsi_cli._register_tools()

    def invoke(*args: str):
        return CliRunner().invoke(infrarsi_cli.app, ["knobs", *args])

    return invoke


def test_knobs_prints_the_chain_it_followed(knobs_cli, monkeypatch):
    monkeypatch.chdir(CHAINS / "megatron_slurm")  # as docs/launches.md runs it: from the folder the job is submitted
    r = knobs_cli("scripts/sbatch_gpt.sh")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:2] == ["scripts/sbatch_gpt.sh: megatron, world size 16",
                         "read through: scripts/sbatch_gpt.sh:26 (srun bash scripts/train_gpt.sh) -> "
                         "scripts/train_gpt.sh:78 -> pretrain_gpt.py"]
    assert "no violations" in r.stdout
    r = knobs_cli("scripts/sbatch_gpt.sh", "--json", "--no-framework-check")
    d = json.loads(r.stdout)
    assert d["setting"]["tensor_parallel"] == 4 and d["chain"].endswith("-> pretrain_gpt.py")


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


_TORCHRUN = "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 " \
            "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 "


@pytest.mark.parametrize("files, message", [
    ({"sbatch.sh": "#!/bin/bash\n#SBATCH -N 1\n\nsrun bash scripts/train.sh\n"},
     "no launch found: expected a Megatron-LM command (torchrun/srun/python ... pretrain_gpt.py) or a torchtitan one "
     "(-m torchtitan.train, run_train.sh, or a .toml job file) (sbatch.sh:4: bash scripts/train.sh is not read: no "
     "such file from {root} or the script's folder; run infrarsi from the folder the job is submitted from "
     "(workload.cwd))"),
    ({"sbatch.sh": "#!/bin/bash\n#SBATCH -N 1\n\nsrun bash $(git rev-parse --show-toplevel)/train.sh\n"},
     "(sbatch.sh:4: bash $(git rev-parse --show-toplevel)/train.sh is not read: its name comes from a command that is "
     "not run; write the script's path)"),
    ({"sbatch.sh": "srun bash train.sh\n", "train.sh": "#!/bin/bash\nTP=2\nfor n in 1 2; do echo $n; done\n" + _TORCHRUN},
     "train.sh:3: `for` is not supported by the launch-script reader; write the launch without loops, case or "
     "functions"),
    ({"sbatch.sh": "srun bash train.sh\n", "train.sh": "#!/bin/bash\nrun() {\n  " + _TORCHRUN + "\n}\nrun\n"},
     "train.sh:2: function definitions are not supported by the launch-script reader; write the launch without "
     "functions"),
    ({"sbatch.sh": "srun bash loop.sh\n", "loop.sh": "#!/bin/bash\nbash loop.sh\n"},
     "more than 8 scripts deep (does {root}/loop.sh run itself?); launch the training command directly"),
])
def test_refusals_are_one_line_and_name_the_file(files, message, tmp_path, monkeypatch, knobs_cli):
    # the messages docs/launches.md lists
    _write(tmp_path, files)
    monkeypatch.chdir(tmp_path)
    r = knobs_cli("sbatch.sh", "--no-framework-check")
    assert r.exit_code == 1
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert message.format(root=tmp_path) in err


def test_container_runners_pass_the_environment_the_way_they_do(tmp_path):
    from infrarsi.adapters.megatron import parse_megatron_file

    train = "#!/bin/bash\n" + _TORCHRUN + "--tensor-model-parallel-size ${TP:-1}\n"
    _write(tmp_path, {"train.sh": train, "env.sh": "export TP=2\nexport NCCL_ALGO=Ring\n"})
    cases = {  # the wrapper line -> (TP the training sees, NCCL_ALGO it sees, the launcher kept)
        "srun apptainer exec --nv img.sif bash train.sh": (2, "Ring", ["srun", "apptainer", "exec", "--nv", "img.sif"]),
        "srun apptainer exec --cleanenv --env TP=4 img.sif bash train.sh": (4, "default", None),
        "singularity run -B /data:/data --cleanenv img.sif bash train.sh": (1, "default", None),
        "docker run --rm -it --gpus all -e TP -v /data:/data nvcr.io/nvidia/pytorch:25.01-py3 bash train.sh":
            (2, "default", ["docker", "run", "--rm", "-it", "--gpus", "all", "-e", "TP", "-v", "/data:/data",
                            "nvcr.io/nvidia/pytorch:25.01-py3"]),
        "podman run --env NCCL_ALGO=Tree img bash train.sh": (1, "Tree", None),
        "enroot start --rw --mount /data:/data pytorch bash train.sh": (2, "Ring", None),
        "env TP=8 NCCL_ALGO=Tree bash train.sh": (8, "Tree", ["torchrun"]),
    }
    cases.update({  # the runner in front of the training command itself
        "docker run --rm --gpus all -e NCCL_ALGO=Ring -v $PWD:/ws IMAGE " + _TORCHRUN: (1, "Ring", ["docker", "run"]),
        "enroot start --mount /data:/data pytorch " + _TORCHRUN: (1, "Ring", ["enroot", "start"]),
        "srun apptainer exec --cleanenv img.sif " + _TORCHRUN: (1, "default", ["srun", "apptainer", "exec"]),
    })
    for wrapper, (tp, algo, launcher) in cases.items():
        (tmp_path / "top.sh").write_text(f"#!/bin/bash\nsource env.sh\n{wrapper}\n")
        p = parse_megatron_file(tmp_path / "top.sh", cwd=tmp_path)
        assert (p.setting["tensor_parallel"], p.setting["nccl_algo"]) == (tp, algo), wrapper
        if launcher is not None:
            assert p.launch.launcher[:len(launcher)] == launcher, wrapper


def test_a_positional_argument_is_edited_in_the_command_that_passes_it(tmp_path):
    # `srun bash train.sh $TP_SIZE 2`: TP is the script's $1 (its variable set in the sbatch file), PP its $2
    train = ("#!/bin/bash\nTP=$1\nPP=${2}\n" + _TORCHRUN +
             "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n")
    _write(tmp_path, {"train.sh": train,
                      "job.sbatch": "#!/bin/bash\n#SBATCH -N 1\nTP_SIZE=2\nsrun bash train.sh $TP_SIZE 2\n"})
    c = _contract(tmp_path, "job.sbatch", devices=8)
    ad = MegatronAdapter()
    p = ad.parsed(c)
    assert (p.setting["tensor_parallel"], p.setting["pipeline_parallel"]) == (2, 2)
    tuned = {"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 8}
    changed = _apply(tmp_path, c, ad, tuned)
    assert changed == {"job.sbatch": 4}
    assert (tmp_path / "job.sbatch").read_text().splitlines()[2:] == ["TP_SIZE=1", "srun bash train.sh $TP_SIZE 1"]
    assert (tmp_path / "train.sh").read_text() == train
    back = MegatronAdapter().parsed(c)
    assert {k: back.setting[k] for k in tuned} == tuned


def test_a_contract_draft_reads_the_chain_too():
    # `infrarsi init --from-request ... --launch scripts/sbatch_gpt.sh`: the adapter and the workload come from the
    # training command the chain reaches, not from the srun line that runs bash
    from infrarsi.stages.draft import parse_launch

    mg = parse_launch(CHAINS / "megatron_slurm" / "scripts" / "sbatch_gpt.sh")
    assert (mg.adapter, mg.program, mg.world_size) == ("megatron", "pretrain_gpt.py", 16)
    assert mg.setting["tensor_parallel"] == 4 and mg.fixed["num_layers"] == 96
    tt = parse_launch(CHAINS / "torchtitan_run_train" / "scripts" / "train_llama3_8b.sh")
    assert (tt.adapter, tt.program, tt.world_size) == ("torchtitan", "-m torchtitan.train", 8)
    assert tt.setting["tensor_parallel"] == 2


def test_a_variable_set_in_front_of_a_command_is_edited_there(tmp_path):
    # `srun env NCCL_ALGO=Ring bash train.sh`, a container runner's `--env`: the value is changed where it is written
    _write(tmp_path, {"train.sh": "#!/bin/bash\n" + _TORCHRUN + "\n"})
    for line, edited in [("srun env NCCL_ALGO=Ring bash train.sh", "srun env NCCL_ALGO=Tree bash train.sh"),
                         ("NCCL_ALGO=Ring bash train.sh", "NCCL_ALGO=Tree bash train.sh"),
                         ("srun apptainer exec --cleanenv --env PYTHONPATH=/w,NCCL_ALGO=Ring img.sif bash train.sh",
                          "srun apptainer exec --cleanenv --env PYTHONPATH=/w,NCCL_ALGO=Tree img.sif bash train.sh")]:
        (tmp_path / "job.sbatch").write_text(f"#!/bin/bash\n#SBATCH -N 1\n{line}\n")
        c = _contract(tmp_path, "job.sbatch", devices=8)
        ad = MegatronAdapter()
        assert ad.parsed(c).setting["nccl_algo"] == "Ring", line
        assert _apply(tmp_path, c, ad, {"nccl_algo": "Tree"}) == {"job.sbatch": 2}, line
        assert (tmp_path / "job.sbatch").read_text().splitlines()[-1] == edited
        assert MegatronAdapter().parsed(c).setting["nccl_algo"] == "Tree"


def test_a_flag_the_wrapper_writes_and_its_caller_passes_through_is_edited_where_it_is_read(tmp_path):
    # train.sh writes --micro-batch-size 1 and passes its arguments on ("$@"); the job gives --micro-batch-size 4 through
    # them, the value Megatron reads (the last): that one is changed, train.sh's own stays as the user wrote it
    train = "#!/bin/bash\n" + _TORCHRUN + '--tensor-model-parallel-size 2 "$@"\n'
    _write(tmp_path, {"train.sh": train,
                      "job.sbatch": "#!/bin/bash\n#SBATCH -N 1\nsrun bash train.sh --micro-batch-size 4\n"})
    c = _contract(tmp_path, "job.sbatch", devices=8)
    ad = MegatronAdapter()
    assert ad.parsed(c).setting["micro_batch_size"] == 4
    assert _apply(tmp_path, c, ad, {"micro_batch_size": 2, "tensor_parallel": 4}) == {"job.sbatch": 2, "train.sh": 3}
    assert (tmp_path / "job.sbatch").read_text().splitlines()[-1] == "srun bash train.sh --micro-batch-size 2"
    # TP > 1 brings Megatron's CUDA_DEVICE_MAX_CONNECTIONS=1, exported above the launch
    assert (tmp_path / "train.sh").read_text() == train.replace("--tensor-model-parallel-size 2", "--tensor-model-"
                                                                "parallel-size 4").replace(
        "torchrun", "export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun")
    back = MegatronAdapter().parsed(c)
    assert (back.setting["micro_batch_size"], back.setting["tensor_parallel"]) == (2, 4)


def test_the_same_flag_in_a_comment_or_an_echo_line_is_left_as_it_is(tmp_path):
    # the launch is edited at the words the reader read; the same text in a comment, in an echo line before and after
    # the launch, and in the job's own comment is no launch
    echo = 'echo "tensor parallel: --tensor-model-parallel-size 2 --overlap-grad-reduce --micro-batch-size 1"'
    train = ("#!/bin/bash\n# --tensor-model-parallel-size 2 --overlap-grad-reduce (from the README)\n" + echo + "\n"
             + _TORCHRUN + "--tensor-model-parallel-size 2 --overlap-grad-reduce\n" + echo + "\n")
    _write(tmp_path, {"train.sh": train, "job.sbatch": "#!/bin/bash\n#SBATCH -N 1\n# bash train.sh "
                      "--micro-batch-size 1\nsrun bash train.sh\n"})
    c = _contract(tmp_path, "job.sbatch", devices=8)
    ad = MegatronAdapter()
    assert _apply(tmp_path, c, ad, {"tensor_parallel": 4, "overlap_grad_reduce": False, "micro_batch_size": 2}) \
        == {"train.sh": 3}
    lines = (tmp_path / "train.sh").read_text().splitlines()
    assert lines[:3] == train.splitlines()[:3] and lines[5] == echo
    assert lines[3:5] == ["export CUDA_DEVICE_MAX_CONNECTIONS=1",
                          _TORCHRUN.replace("--micro-batch-size 1", "--micro-batch-size 2") + "--tensor-model-parallel-size 4"]
    back = MegatronAdapter().parsed(c)
    assert (back.setting["tensor_parallel"], back.setting["overlap_grad_reduce"]) == (4, False)


def test_the_benchmark_reads_every_chain_right():
    # scripts/bench_chains.py, whose table BENCHMARKS.md shows: one run per chain, every setting as the scripts state
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(CHAINS.parents[2] / "scripts" / "bench_chains.py"), "--repeats", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ") and "`" in ln]
    assert len(rows) == 7 and all("| yes |" in ln for ln in rows), r.stdout
    assert [ln.split(" | ")[2] for ln in rows] == ["2"] * 6 + ["0"]  # the layers followed


def test_torchtitan_a_knob_exported_by_the_wrapper_is_edited_there(tmp_path):
    # export TP=2 in the team's wrapper, `--parallelism.tensor_parallel_degree ${TP}` in the script it runs: the
    # export changes (the variable follows its knob in torchtitan's own comparison), the script does not
    from infrarsi.adapters.torchtitan import TorchtitanAdapter

    root = _tree("torchtitan_run_train", tmp_path)
    _write(root, {"scripts/train_llama3_8b.sh": "#!/bin/bash\nexport TP=2\nCONFIG_FILE=./torchtitan/models/llama3/"
                  "train_configs/llama3_8b.toml NGPU=8 bash scripts/tp_run.sh --training.steps 200\n",
                  "scripts/tp_run.sh": "#!/bin/bash\nbash ./run_train.sh --parallelism.tensor_parallel_degree ${TP} \"$@\"\n"})
    c = _contract(root, "scripts/train_llama3_8b.sh", adapter="torchtitan", devices=8)
    ad = TorchtitanAdapter()
    assert ad.parsed(c).setting["tensor_parallel"] == 2 and ad.parsed(c).knob_vars == {"TP": ("tensor_parallel",)}
    changed = _apply(root, c, ad, {"tensor_parallel": 4, "data_parallel": 2})
    # the global batch the job keeps is a new flag: with the arguments the calling script gives run_train.sh
    assert changed == {"scripts/train_llama3_8b.sh": 2, "scripts/tp_run.sh": 2}
    assert "export TP=4" in (root / "scripts/train_llama3_8b.sh").read_text()
    assert "--parallelism.tensor_parallel_degree ${TP} --training.global_batch_size" in \
        (root / "scripts/tp_run.sh").read_text()
    assert TorchtitanAdapter().parsed(c).setting["tensor_parallel"] == 4
