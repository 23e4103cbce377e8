"""How a torchtitan trial is started: the CPU launcher, the interpreter's torchrun, the cap, the knobs a
trial adds (replicate degree, threads, kernel patches), and the CPU contract the project ships."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from infrarsi.adapters.torchtitan import trial as torchtitan_trial
from infrarsi.adapters.torchtitan import TorchtitanAdapter
from infrarsi.adapters.workload import Workload
from infrarsi.contract.model import Contract, load_contract
from infrarsi.trial import TRIAL_DIR

ROOT = Path(__file__).resolve().parents[3]
CPU_CONTRACT = ROOT / "contracts" / "torchtitan-cpu.toml"
JOB = ROOT / "contracts" / "torchtitan-cpu" / "llama3_cpu.toml"


def contract(kind: str = "cpu", knobs: dict | None = None, entry: str | None = None) -> Contract:
    ep = entry or f"torchrun --nproc-per-node=2 -m torchtitan.train --job.config_file {JOB}"
    return Contract.model_validate({
        "name": "t", "workload": {"adapter": "torchtitan", "entrypoint": ep},
        "hardware": {"kind": kind, "devices": 2, "memory_capacity_gib": 1.5},
        "scope": {"knobs": knobs or {}},
    })
def _trial(ad, c, setting):  # the launch as the runner makes a trial of it
    return ad.trial_form(c, ad.launch(c, setting), setting)



def test_a_cpu_trial_runs_the_launcher_under_this_interpreters_torchrun_with_the_cap():
    c = contract()
    spec = _trial(TorchtitanAdapter(), c, {})
    assert spec.argv[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert spec.argv[4] == "--nproc-per-node=2" and spec.argv[5] == str(torchtitan_trial.LAUNCHER)
    assert spec.argv[6:8] == ["--job.config_file", str(JOB)]
    assert spec.memory_cap_bytes == int(1.5 * 2**30)
    assert spec.env["HF_HUB_OFFLINE"] == "1" and spec.env["HF_DATASETS_OFFLINE"] == "1"
    assert "INFRARSI_PATCHES" not in spec.env


def test_a_named_rendezvous_is_kept_and_gets_no_standalone():
    c = contract(entry=f"torchrun --nproc-per-node=2 --master-port=29611 -m torchtitan.train --job.config_file {JOB}")
    argv = _trial(TorchtitanAdapter(), c, {}).argv
    assert "--standalone" not in argv and "--master-port=29611" in argv


def test_a_gpu_contract_without_patches_keeps_its_launch_and_with_patches_gets_the_hook():
    c = contract(kind="H100-80GB", knobs={"kernel_rmsnorm": ["reference", "kernels/rmsnorm/triton_rows.py@rows4"]})
    spec = _trial(TorchtitanAdapter(), c, {"kernel_rmsnorm": "reference"})
    assert spec.argv[:4] == ["torchrun", "--nproc-per-node=2", "-m", "torchtitan.train"]
    assert spec.memory_cap_bytes is None and "INFRARSI_PATCHES" not in spec.env
    spec = _trial(TorchtitanAdapter(), c, {"kernel_rmsnorm": "kernels/rmsnorm/triton_rows.py@rows4"})
    assert spec.argv[0] == "torchrun" and spec.argv[2] == str(torchtitan_trial.LAUNCHER)
    assert json.loads(spec.env["INFRARSI_PATCHES"]) == {"rmsnorm": "kernels/rmsnorm/triton_rows.py@rows4"}


def test_replicate_degree_and_threads_reach_the_command_and_the_environment():
    c = contract(knobs={"data_parallel_replicate": [1, 2], "intra_op_threads": [1, 2]})
    space = TorchtitanAdapter().knob_space(c)
    assert {"data_parallel_replicate", "intra_op_threads"} <= set(space.names)
    spec = _trial(TorchtitanAdapter(), c, {"data_parallel_replicate": 2, "intra_op_threads": 2})
    i = spec.argv.index("--parallelism.data_parallel_replicate_degree")
    assert spec.argv[i + 1] == "2" and "--parallelism.data_parallel_shard_degree" not in spec.argv
    assert spec.env["OMP_NUM_THREADS"] == "2"
    assert _trial(TorchtitanAdapter(), c, {"intra_op_threads": 1}).env["OMP_NUM_THREADS"] == "1"
    assert "--parallelism.data_parallel_replicate_degree" not in _trial(TorchtitanAdapter(), c, {}).argv


def test_replicate_follows_data_parallel_and_a_stated_misfit_is_refused():
    c = contract(knobs={"data_parallel_replicate": [1, 2], "data_parallel": [1, 2], "tensor_parallel": [1, 2],
                        "sequence_parallel": [False, True]})
    space = TorchtitanAdapter().knob_space(c)
    stated = {"data_parallel_replicate": 2, "data_parallel": 1, "tensor_parallel": 2, "sequence_parallel": True}
    assert space.complete(stated)["data_parallel_replicate"] == 1  # the split follows data parallel 1
    msgs = [v.message for v in space.validate({**space.complete(stated), **stated})]
    assert any("not a multiple of data_parallel_replicate 2" in m for m in msgs)


def test_the_shipped_cpu_contract_reads_the_real_job_and_its_baseline_is_the_job():
    c = load_contract(CPU_CONTRACT)
    ad = TorchtitanAdapter(base_dir=CPU_CONTRACT.parent)  # as a locked run builds it (run_adapter)
    parsed = ad.parsed(c)
    assert parsed.fixed["global_batch_size"] == 16 and parsed.fixed["seq_length"] == 512
    assert parsed.fixed["model_flavor"] == "debugmodel" and parsed.fixed["vocab_size"] == 2048
    space = ad.knob_space(c)
    assert "pipeline_parallel" not in space.names  # excluded: see docs/torchtitan.md (0.2.2 back-propagates the sum under PP)
    base = space.complete(c.baseline)
    assert not space.validate(base)
    assert {k: v for k, v in base.to_dict().items() if parsed.setting.get(k, v) != v} == {}
    # the baseline launch states nothing beyond the job file: torchtitan's own defaults run; a trial of it writes
    # into its own folder (the repository is read-only to a trial)
    spec = _trial(ad, c, base.to_dict())
    assert spec.argv[-2:] == ["--job.config_file", str(JOB)]
    assert ad.trial_outputs(spec).argv[-4:] == ["--job.config_file", str(JOB), "--job.dump_folder", f"{TRIAL_DIR}/outputs"]


def test_the_assets_are_built_from_project_text_and_the_tokenizer_loads(tmp_path):
    pytest.importorskip("tokenizers", reason="the torchtitan extra is not installed")
    sys.path.insert(0, str(ROOT / "launchers"))
    try:
        import torchtitan_assets
    finally:
        sys.path.remove(str(ROOT / "launchers"))
    records = torchtitan_assets.corpus(max_bytes=20_000)
    assert records and all(len(r) >= 1 for r in records)
    assert "InfraRSI" in "".join(records)  # README.md comes first
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ROOT / "contracts" / "torchtitan-cpu" / "assets" / "tokenizer" / "tokenizer.json"))
    assert tok.get_vocab_size() == torchtitan_assets.VOCAB == 2048  # llama3 debugmodel's vocab
    ids = tok.encode("torchtitan trains on the CPU").ids
    assert tok.decode(ids) == "torchtitan trains on the CPU"
    lines = (ROOT / "contracts" / "torchtitan-cpu" / "assets" / "data" / "train.jsonl").read_text().splitlines()
    assert len(lines) > 50 and all("text" in json.loads(ln) for ln in lines)


def test_a_trial_command_reads_back_as_the_same_torchtitan_setting():
    # what apply reads from the tuned launch: the launcher takes torchtitan.train's arguments unchanged
    from infrarsi.adapters.torchtitan import parse_torchtitan_argv

    c = load_contract(CPU_CONTRACT)
    ad = TorchtitanAdapter(base_dir=CPU_CONTRACT.parent)
    tuned = {**c.baseline, "recompute_granularity": "none", "micro_batch_size": 4, "data_parallel_replicate": 2}
    spec = _trial(ad, c, tuned)
    got = parse_torchtitan_argv(spec.argv, env=spec.env, base_dir=ROOT)
    assert got.setting["recompute_granularity"] == "none" and got.setting["micro_batch_size"] == 4
    assert got.values["parallelism.data_parallel_replicate_degree"] == "2" or \
        int(got.values["parallelism.data_parallel_replicate_degree"]) == 2
    assert got.fixed["global_batch_size"] == 16 and got.world_size == 2


def test_the_launch_file_is_found_from_the_contracts_folder_or_the_working_directory(monkeypatch):
    c = load_contract(CPU_CONTRACT)
    assert Workload(c, CPU_CONTRACT.parent).path == JOB
    assert TorchtitanAdapter(base_dir=CPU_CONTRACT.parent).parsed(c).fixed["seq_length"] == 512
    monkeypatch.chdir(ROOT)
    from_root = c.model_copy(update={"workload": c.workload.model_copy(
        update={"launch": "contracts/torchtitan-cpu/llama3_cpu.toml"})})
    assert Workload(from_root, CPU_CONTRACT.parent).path == ROOT / from_root.workload.launch
    assert TorchtitanAdapter(base_dir=CPU_CONTRACT.parent).parsed(from_root).fixed["seq_length"] == 512


def test_a_locked_runs_adapter_reads_launch_files_from_the_contracts_folder(tmp_path):
    from infrarsi.adapters import run_adapter

    (tmp_path / "contract.lock").write_text(json.dumps({"contract_path": str(CPU_CONTRACT)}))
    ad = run_adapter("torchtitan", tmp_path)
    assert ad.base_dir == CPU_CONTRACT.parent
    assert run_adapter("torchtitan", tmp_path / "no-such-run").base_dir is None
    assert type(run_adapter("minigpt", tmp_path)).__name__ == "MiniGPTAdapter"


def test_init_locks_the_shipped_cpu_contract_from_the_repository_root(tmp_path, monkeypatch):
    from rich.console import Console

    from infrarsi.stages import init

    monkeypatch.chdir(ROOT)  # where the README runs it; the job file is relative to the contract, not to here
    quiet = Console(file=open(tmp_path / "out.txt", "w"), width=200)
    assert init.run(Path("contracts/torchtitan-cpu.toml"), tmp_path / "run", console=quiet, err=quiet) == 0, \
        (tmp_path / "out.txt").read_text()
    assert (tmp_path / "run" / "contract.lock").is_file()


def test_the_run_stages_memory_offset_runs_the_real_model_for_the_shipped_contract(monkeypatch):
    pytest.importorskip("torchtitan", reason="the torchtitan extra is not installed")
    from infrarsi.estimate.choice import memory_estimate

    monkeypatch.chdir(ROOT)
    c = load_contract(CPU_CONTRACT)
    space = TorchtitanAdapter(base_dir=CPU_CONTRACT.parent).knob_space(c)
    est = memory_estimate(space, c, contract_dir=CPU_CONTRACT.parent, budget_s=60.0)
    base = space.complete(c.baseline)
    gib = est(base) / 2**30
    assert 1.5 < gib < 2.1  # the fake step of the real job (trials peak at ~1.83 GiB), not the analytical figure
    assert est(space.complete({**base, "intra_op_threads": 2})) == est(base)  # threads change no tensor: cached
    # DDP's parameter check fails on fake tensors: the analytical figure, calibrated by the estimates so far
    ddp = est(space.complete({**base, "data_parallel_replicate": 2})) / 2**30
    assert 1.0 < ddp < 3.0
