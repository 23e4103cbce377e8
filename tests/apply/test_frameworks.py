"""`infrarsi apply` for Megatron and torchtitan: the tuned launch comes from the adapters' emit
functions, and the profile it writes gives infrarsi-launch the same command."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from infrarsi.adapters.launcher import apply_profile, load_profile
from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import write_verified_run

FIX = Path(__file__).parents[1] / "fixtures"

CASES = {
    "megatron": ("megatron/mixtral_8x7b.sh", 32, {"expert_parallel": [2, 4, 8], "moe_token_dispatcher": ["alltoall", "flex"]},
                 {"expert_parallel": 4, "moe_token_dispatcher": "flex"},
                 ["--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "flex"]),
    "torchtitan": ("torchtitan/llama3_8b.toml", 8, {"tensor_parallel": [1, 2], "recompute_granularity": ["selective", "full"]},
                   {"tensor_parallel": 2, "recompute_granularity": "full"},
                   ["--parallelism.tensor_parallel_degree", "2"]),
}


@pytest.mark.parametrize("framework", sorted(CASES))
def test_apply_emits_the_framework_launch(framework, repo, consoles, tmp_path):
    fixture, devices, scope, cand, flags = CASES[framework]
    launch = Path(fixture).name
    toml = (f'name = "{framework}-tuned"\n[workload]\nadapter = "{framework}"\nlaunch = "{launch}"\n'
            f'[hardware]\nkind = "H100-80GB"\ndevices = {devices}\nmemory_capacity_gib = 80\n'
            f"[scope.knobs]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in scope.items()))
    run_dir = write_verified_run(tmp_path / "project", toml, cand, files={launch: (FIX / fixture).read_text()})
    con, err, out, errbuf = consoles
    assert stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err) == 0, errbuf.getvalue()
    d = repo / "infrarsi-tuned" / f"{framework}-tuned"
    line = next(ln for ln in (d / "launch.sh").read_text().splitlines() if ln.startswith("exec "))
    argv = shlex.split(line)[1:-1]
    text = " ".join(argv)
    for a, b in zip(flags[::2], flags[1::2]):
        assert f"{a} {b}" in text or f"{a}={b}" in text, (a, b, text)
    sbatch = (d / "sbatch.sh").read_text()
    assert "#SBATCH --gpus-per-node=" in sbatch
    fw, setting = load_profile(d / "profile.json")
    assert fw == framework and all(setting[k] == v for k, v in cand.items())
    if framework == "megatron":  # infrarsi-launch --profile on the user's original command: the same launch
        from infrarsi.adapters.megatron import parse_megatron_file

        orig = parse_megatron_file(tmp_path / "project" / launch)
        spec, problems = apply_profile(orig.argv(), fw, setting)
        assert problems == [] and spec.argv == argv
        assert "srun" in sbatch
    log = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%B"], capture_output=True, text=True).stdout
    assert f"{framework}-tuned" in log and "95% CI" in log
