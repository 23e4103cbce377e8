"""Equivalence, not acceptance: every emitted launch is read back by the framework's own config code (Megatron's
argument names and megatron-core's TransformerConfig; torchtitan's ConfigManager and ParallelDims, 0.2 here and
0.3 from its target directory) and must equal the user's launch except where the setting's knobs act; and
no setting the space refuses is one the framework accepts (:mod:`infrarsi.adapters.fidelity`)."""

import random
from pathlib import Path

import pytest

from infrarsi.adapters import fidelity
from infrarsi.adapters import megatron as mg
from infrarsi.adapters import torchtitan as tt
from infrarsi.adapters.equivalence import NotEquivalent
from infrarsi.adapters.megatron import check as mcheck
from infrarsi.adapters.megatron.equivalence import compare as mcompare
from infrarsi.adapters.torchtitan import check as tcheck
from infrarsi.adapters.torchtitan.equivalence import compare as tcompare
from infrarsi.adapters.torchtitan.fidelity import pipeline_refusal
from infrarsi.contract.model import Contract

FIX = Path(__file__).parents[1] / "fixtures"
POSITIONAL = {"gpt3_175b.sh": ["/ckpt", "/tb", "/d/vocab.json", "/d/merges.txt", "/d/pile_text_document"]}
TOML = {"llama3_8b.toml": 8, "llama3_70b.toml": 64, "llama3_405b.toml": 128, "deepseek_v3_16b.toml": 8,
        "llama3_8b_hsdp.toml": 8, "llama3_405b_launch.sh": 128}
CLI = {"deepseek_v3_16b_hsdp_v03.cmd": 16, "llama3_8b_v03.sh": 8, "llama3_70b_v03.cmd": 32,
       "deepseek_v3_16b_v03.cmd": 16, "llama3_8b_v03_loss_compile.cmd": 8}
MEGATRON = sorted(p.name for p in (FIX / "megatron").iterdir() if p.suffix in (".sh", ".cmd"))
needs_mcore = pytest.mark.skipif(not mcheck.available(), reason="the optional megatron-core extra is absent")
needs_tt = pytest.mark.skipif(not tcheck.available(), reason="the optional torchtitan extra is absent")
needs_tt03 = pytest.mark.skipif(tcheck.torchtitan03_dir() is None, reason="torchtitan 0.3 is not installed")


def _megatron(name):
    path = FIX / "megatron" / name
    p = (mg.parse_megatron_file(path, args=POSITIONAL.get(name)) if path.suffix == ".sh"
         else mg.parse_megatron(path.read_text(), path=str(path)))
    p.device = "H100-80GB"
    return p


def _torchtitan(name, world):
    p = tt.parse_torchtitan_file(FIX / "torchtitan" / name, world_size=world)
    p.device = "H100-80GB"
    return p


def test_every_launch_fixture_is_covered():
    assert {p.name for p in (FIX / "torchtitan").iterdir() if p.suffix in (".toml", ".sh", ".cmd")} == set(TOML) | set(CLI)


@needs_mcore
@pytest.mark.parametrize("name", MEGATRON)
def test_megatron_own_setting_and_every_neighbour_round_trip_to_the_users_job(name):
    p = _megatron(name)
    c = fidelity.count("megatron", p, mg.knob_space_for(p), world=None, sample=2, refused_sample=0)
    assert c.round_trips > 10 and c.equal == c.round_trips, c.examples


@needs_tt
@pytest.mark.parametrize("name", sorted(TOML))
def test_torchtitan_02_own_setting_and_every_neighbour_round_trip(name):
    p = _torchtitan(name, TOML[name])
    c = fidelity.count("torchtitan", p, tt.knob_space_for(p), world=TOML[name], sample=2, refused_sample=0)
    assert c.round_trips > 10 and c.equal == c.round_trips, c.examples


@needs_tt03
def test_torchtitan_03_hsdp_moe_job_round_trips_with_its_replicate_degree():
    # HSDP 2 x 8 with expert parallel 8 on 16 ranks, 0.3 command line: the replicate degree survives every move
    p = _torchtitan("deepseek_v3_16b_hsdp_v03.cmd", 16)
    assert (p.setting["data_parallel"], p.setting["data_parallel_replicate"], p.setting["expert_parallel"]) == (16, 2, 8)
    space = tt.knob_space_for(p)
    c = fidelity.count("torchtitan", p, space, world=16, sample=2, refused_sample=0)
    assert c.round_trips > 10 and c.equal == c.round_trips, c.examples
    spec = tt.emit_torchtitan(p, space.complete(p.setting), world_size=16)
    assert "--parallelism.data_parallel_replicate_degree" in spec.argv and "2" in spec.argv


@pytest.mark.slow
@needs_tt03
@pytest.mark.parametrize("name", sorted(CLI))
def test_torchtitan_03_every_fixture_round_trips(name):
    p = _torchtitan(name, CLI[name])
    c = fidelity.count("torchtitan", p, tt.knob_space_for(p), world=CLI[name], sample=4, refused_sample=10)
    assert c.equal == c.round_trips and c.false_invalid == 0, c.examples


