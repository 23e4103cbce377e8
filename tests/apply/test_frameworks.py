"""`infrarsi apply` for Megatron and torchtitan: the tuned setting is written as a minimal edit of the user's
own launch file (the .sh with its variables and arrays, the TOML job file, the 0.3 command line), which the
project's reader then reads back as exactly the tuned launch; the profile gives infrarsi-launch the same
command."""

import json
import subprocess
from pathlib import Path

import pytest

from infrarsi.adapters.launcher import apply_profile, load_profile
from infrarsi.adapters.megatron import parse_megatron_file
from infrarsi.adapters.torchtitan import parse_torchtitan_file
from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import write_verified_run

FIX = Path(__file__).parents[1] / "fixtures"

# fixture, devices, scope, candidate, lines the diff must hold (+ added, - removed)
CASES = {
    "megatron-arrays": ("megatron/mixtral_8x7b.sh", 32,
                        {"expert_parallel": [2, 4, 8], "moe_token_dispatcher": ["alltoall", "flex"]},
                        {"expert_parallel": 4, "moe_token_dispatcher": "flex"},
                        ["-    --expert-model-parallel-size 8", "+    --expert-model-parallel-size 4",
                         "-    --moe-token-dispatcher-type alltoall", "+    --moe-token-dispatcher-type flex"]),
    "megatron-variables": ("megatron/llama2_70b_slurm.sh", 64,
                           {"tensor_parallel": [4, 8], "pipeline_parallel": [4, 8], "virtual_pipeline": [1, 2]},
                           {"tensor_parallel": 4, "pipeline_parallel": 8, "virtual_pipeline": 2},
                           ["-TP=8", "+TP=4", "-PP=4", "+PP=8", "-VP_LAYERS=10", "+VP_LAYERS=5"]),
    "torchtitan-toml": ("torchtitan/llama3_8b.toml", 8,
                        {"tensor_parallel": [1, 2], "recompute_granularity": ["selective", "full"]},
                        {"tensor_parallel": 2, "recompute_granularity": "full"},
                        ["-tensor_parallel_degree = 1", "+tensor_parallel_degree = 2",
                         '-mode = "selective"  # ["none", "selective", "full"]',
                         '+mode = "full"  # ["none", "selective", "full"]']),
    "torchtitan-0.3": ("torchtitan/llama3_8b_v03.sh", 8,
                       {"recompute_granularity": ["selective", "full"]}, {"recompute_granularity": "selective"},
                       ["-    activation-checkpoint:full", "+    activation-checkpoint:selective"]),
}


def _contract(name: str, fixture: str, devices: int, scope: dict) -> str:
    fw = fixture.split("/")[0]
    return (f'name = "{name}"\n[workload]\nadapter = "{fw}"\nlaunch = "{Path(fixture).name}"\n'
            f'[hardware]\nkind = "H100-80GB"\ndevices = {devices}\nmemory_capacity_gib = 80\n'
            "[scope.knobs]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in scope.items()))


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "torchtitan-0.3" else c
                                  for c in sorted(CASES)])  # 0.3's edit read back by 0.3: test_equivalence's round trips
