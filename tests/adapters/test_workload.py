"""The Workload: one place says where the launch is and where it runs, and every stage reads it from there.

A torchtitan wrapper in a subfolder (``train/run_train.sh`` naming ``CONFIG_FILE=./train/llama3_debug.toml``, run
from the repository root, as torchtitan's own run_train.sh is) is read the way the shell runs it: relative paths
inside the launch resolve against ``workload.cwd`` (default: the contract's repository root), the same in
``infrarsi knobs``, the estimate, the trial's launch and apply's in-place edit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi.adapters import contract_adapter
from infrarsi.adapters.workload import Workload
from infrarsi.apply.launch_edit import edit_launch_file
from infrarsi import cli as infrarsi_cli
from infrarsi.contract.lock import contract_hash
from infrarsi.contract.model import load_contract
from infrarsi.estimate.run import anchored
from infrarsi.stages.init_checks import check_files

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "contracts" / "torchtitan-cpu" / "llama3_cpu.toml"

WRAPPER = """#!/bin/bash
# torchtitan's run_train.sh, kept in train/ and run from the repository root: ./train/run_train.sh
set -ex
NGPU=${NGPU:-"2"}
CONFIG_FILE=${CONFIG_FILE:-"./train/llama3_debug.toml"}
torchrun --nproc_per_node=${NGPU} -m torchtitan.train --job.config_file ${CONFIG_FILE} "$@"
"""

CONTRACT = """name = "subfolder"
[workload]
adapter = "torchtitan"
launch = "{launch}"
{cwd}
[hardware]
kind = "H100-80GB"
devices = 2
memory_capacity_gib = 80
[scope]
files = []
[scope.knobs]
micro_batch_size = [2, 4, 8]
recompute_granularity = ["none", "selective", "full"]
[baseline]
micro_batch_size = 8
recompute_granularity = "selective"
"""


def _repo(root: Path, *, git: bool) -> Path:
    """A user's repository: the job file and its wrapper under train/ (the job's asset paths made absolute, so a
    trial could run it from anywhere)."""
    (root / "train").mkdir(parents=True)
    job = JOB.read_text().replace('"contracts/torchtitan-cpu/', f'"{ROOT}/contracts/torchtitan-cpu/')
    (root / "train" / "llama3_debug.toml").write_text(job)
    (root / "train" / "run_train.sh").write_text(WRAPPER)
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _contract(path: Path, launch: str, cwd: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CONTRACT.format(launch=launch, cwd=f'cwd = "{cwd}"' if cwd else ""))
    return path


def test_a_subfolder_wrapper_reads_its_job_file_from_the_repository_root_in_every_stage(tmp_path, monkeypatch):
    repo = _repo(tmp_path / "repo", git=True)
    cpath = _contract(repo / "contract.toml", "train/run_train.sh")
    monkeypatch.chdir(tmp_path)  # infrarsi is run from elsewhere: the contract's folder decides, not this one
    c = load_contract(cpath)
    check_files(c, cpath)
    w = Workload(c, cpath.parent)
    assert w.path == repo / "train" / "run_train.sh" and w.cwd == repo.resolve()
    assert w.parsed().fixed["seq_length"] == 512 and w.parsed().world_size == 2  # the job file was found

    # knobs: the contract's launch, read as the run reads it
    if not any(cmd.name == "knobs" for cmd in infrarsi_cli.app.registered_commands):
        infrarsi_cli._register_tools()
    got = CliRunner().invoke(infrarsi_cli.app, ["knobs", str(cpath), "--json"])
    assert got.exit_code == 0, got.output
    d = json.loads(got.output)
    assert d["framework"] == "torchtitan" and d["fixed"]["seq_length"] == 512 and d["setting"]["micro_batch_size"] == 8

    # estimate: an adapter bound to no folder reads the anchored contract the same way
    from infrarsi.adapters.torchtitan import TorchtitanAdapter

    assert TorchtitanAdapter().parsed(anchored(c, cpath.parent)).fixed == w.parsed().fixed

    # the lock: the job file the wrapper names is part of the workload's hash, found where the launch runs and
    # named from the contract's folder (contract/lock.py)
    from infrarsi.contract.lock import workload_files

    assert workload_files(c, cpath.parent)["train/llama3_debug.toml"] == repo / "train" / "llama3_debug.toml"


@pytest.mark.slow  # torchtitan's config code reads the launch twice (~30 s); the reading: the test above
def test_a_subfolder_wrappers_trial_and_apply_run_from_the_repository_root(tmp_path, monkeypatch):
    repo = _repo(tmp_path / "repo", git=True)
    cpath = _contract(repo / "contract.toml", "train/run_train.sh")
    monkeypatch.chdir(tmp_path)
    c = load_contract(cpath)
    w = Workload(c, cpath.parent)

    # trials: the launch keeps the user's relative path and runs where it resolves
    adapter = contract_adapter("torchtitan", cpath)
    tuned = adapter.knob_space(c).complete({**c.baseline, "micro_batch_size": 4, "recompute_granularity": "full"})
    spec = adapter.launch(c, tuned.to_dict())
    assert spec.cwd == str(repo.resolve())
    job = spec.argv[spec.argv.index("--job.config_file") + 1]
    assert job == "./train/llama3_debug.toml" and (Path(spec.cwd) / job).is_file()

    # apply: the wrapper edited in place reads back as the tuned job, by torchtitan's own reading
    path, edit = edit_launch_file(adapter, c, tuned.to_dict())
    assert path == w.path and "./train/llama3_debug.toml" in edit.text and edit.changed_lines >= 1
    assert w.differences(tuned.to_dict(), edit.text) == []
    assert w.differences(c.baseline, edit.text)  # and a launch that is not the tuned one is told apart


def test_workload_cwd_names_the_folder_the_launch_runs_from(tmp_path):
    repo = _repo(tmp_path / "repo", git=False)  # no repository: the default is the contract's own folder
    inner = _contract(repo / "infra" / "contract.toml", "../train/run_train.sh")
    with pytest.raises(ValueError, match=r"train/llama3_debug.toml does not exist \(looked at .*/infra/train/"):
        Workload(load_contract(inner), inner.parent).parsed()
    named = _contract(repo / "infra" / "named.toml", "../train/run_train.sh", cwd="..")
    c = load_contract(named)
    w = Workload(c, named.parent)
    assert w.cwd == repo.resolve() and w.parsed().fixed["seq_length"] == 512
    assert anchored(c, named.parent).workload.cwd == str(repo.resolve())  # what the estimate reads it with


def test_a_contract_without_workload_cwd_hashes_as_it_did_before_the_field():
    c = load_contract(ROOT / "contracts" / "torchtitan-cpu.toml")
    assert "cwd" not in json.dumps(c.model_dump(mode="json")["hardware"])
    moved = c.model_copy(update={"workload": c.workload.model_copy(update={"cwd": ".."})})
    assert contract_hash(moved) != contract_hash(c)  # a named cwd is part of the contract
    from infrarsi.contract.lock import normalized

    assert "cwd" not in normalized(c)["workload"] and normalized(moved)["workload"]["cwd"] == ".."
