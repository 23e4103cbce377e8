"""The registry of FrameworkSpecs: one line per framework, the one detection, the spellings tied to the catalog."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from infrarsi.adapters import adapter_class, launcher
from infrarsi.adapters import registry
from infrarsi.adapters.spec import FrameworkSpec
from infrarsi.contract.model import load_contract
from infrarsi.transformer import CAUSAL_MATMULS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(registry.SPECS))
def test_each_registered_spec_names_its_adapter_and_says_if_its_runs_are_simulated(name):
    s = registry.spec(name)
    assert s.name == name and adapter_class(name).name == name
    assert s.simulated == (not adapter_class(name).measured_time)  # one answer to "is this run simulated"
    from infrarsi.transformer import Transformer

    t = Transformer.from_args({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 16,
                               "vocab_size": 128, "global_batch_size": 1})
    assert t.flops_per_token(convention=s.flops_convention) > 0  # a convention the FLOPs count knows


@pytest.mark.parametrize("argv, want", [
    (["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2"], "megatron"),
    (["srun", "python", "-u", "/opt/Megatron-LM/pretrain_mamba.py"], "megatron"),
    (["torchrun", "--nproc-per-node", "8", "-m", "torchtitan.train", "--job.config_file", "x.toml"], "torchtitan"),
    (["./run_train.sh", "--training.steps", "10"], "torchtitan"),
    (["python", "train.py"], None),
])
def test_one_detection_serves_knobs_and_the_launcher(argv, want):
    assert registry.framework_of(argv) == want
    if want is None:
        with pytest.raises(launcher.ProfileError, match="cannot tell the framework"):
            launcher.detect(argv)
    else:
        assert launcher.detect(argv) == want


def test_a_launch_file_nothing_claims_names_what_each_framework_looks_for(tmp_path):
    f = tmp_path / "job.sh"
    f.write_text("#!/bin/bash\npython train.py --lr 1\n")
    with pytest.raises(registry.DetectError) as e:
        registry.framework_of_file(f, f.read_text())
    assert str(e.value) == (f"{f}: no launch found: expected a Megatron-LM command (torchrun/srun/python ... "
                            "pretrain_gpt.py) or a torchtitan one (-m torchtitan.train, run_train.sh, or a .toml job "
                            "file)")


def test_megatrons_flag_tables_are_its_spelling():
    """The Megatron reader's flag -> knob tables and its spelling table are the same table: a knob spelled in one and
    not the other would be read but never written (or the reverse); each flag's argument destination is the knob's in
    the equivalence check."""
    from infrarsi.adapters.megatron import args, equivalence

    tables = {**args._INT_KNOBS, **{f: k for f, (k, _) in args._CHOICE_KNOBS.items()}, **args._BOOL_KNOBS}
    spelled = {f: k for k, f in registry.spec("megatron").spelling.flags.items()}
    assert tables == spelled
    assert {f: k for f, k in spelled.items()
            if k not in equivalence._DEST_KNOBS.get(f.removeprefix("--").replace("-", "_"), ())} == {}


def test_a_framework_is_its_module_and_one_registry_line(monkeypatch, tmp_path):
    """A throwaway framework: one module holding its SPEC (and its adapter) and one registry line; `infrarsi knobs`'
    detection and the profile rewriter then reach it without another file changing."""
    mod = types.ModuleType("infrarsi.adapters.throwaway")
    src = '''
from infrarsi.adapters.megatron.adapter import MegatronAdapter
from infrarsi.adapters.spec import FrameworkSpec


class ThrowawayAdapter(MegatronAdapter):
    name = "throwaway"


def claims(argv):
    return bool(argv) and argv[-1].endswith("throwaway_train.py")


def rewrite(argv, setting, env, cwd):
    from infrarsi.trial import LaunchSpec
    return LaunchSpec(argv=[*argv, *(f"--{k}={v}" for k, v in setting.items())]), []


from infrarsi.transformer import CAUSAL_MATMULS

SPEC = FrameworkSpec(name="throwaway", title="Throwaway", adapter="throwaway:ThrowawayAdapter", claims=claims,
                     looks_for="a throwaway_train.py", rewrite_profile=rewrite,
                     flops_convention=CAUSAL_MATMULS)
'''
    exec(compile(src, str(tmp_path / "throwaway.py"), "exec"), mod.__dict__)
    monkeypatch.setitem(sys.modules, "infrarsi.adapters.throwaway", mod)
    monkeypatch.setitem(registry.SPECS, "throwaway", "throwaway")  # the one registry line
    registry.spec.cache_clear()
    try:
        assert registry.framework_of(["python", "throwaway_train.py"]) == "throwaway"
        assert adapter_class("throwaway").name == "throwaway"
        f = tmp_path / "run.sh"
        f.write_text("#!/bin/bash\ntorchrun --nproc-per-node 2 throwaway_train.py\n")
        assert registry.framework_of_file(f, f.read_text()) == "throwaway"
        spec, problems = launcher.apply_profile(["python", "throwaway_train.py"], None, {"lr": 1})
        assert spec.argv[-1] == "--lr=1" and problems == []
        assert "throwaway" in registry.profile_frameworks()
        c = tmp_path / "c.toml"  # a contract names it with no change in contract/ (the loader hands in SPECS)
        c.write_text('name = "t"\n[workload]\nadapter = "throwaway"\n[hardware]\nmemory_capacity_gib = 1\n')
        assert load_contract(c, adapters=registry.SPECS).workload.adapter == "throwaway"
    finally:
        registry.spec.cache_clear()


def test_a_spec_refuses_a_malformed_adapter_reference():
    with pytest.raises(ValueError, match="module:Class"):
        FrameworkSpec(name="x", adapter="x.XAdapter", flops_convention=CAUSAL_MATMULS)


@pytest.mark.parametrize("folder", ["megatron", "torchtitan"])
def test_a_frameworks_modules_import_each_other_in_no_circle(folder):
    """Megatron's launch type lives in adapters/megatron/launch.py: the adapter, the writer (emit) and the
    equivalence check import it, and it imports none of them (they were a circle through adapter.py)."""
    from graphlib import CycleError, TopologicalSorter

    from infrarsi.testing import import_graph

    pkg = ROOT / "infrarsi" / "adapters" / folder
    prefix = f"infrarsi.adapters.{folder}."
    graph = {p.stem: {m.removeprefix(prefix).split(".")[0] for m in import_graph.imports(p) if m.startswith(prefix)}
             for p in pkg.glob("*.py") if p.stem != "__init__"}
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"adapters/{folder}: import circle {e.args[1]}")


def test_torchtitans_field_tables_spell_each_knob_as_its_spelling_does():
    """torchtitan's field -> knob tables (the reader's and the writer's) use its spelling of each knob; the one
    exception is 0.2.x's own name for async TP, which 0.3 moved under compile."""
    from infrarsi.adapters.torchtitan import configs

    spelled = registry.spec("torchtitan").spelling.flags
    for table in (configs._INT_FIELDS, configs._BOOL_FIELDS_03):
        assert {f: k for f, k in table.items() if spelled.get(k) != f} == {}
    assert {f: k for f, k in configs._BOOL_FIELDS_02.items() if spelled.get(k) != f} == {
        "parallelism.enable_async_tensor_parallel": "async_tp"}