@needs_mcore
def test_the_check_names_what_the_emitted_launch_changed_beyond_the_setting():
    p = _megatron("llama3_8b_fp8.sh")
    spec = mg.emit_megatron(p, p.setting)
    i = spec.argv.index("--global-batch-size")
    wrong = spec.argv[:i + 1] + ["64"] + spec.argv[i + 2:]
    assert any(d.startswith("arg.global_batch_size: '128' -> '64'") for d in mcompare(p, wrong, spec.env, p.setting))
    dropped = [a for a in spec.argv if a != "--untie-embeddings-and-output-weights"]
    assert any("untie_embeddings_and_output_weights" in d for d in mcompare(p, dropped, spec.env, p.setting))
    out = spec.argv[:spec.argv.index("--save") + 1] + ["/trial/ckpt"] + spec.argv[spec.argv.index("--save") + 2:]
    assert mcompare(p, out, spec.env, p.setting) == []  # an output location the run redirects may differ
    moved = {**p.setting, "tensor_parallel": 4, "data_parallel": 2}
    assert mcompare(p, mg.emit_megatron(p, moved).argv, spec.env, moved) == []


@needs_tt
def test_a_replicate_degree_lost_in_emitting_is_a_difference_not_a_launch():
    p = _torchtitan("llama3_8b_hsdp.toml", 8)
    spec = tt.emit_torchtitan(p, p.setting, world_size=8)
    lost = spec.argv + ["--parallelism.data_parallel_replicate_degree", "1", "--parallelism.data_parallel_shard_degree", "8"]
    diffs = tcompare(p, lost, spec.env, p.setting, world=8)
    assert any(d.startswith("cfg.parallelism.data_parallel_replicate_degree: 2 -> 1") for d in diffs), diffs
    c = Contract.model_validate({"name": "c", "workload": {"adapter": "torchtitan", "launch": "llama3_8b_hsdp.toml"},
                                 "hardware": {"kind": "H100-80GB", "devices": 8, "memory_capacity_gib": 80}})
    ad = tt.TorchtitanAdapter(base_dir=FIX / "torchtitan")
    assert ad.knob_space(c).complete(c.baseline)["data_parallel_replicate"] == 2  # the baseline is the user's HSDP
    import infrarsi.adapters.torchtitan.adapter as mod

    real = mod.emit_torchtitan
    try:  # an emitter that loses the replicate degree costs no launch: the launch is refused with the field
        mod.emit_torchtitan = lambda *a, **k: real(*a, **k).model_copy(update={"argv": lost})
        with pytest.raises(NotEquivalent, match="data_parallel_replicate_degree: 2 -> 1"):
            ad.launch(c, {})
    finally:
        mod.emit_torchtitan = real


@needs_mcore
@needs_tt
@pytest.mark.parametrize("kind, name, world", [("megatron", "gpt3_175b.sh", None), ("megatron", "mixtral_8x7b.sh", None),
                                                ("megatron", "llama3_70b_cp.cmd", None),
                                                ("torchtitan", "llama3_8b_hsdp.toml", 8),
                                                ("torchtitan", "llama3_405b.toml", 128),
                                                ("torchtitan", "deepseek_v3_16b.toml", 8)])
def test_no_sampled_refused_setting_is_one_the_framework_accepts(kind, name, world):
    p = _megatron(name) if kind == "megatron" else _torchtitan(name, world)
    space = mg.knob_space_for(p) if kind == "megatron" else tt.knob_space_for(p)
    c = fidelity.count(kind, p, space, world=world, sample=0, refused_sample=12, seed=1)
    assert c.sampled_refused >= 10 and c.false_invalid == 0, c.examples


@needs_mcore
def test_values_megatron_ignores_are_mapped_not_refused():
    p = _megatron("gpt2_345m_idioms.sh")  # TP 2 on 4 GPUs, no recompute
    space = mg.knob_space_for(p)
    base = space.complete(p.setting)
    assert space.derive(base.replace(recompute_method="block")) == base  # inert without recompute
    tp1 = space.derive(base.replace(tensor_parallel=1, sequence_parallel=True))
    assert tp1["sequence_parallel"] is False and tp1["data_parallel"] == 4  # validate_args switches SP off at TP 1
    assert mg.violations(p, {"recompute_method": "block"}) == []
    sel = base.replace(recompute_granularity="selective", recompute_method="block")
    assert not space.is_valid(sel)  # Megatron's validate_args refuses it: the space says so, the framework too
    assert mcheck.megatron_args_check(p.fixed, sel, world_size=p.world_size)


@needs_tt
def test_torchtitan_takes_uneven_pipeline_stages():
    p = _torchtitan("deepseek_v3_16b.toml", 8)  # 27 layers
    space = tt.knob_space_for(p)
    s = space.complete({**p.setting, "pipeline_parallel": 2, "expert_parallel": 4})
    assert s["data_parallel"] == 4 and space.is_valid(s)
    assert pipeline_refusal(p, s) == []


def test_a_scripts_pwd_is_kept_as_written(tmp_path):
    p = _megatron("gpt_pwd_paths.sh")
    spec = mg.emit_megatron(p, {**p.setting, "tensor_parallel": 4, "data_parallel": 2})
    assert "${PWD}/data/pile_text_document" in spec.argv and "${PWD}/benchmark_cache" in spec.argv
    assert not any(str(Path.cwd()) in a for a in spec.argv)
    from infrarsi.execute.local import resolve_argv

    assert f"{Path.cwd()}/benchmark_cache" in resolve_argv(spec.argv)  # where the trial starts