def test_apply_edits_the_users_launch_in_place(case, repo, consoles):
    fixture, devices, scope, cand, lines = CASES[case]
    name = Path(fixture).name
    project = repo / "train"
    run_dir = write_verified_run(project, _contract(case, fixture, devices, scope), cand,
                                 files={name: (FIX / fixture).read_text()})
    (project / ".gitignore").write_text("run/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the team's launch")
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=True, console=con, err=err) == 0, errbuf.getvalue()
    shown = out.getvalue()
    assert f"--- a/train/{name}" in shown and f"+++ b/train/{name}" in shown
    section = shown.split(f"--- a/train/{name}", 1)[1].split("\n--- ", 1)[0]  # this file's part of the diff
    body = [ln for ln in section.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    for ln in lines:
        assert ln in body, (ln, shown)
    assert len(body) <= 2 * len(lines)  # nothing but the tuned values moved
    assert not (repo / "infrarsi-tuned" / case / "launch.sh").exists()
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    edited = project / name
    if fixture.startswith("megatron"):
        got = parse_megatron_file(edited).setting
    else:
        got = parse_torchtitan_file(edited, world_size=devices).setting
    assert all(got[k] == v for k, v in cand.items()), got
    assert (repo / "infrarsi-tuned" / case / "audit.json").is_file()
    fw, setting = load_profile(repo / "infrarsi-tuned" / case / "profile.json")
    assert fw == fixture.split("/")[0] and all(setting[k] == v for k, v in cand.items())
    log = _git(repo, "log", "-1", "--format=%B")
    assert case in log and "95% CI" in log and f"train/{name}" in log


def test_profile_gives_infrarsi_launch_the_same_command(repo, consoles, tmp_path):
    """A launch outside the repository is written as an edited copy; infrarsi-launch --profile on the user's
    original command gives the same program arguments."""
    fixture, devices, scope, cand, _ = CASES["megatron-arrays"]
    name = Path(fixture).name
    run_dir = write_verified_run(tmp_path / "elsewhere", _contract("outside", fixture, devices, scope), cand,
                                 files={name: (FIX / fixture).read_text()})
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    copy = repo / "infrarsi-tuned" / "outside" / name
    edited = parse_megatron_file(copy)
    fw, setting = load_profile(repo / "infrarsi-tuned" / "outside" / "profile.json")
    orig = parse_megatron_file(tmp_path / "elsewhere" / name)
    spec, problems = apply_profile(orig.argv(), fw, setting)
    assert problems == [] and spec.argv == edited.argv()


def test_an_entrypoint_workload_still_gets_launch_and_sbatch(repo, consoles, tmp_path):
    """No launch file to edit (a command in the contract): the tuned launch.sh and sbatch.sh are written."""
    toml = ('name = "entry"\n[workload]\nadapter = "megatron"\n'
            'entrypoint = "srun --container-image=nvcr.io/nvidia/pytorch:24.05-py3 --container-mounts=/data:/data '
            '--output=logs/train.log python pretrain_gpt.py"\n'
            '[workload.args]\nnum_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\nseq_length = 4096\n'
            'global_batch_size = 64\nmicro_batch_size = 1\n'
            '[hardware]\nkind = "H100-80GB"\ndevices = 8\nmemory_capacity_gib = 80\n'
            '[scope.knobs]\ntensor_parallel = [1, 2]\n')
    run_dir = write_verified_run(tmp_path / "p", toml, {"tensor_parallel": 2})
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    d = repo / "infrarsi-tuned" / "entry"
    sbatch = (d / "sbatch.sh").read_text()
    # the user's srun options survive into the batch job: it runs inside its container (class 8)
    for opt in ("--container-image=nvcr.io/nvidia/pytorch:24.05-py3", "--container-mounts=/data:/data",
                "--output=logs/train.log"):
        assert opt in sbatch, sbatch
    assert "#SBATCH --gpus-per-node=" in sbatch
    assert (d / "launch.sh").read_text().rstrip().endswith('"$@"')  # a command takes more arguments


@pytest.mark.parametrize("fixture, devices", [("torchtitan/llama3_8b_hsdp.toml", 8),
                                              pytest.param("torchtitan/deepseek_v3_16b_hsdp_v03.cmd", 16,
                                                           marks=pytest.mark.slow)])  # 0.3's round trip: test_equivalence
def test_apply_dry_run_of_an_hsdp_job_keeps_its_replicate_degree(fixture, devices, repo, consoles):
    name = Path(fixture).name
    project = repo / "train"
    run_dir = write_verified_run(project, _contract("hsdp", fixture, devices, {"recompute_granularity": ["selective", "full"]}),
                                 {"recompute_granularity": "full"}, files={name: (FIX / fixture).read_text()})
    (project / ".gitignore").write_text("run/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the team's HSDP launch")
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=True, console=con, err=err) == 0, errbuf.getvalue()
    shown = out.getvalue()
    added = [ln for ln in shown.splitlines() if ln[:1] == "+" and "replicate" in ln]
    assert all("data_parallel_replicate_degree 2" in ln for ln in added), shown  # kept where it is written
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    got = parse_torchtitan_file(project / name, world_size=devices)
    assert got.setting["data_parallel_replicate"] == 2 and got.setting["recompute_granularity"] == "full"
    assert got.values["parallelism.data_parallel_replicate_degree"] == 2


