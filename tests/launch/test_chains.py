"""Launches read through their layers (sbatch -> srun -> bash -> torchrun, containers, "$@"), and edited in place.

Each chain under tests/fixtures/chains/ is a small repository tree written the way teams write their launches. For
each: the knobs are read where they are set, the tuned launch is emitted by the adapter (with its framework's own
checks), apply's in-place edit changes the file where each knob is written and no other, and the edited tree reads
back to the tuned setting.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from infrarsi.adapters.megatron import MegatronAdapter
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
    edits = edit_launch_files(adapter, contract, spec)
    assert edits is not None
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
