"""A launch whose program would refuse its own flags (infrarsi/adapters/megatron/flags.py) is refused when it is read,
in one line naming the flag and the nearest known one; a flag the program knows but infrarsi does not model stays a
note of the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.adapters.megatron import MegatronAdapter, MegatronLaunchError
from infrarsi.adapters.megatron.flags import known_flags, refusal
from infrarsi.contract.model import Contract

ROOT = Path(__file__).resolve().parents[3]


def _contract(tmp_path: Path, old: str, new: str) -> Contract:
    script = tmp_path / "train.sh"
    script.write_text((ROOT / "contracts/megatron-cpu/train.sh").read_text().replace(old, new))
    return Contract.model_validate({"name": "t", "workload": {"adapter": "megatron", "launch": str(script)},
                                    "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 2.0}})


def test_a_misspelt_flag_is_refused_naming_the_nearest_known_one(tmp_path):
    c = _contract(tmp_path, "--micro-batch-size 2", "--micro-batch-sise 2")
    with pytest.raises(MegatronLaunchError) as e:
        MegatronAdapter().parsed(c)
    msg = str(e.value)
    assert "\n" not in msg and "--micro-batch-sise (did you mean --micro-batch-size?)" in msg
    assert "unrecognized arguments" in msg


def test_megatron_lm_flags_are_its_parsers_and_unknown_ones_are_refused():
    known = known_flags("pretrain_gpt.py")
    assert {"--micro-batch-size", "--tp-comm-overlap", "--data-path", "--no-overlap-p2p-communication"} <= known
    assert "--overlap-p2p-comm" not in known  # framework-notes: the flag does not exist
    args = ["--num-layers", "2", "--overlap-p2p-comm", "--data-path", "a", "b", "--my-plugin=1"]
    msg = refusal("/opt/Megatron-LM/pretrain_gpt.py", args, source="job.sh")
    assert msg.startswith("job.sh: pretrain_gpt.py does not know --overlap-p2p-comm") and "--my-plugin" in msg
    # a flag Megatron-LM knows is not refused (the estimate notes it as not modelled); another program's flags
    # are its own
    assert refusal("pretrain_gpt.py", ["--num-layers", "2", "--tp-comm-overlap"], source="x") is None
    assert refusal("pretrain_custom.py", ["--my-plugin"], source="x") is None


def test_the_cpu_launcher_knows_only_what_its_strict_parser_reads(tmp_path):
    c = _contract(tmp_path, "--use-cpu-initialization", "--use-cpu-initialization --tp-comm-overlap")
    with pytest.raises(MegatronLaunchError, match="pretrain_gpt_cpu.py does not know --tp-comm-overlap"):
        MegatronAdapter().parsed(c)