def test_infrarsi_launch_runs_the_torchtitan_profile_apply_writes(repo, consoles, tmp_path):
    """A torchtitan profile whose setting holds intra_op_threads (set through OMP_NUM_THREADS, not a torchtitan
    flag): infrarsi-launch runs it, with the thread count in the environment and the tuned degree in the command."""
    fixture = "torchtitan/llama3_8b.toml"
    scope = {"tensor_parallel": [1, 2], "intra_op_threads": [1, 4]}
    cand = {"tensor_parallel": 2, "intra_op_threads": 4}
    run_dir = write_verified_run(tmp_path / "elsewhere", _contract("threads", fixture, 8, scope), cand,
                                 files={"llama3_8b.toml": (FIX / fixture).read_text()})
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    fw, setting = load_profile(repo / "infrarsi-tuned" / "threads" / "profile.json")
    assert fw == "torchtitan" and setting["intra_op_threads"] == 4  # what apply writes...
    cmd = ["torchrun", "--nproc-per-node", "8", "-m", "torchtitan.train", "--job.config_file",
           str(tmp_path / "elsewhere" / "llama3_8b.toml")]
    spec, problems = apply_profile(cmd, fw, setting, cwd=tmp_path)  # ...the launcher runs
    assert problems == [] and spec.env["OMP_NUM_THREADS"] == "4"
    assert any("tensor_parallel_degree" in a and a.endswith("2") or a == "2" for a in spec.argv), spec.argv


def test_apply_edits_each_script_of_a_chain_where_the_knob_is_written(repo, consoles):
    """An sbatch file whose srun runs `bash scripts/train_gpt.sh` (tests/fixtures/chains/megatron_slurm): TP is
    exported in the sbatch file, the micro batch is a flag of train_gpt.sh; each changes in its own file, the commit
    holds both and the audit names both."""
    chain = FIX / "chains" / "megatron_slurm" / "scripts"
    project = repo / "train"
    toml = ('name = "chain"\n[workload]\nadapter = "megatron"\nlaunch = "scripts/sbatch_gpt.sh"\ncwd = "."\n'
            '[hardware]\nkind = "H100-80GB"\ndevices = 16\nmemory_capacity_gib = 80\n'
            '[scope.knobs]\ntensor_parallel = [4, 8]\nmicro_batch_size = [1, 2]\n')
    cand = {"tensor_parallel": 8, "micro_batch_size": 2}
    run_dir = write_verified_run(project, toml, cand, files={f"scripts/{p.name}": p.read_text() for p in chain.iterdir()})
    (project / ".gitignore").write_text("run/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "the team's launch")
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    changed = _git(repo, "diff", "--name-only", "HEAD~1", "HEAD").split()
    assert set(changed) == {"train/scripts/sbatch_gpt.sh", "train/scripts/train_gpt.sh", "infrarsi-tuned/chain/audit.json",
                            "infrarsi-tuned/chain/profile.json"}
    diff = _git(repo, "diff", "HEAD~1", "HEAD", "--", "train/scripts")
    assert "-export TP=4\n+export TP=8" in diff and "-    --micro-batch-size 1\n+    --micro-batch-size 2" in diff
    audit = json.loads((repo / "infrarsi-tuned" / "chain" / "audit.json").read_text())
    assert [f["path"] for f in audit["files"] if f["path"].startswith("train/")] == \
        ["train/scripts/sbatch_gpt.sh", "train/scripts/train_gpt.sh"]
    back = parse_megatron_file(project / "scripts" / "sbatch_gpt.sh", cwd=project)
    assert (back.setting["tensor_parallel"], back.setting["micro_batch_size"]) == (8, 2)
