"""infrarsi-launch: a promoted profile applied to a real command, run as a real process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.adapters.launcher import ProfileError, apply_profile, load_profile

ROOT = Path(__file__).parents[2]
LAUNCH = ROOT / "launchers" / "infrarsi-launch"

# A stand-in pretrain_gpt.py that prints what it was started with.
ECHO = "import json, os, sys\nprint(json.dumps({'argv': sys.argv[1:], 'algo': os.environ.get('NCCL_ALGO')}))\n"
ARGS = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "4096",
        "--global-batch-size", "64", "--bf16", "--custom-flag", "keep", "me"]


def test_apply_profile_megatron_and_refusal():
    cmd = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *ARGS]
    spec, problems = apply_profile(cmd, "megatron", {"tensor_parallel": 2, "sequence_parallel": True})
    assert problems == []
    assert spec.argv[:4] == cmd[:4] and spec.argv[-6:] == ["--custom-flag", "keep", "me",
                                                            "--tensor-model-parallel-size", "2", "--sequence-parallel"]
    _, problems = apply_profile(cmd, None, {"pipeline_parallel": 3})
    assert any("pipeline parallel 3 does not divide 32 layers" in p for p in problems)
    with pytest.raises(ProfileError, match="torch_compile"):
        apply_profile(cmd, "megatron", {"torch_compile": True})


def test_load_profile_errors(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"framework": "deepspeed", "setting": {}}))
    with pytest.raises(ProfileError, match="framework 'deepspeed'"):
        load_profile(p)
    p.write_text("{")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(p)


def test_executable_runs_the_rewritten_command(tmp_path):
    (tmp_path / "pretrain_gpt.py").write_text(ECHO)
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps({"framework": "megatron", "setting": {"micro_batch_size": 2, "nccl_algo": "Ring",
                                                                     "manual_gc": True}}))
    env = {**os.environ, "INFRARSI_PYTHON": sys.executable}
    cmd = [str(LAUNCH), "--profile", str(prof), "--", sys.executable, "pretrain_gpt.py", *ARGS]
    dry = subprocess.run([*cmd[:3], "--dry-run", *cmd[3:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("NCCL_ALGO=Ring ") and "--micro-batch-size 2 --manual-gc" in dry.stdout
    real = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    got = json.loads(real.stdout)
    assert got["algo"] == "Ring"
    assert got["argv"] == [*ARGS, "--micro-batch-size", "2", "--manual-gc"]
