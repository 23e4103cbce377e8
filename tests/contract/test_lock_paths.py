"""The lock's workload files: one rule, the same folder both ways.

The lock names every file that defines the workload relative to the contract's folder, wherever the launch reads
it from (the repository root it runs in, its own folder, the contract's folder), and every later stage reads it back
from the contract's folder. A run locked before that rule (its names as written, no ``files_relative_to``) still
resumes; one whose file is gone gets one line naming it and the fix.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from infrarsi.contract import ContractError, load_locked, write_lock
from infrarsi.contract.lock import contract_hash, normalized, workload_sha256
from infrarsi.contract.model import load_contract
from infrarsi.rundir import RunDir
from infrarsi.rundir.chain import seal_lock

ROOT = Path(__file__).resolve().parents[2]

# A wrapper in contracts/jobs/ run from the repository root, naming a job file the way the shell reads it there
# (contracts/jobs/job.toml), a helper beside itself (helper.sh) and, through [workload.args], a file in the
# contract's folder (settings.json).
WRAPPER = """#!/bin/bash
source helper.sh
torchrun --nproc_per_node=2 -m torchtitan.train --job.config_file contracts/jobs/job.toml "$@"
"""

CONTRACT = """name = "paths"
[workload]
adapter = "torchtitan"
launch = "jobs/run.sh"
args = { settings = "settings.json" }
[hardware]
kind = "H100-80GB"
devices = 2
memory_capacity_gib = 80
[scope]
files = []
[scope.knobs]
micro_batch_size = [2, 4]
[baseline]
micro_batch_size = 2
"""


def _repo(root: Path) -> Path:
    """A git repository holding contracts/c.toml and its workload files; the contract's path."""
    (root / "contracts" / "jobs").mkdir(parents=True)
    (root / "contracts" / "jobs" / "run.sh").write_text(WRAPPER)
    (root / "contracts" / "jobs" / "helper.sh").write_text("export LOGLEVEL=INFO\n")
    (root / "contracts" / "jobs" / "job.toml").write_text("[training]\nsteps = 4\n")
    (root / "contracts" / "settings.json").write_text("{}\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    cpath = root / "contracts" / "c.toml"
    cpath.write_text(CONTRACT)
    return cpath


def test_the_lock_names_each_file_from_the_contracts_folder_and_reads_it_back_from_there(tmp_path, monkeypatch):
    cpath = _repo(tmp_path / "repo")
    monkeypatch.chdir(tmp_path)  # infrarsi run from elsewhere: the contract's folder decides, not this one
    write_lock(cpath, tmp_path / "run")
    lock = RunDir(tmp_path / "run").read_lock()
    assert lock.files_relative_to == "contract"
    assert sorted(lock.files) == ["jobs/helper.sh", "jobs/job.toml", "jobs/run.sh", "settings.json"]
    load_locked(tmp_path / "run")

    # each file is checked where the lock says: an edit to the job file the wrapper names is caught, by its path
    job = cpath.parent / "jobs" / "job.toml"
    job.write_text("[training]\nsteps = 5\n")
    with pytest.raises(ContractError, match=rf"workload file {job} changed since it was locked"):
        load_locked(tmp_path / "run")


@pytest.mark.parametrize("name", ["torchtitan-cpu", "megatron-deepseek-v2-lite-h100x64", "megatron-cpu"])
def test_a_shipped_contracts_lock_reads_back(name, tmp_path, monkeypatch):
    # torchtitan-cpu's job file names itself from the repository root (contracts/torchtitan-cpu/llama3_cpu.toml);
    # the DeepSeek script names itself from its own folder (deepseek_v2_lite.sh): both were locked under a name
    # the reader then looked for in the contract's folder ("... is gone")
    monkeypatch.chdir(tmp_path)
    write_lock(ROOT / "contracts" / f"{name}.toml", tmp_path / "run")
    assert load_locked(tmp_path / "run").name == name
    assert all((ROOT / "contracts" / rel).is_file() for rel in RunDir(tmp_path / "run").read_lock().files)


def _old_lock(cpath: Path, run: Path, names: list[str]) -> None:
    """The lock the writer before the one rule wrote: each file under the name it was written as."""
    contract = load_contract(cpath)
    digest = contract_hash(contract)
    files = {n: _sha(_where_written(cpath, n)) for n in names}
    RunDir(run).write_lock(seal_lock({"contract_path": str(cpath.resolve()), "sha256": digest,
                                      "contract": normalized(contract), "files": files,
                                      "workload_sha256": workload_sha256(digest, files), "locked_at": 0.0,
                                      "infrarsi_version": "0.1.0"}))


def _where_written(cpath: Path, name: str) -> Path:
    root = cpath.parent.parent  # the repository root, where the launch runs
    for p in (cpath.parent / name, root / name, cpath.parent / "jobs" / name):
        if p.is_file():
            return p
    raise AssertionError(name)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_run_locked_under_the_old_names_resumes_and_a_gone_file_is_named_with_the_fix(tmp_path, monkeypatch):
    cpath = _repo(tmp_path / "repo")
    monkeypatch.chdir(tmp_path)
    # as written: the launch relative to the contract, the job file relative to where the launch runs, the
    # helper relative to the launch's folder, the args' file relative to the contract
    _old_lock(cpath, tmp_path / "run", ["jobs/run.sh", "contracts/jobs/job.toml", "helper.sh", "settings.json"])
    assert load_locked(tmp_path / "run").name == "paths"

    (cpath.parent / "jobs" / "helper.sh").unlink()
    with pytest.raises(ContractError) as e:
        load_locked(tmp_path / "run")
    msg = str(e.value)
    assert "\n" not in msg and "helper.sh is gone" in msg and "locked by an older infrarsi" in msg
    assert f"infrarsi init {cpath.resolve()} --run-dir NEW_DIR" in msg


def test_every_script_of_a_launch_chain_is_locked(tmp_path, monkeypatch):
    """A wrapper passing "$@" to `bash scripts/megatron_run.sh`, which sources the model's arguments from
    "$(dirname "$0")/llama2_7b_model.sh" (launch/chain.py reads all three): the sourced file defines the workload as
    much as the launch, so it is locked and an edit to it is caught by its path (before, only the launch file and the
    names written in it were)."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "tests/fixtures/chains/args_wrapper", repo)
    (repo / "c.toml").write_text('name = "chain"\n[workload]\nadapter = "megatron"\n'
                                 'launch = "scripts/pretrain_llama2_7b.sh"\n'
                                 '[hardware]\nkind = "H100-80GB"\ndevices = 8\nmemory_capacity_gib = 80\n')
    monkeypatch.chdir(tmp_path)
    write_lock(repo / "c.toml", tmp_path / "run")
    assert {"scripts/pretrain_llama2_7b.sh", "scripts/megatron_run.sh", "scripts/llama2_7b_model.sh"} <= set(
        RunDir(tmp_path / "run").read_lock().files)
    inner = repo / "scripts" / "llama2_7b_model.sh"
    inner.write_text(inner.read_text() + "\nMODEL_ARGS+=(--ignored)\n")
    with pytest.raises(ContractError, match=rf"workload file {inner} changed since it was locked"):
        load_locked(tmp_path / "run")
