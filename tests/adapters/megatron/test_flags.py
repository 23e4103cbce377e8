"""A launch's flags judged against the tree it runs (infrarsi/adapters/megatron/flags.py, tree.py): a fork's own flags
(its megatron/training/arguments.py, its script's extra_args_provider) are known; with a tree present a flag outside
them is refused in one line naming it and the nearest known ones; without one, upstream's list only warns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infrarsi.adapters.megatron import MegatronAdapter, MegatronLaunchError, parse_megatron
from infrarsi.adapters.megatron.flags import check_flags, known_flags
from infrarsi.adapters.megatron.known_flags import MEGATRON_LM_FLAGS
from infrarsi.adapters.megatron.tree import read_arguments, read_extra_args, search_path
from infrarsi.contract.model import Contract

ROOT = Path(__file__).resolve().parents[3]
FORKS = ROOT / "tests" / "fixtures" / "megatron_fork"


def _contract(tmp_path: Path, old: str, new: str) -> Contract:
    script = tmp_path / "train.sh"
    script.write_text((ROOT / "contracts/megatron-cpu/train.sh").read_text().replace(old, new))
    return Contract.model_validate({"name": "t", "workload": {"adapter": "megatron", "launch": str(script)},
                                    "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 2.0}})


def test_a_misspelt_flag_of_the_cpu_launcher_is_refused_naming_the_nearest_known_one(tmp_path):
    c = _contract(tmp_path, "--micro-batch-size 2", "--micro-batch-sise 2")
    with pytest.raises(MegatronLaunchError) as e:
        MegatronAdapter().parsed(c)
    msg = str(e.value)
    assert "\n" not in msg and "--micro-batch-sise (did you mean --micro-batch-size" in msg
    assert "unrecognized arguments" in msg and "pretrain_gpt_cpu.py's parser" in msg


def test_the_cpu_launcher_knows_only_what_its_strict_parser_reads(tmp_path):
    c = _contract(tmp_path, "--use-cpu-initialization", "--use-cpu-initialization --tp-comm-overlap")
    with pytest.raises(MegatronLaunchError, match="pretrain_gpt_cpu.py does not know --tp-comm-overlap"):
        MegatronAdapter().parsed(c)


def test_the_forks_arguments_py_is_read_group_by_group_and_its_own_flags_are_known():
    tree = FORKS / "args_fork" / "megatron" / "training" / "arguments.py"
    r = read_arguments(tree)
    assert r.unread == ()
    assert {"--attention-sink-tokens", "--loss-spike-skip", "--num-layers", "--sequence-parallel", "--help"} <= r.flags
    assert "--tp-comm-overlap-cfg" not in r.flags  # upstream's, not this tree's
    k = known_flags("pretrain_gpt.py", cwd=FORKS / "args_fork")
    assert k.tree == tree and k.certain and "--attention-sink-tokens" in k.flags


def test_extra_args_provider_flags_are_the_programs_own():
    script = FORKS / "provider_fork" / "pretrain_gpt.py"
    r, names = read_extra_args(script, search_path(script, {}, None))
    assert names == ["add_fork_args"] and r.flags == {"--data-mix-temperature", "--log-grad-histograms"}
    # no tree on its path: upstream's list and the provider's flags, and an outsider is only warned about
    k = known_flags(str(script))
    assert k.tree is None and not k.certain and "--data-mix-temperature" in k.flags and "--num-layers" in k.flags
    assert "extra_args_provider add_fork_args" in k.source


def test_a_provider_beside_a_tree_adds_to_the_trees_flags_and_a_typo_is_refused(tmp_path):
    fork = tmp_path / "fork"
    shutil.copytree(FORKS / "args_fork", fork)
    shutil.copy(FORKS / "provider_fork" / "pretrain_gpt.py", fork / "pretrain_gpt.py")
    ok = check_flags("pretrain_gpt.py", ["--num-layers", "2", "--data-mix-temperature", "0.5", "--loss-spike-skip"],
                     source="job.sh", cwd=fork)
    assert ok.refusal is None and ok.warnings == ()
    bad = check_flags("pretrain_gpt.py", ["--num-layers", "2", "--data-mix-temprature", "0.5"], source="job.sh",
                      cwd=fork)
    assert bad.refusal.startswith("job.sh: pretrain_gpt.py does not know --data-mix-temprature (did you mean "
                                  "--data-mix-temperature")
    assert f"{fork}/megatron/training/arguments.py + pretrain_gpt.py's extra_args_provider add_fork_args" in bad.refusal


def test_the_tree_is_found_on_pythonpath_from_the_working_directory(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "pretrain_gpt.py").write_text("print('a fork launched from its scripts folder')\n")
    shutil.copytree(FORKS / "args_fork" / "megatron", tmp_path / "fork" / "megatron")
    k = known_flags("scripts/pretrain_gpt.py", env={"PYTHONPATH": "fork"}, cwd=tmp_path)
    assert k.tree == tmp_path / "fork" / "megatron" / "training" / "arguments.py"
    assert known_flags("scripts/pretrain_gpt.py", env={}, cwd=tmp_path).tree is None


def test_without_a_tree_upstreams_list_warns_and_never_refuses():
    assert {"--micro-batch-size", "--tp-comm-overlap", "--data-path", "--no-overlap-p2p-communication"} <= \
        MEGATRON_LM_FLAGS
    assert "--overlap-p2p-comm" not in MEGATRON_LM_FLAGS  # framework-notes: the flag does not exist
    args = ["--num-layers", "2", "--overlap-p2p-comm", "--data-path", "a", "b", "--my-plugin=1"]
    v = check_flags("/nonexistent/Megatron-LM/pretrain_gpt.py", args, source="job.sh")
    assert v.refusal is None and len(v.warnings) == 1
    assert v.warnings[0].startswith("job.sh: pretrain_gpt.py may not know --overlap-p2p-comm (did you mean ")
    assert "--my-plugin" in v.warnings[0] and "set PYTHONPATH (or workload.cwd)" in v.warnings[0]
    assert check_flags("pretrain_gpt.py", ["--num-layers", "2", "--tp-comm-overlap"], source="x").warnings == ()


def test_parts_of_a_parser_that_cannot_be_read_make_an_unknown_flag_a_warning(tmp_path):
    args_py = tmp_path / "megatron" / "training" / "arguments.py"
    args_py.parent.mkdir(parents=True)
    args_py.write_text("import argparse\nfrom fork_plugins import add_plugin_args\n\n"
                       "def parse_args():\n    parser = argparse.ArgumentParser()\n"
                       "    parser = _add_training_args(parser)\n    add_plugin_args(parser)\n"
                       "    return parser.parse_args()\n\n"
                       "def _add_training_args(parser):\n    g = parser.add_argument_group(title='t')\n"
                       "    g.add_argument('--train-iters', type=int)\n    return parser\n")
    r = read_arguments(args_py)
    assert r.flags == {"--train-iters", "--help"} and len(r.unread) == 1 and "add_plugin_args(parser)" in r.unread[0]
    v = check_flags("pretrain_gpt.py", ["--train-iters", "3", "--plugin-x"], source="job.sh", cwd=tmp_path)
    assert v.refusal is None and "parts this reading cannot list" in v.warnings[0] and ":7 add_plugin_args" in v.warnings[0]


def test_config_dataclass_groups_are_read_as_upstreams_factory_names_them(tmp_path):
    """Upstream builds groups from config dataclasses (ArgumentGroupFactory): fields, bool defaults, exclusions."""
    (tmp_path / "megatron" / "training").mkdir(parents=True)
    (tmp_path / "megatron" / "core").mkdir(parents=True)
    (tmp_path / "megatron" / "core" / "__init__.py").write_text("from .model_config import ModelConfig\n")
    (tmp_path / "megatron" / "core" / "base.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass BaseConfig:\n    tensor_model_parallel_size: int = 1\n")
    (tmp_path / "megatron" / "core" / "model_config.py").write_text(
        "from dataclasses import dataclass, field\nfrom typing import ClassVar, Optional\nfrom .base import BaseConfig\n\n"
        "@dataclass\nclass ModelConfig(BaseConfig):\n    kind: ClassVar[str] = 'gpt'\n    num_layers: int = 0\n"
        "    fused: bool = True\n    sinks: bool = False\n    maybe: Optional[bool] = None\n"
        "    derived: int = field(init=False, default=0)\n    skipped: int = 3\n"
        "    renamed: int = field(default=1, metadata={'argparse_meta': {'arg_names': ['--fork-renamed'], 'type': int}})\n")
    (tmp_path / "megatron" / "training" / "arguments.py").write_text(
        "from megatron.core import ModelConfig\nfrom megatron.training.argument_utils import ArgumentGroupFactory\n\n"
        "def add_megatron_arguments(parser):\n    exclude = ['skipped']\n"
        "    ArgumentGroupFactory(ModelConfig, exclude=exclude).build_group(parser, 'model')\n    return parser\n")
    r = read_arguments(tmp_path / "megatron" / "training" / "arguments.py")
    assert r.unread == ()
    assert r.flags == {"--help", "--tensor-model-parallel-size", "--num-layers", "--no-fused", "--disable-fused",
                       "--sinks", "--no-maybe", "--disable-maybe", "--fork-renamed"}


def test_the_verdict_is_the_readers_so_knobs_init_estimate_and_apply_share_it():
    path = FORKS / "args_fork" / "train.sh"
    text = path.read_text()
    assert parse_megatron(text, path=str(path)).warnings == []
    with pytest.raises(MegatronLaunchError, match=r"does not know --attention-sink-token \(did you mean "
                                                  r"--attention-sink-tokens\?\)"):
        parse_megatron(text.replace("--attention-sink-tokens", "--attention-sink-token"), path=str(path))


def test_check_reader_compares_a_checkouts_static_reading_with_upstreams_list():
    """The command docs/megatron.md shows (on Megatron-LM main it prints 879 flags, none missing): here on the fork
    fixture, whose small parser lacks most of upstream's flags, so it says which and exits 1."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "scripts/megatron_flags.py", "--check-reader", str(FORKS / "args_fork")],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(f"arguments.py: {len(read_arguments(FORKS / 'args_fork' / 'megatron' / 'training' / 'arguments.py').flags)} flags; "
                             f"known_flags.py: {len(MEGATRON_LM_FLAGS)}")
    assert "--tp-comm-overlap-cfg" in lines[1] and lines[2] == "  only in the reading: --attention-sink-tokens --loss-spike-skip"
    assert lines[3] == "  unread: (none)"


def test_a_knobs_flag_the_forks_tree_lacks_makes_that_setting_invalid_before_any_launch(tmp_path):
    """The fork's parser has no --attention-backend: a trial that sets it would exit at start-up, so the setting is
    refused as the framework's own checks refuse one (an invalid trial, no launch); the launch's own setting is not."""
    from infrarsi.adapters.megatron import FrameworkRejected

    c = Contract.model_validate({"name": "f", "workload": {"adapter": "megatron", "launch": str(FORKS / "args_fork" /
                                                           "train.sh"), "cwd": str(FORKS / "args_fork")},
                                 "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80}})
    a = MegatronAdapter()
    s = a.knob_space(c).complete({"tensor_parallel": 2, "data_parallel": 4}).to_dict()
    assert "--attention-sink-tokens" in a.launch(c, s).argv
    with pytest.raises(FrameworkRejected, match=r"^this setting needs --attention-backend, which the launch's parser "
                                                r"does not know \(its parser: .*args_fork/megatron/training/"
                                                r"arguments.py\); leave that knob"):
        a.launch(c, {**s, "attention_backend": "flash"})
