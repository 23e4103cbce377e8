"""Seeding: a new run starts from the most similar past runs' best settings and learned effects."""

from __future__ import annotations

import math

import pytest

from infrarsi.bank import Bank, Seed, seed_from_bank
from infrarsi.knobs import Knob, KnobSpace
from infrarsi.trial.prior import Prior

from .conftest import A100, H100, LLAMA8B, LLAMA70B, MIXTRAL, GiB, make_trial


def _space(tp_default: int = 1) -> KnobSpace:
    return KnobSpace(
        knobs=[Knob(name="tp", kind="int", domain=(1, 2, 4, 8), default=tp_default),
               Knob(name="mbs", kind="int", domain=(1, 2, 4)),
               Knob(name="recompute", kind="categorical", domain=("none", "full"))],
        constraints=[lambda s: None if s["tp"] * s["mbs"] <= 16 else f"tp*mbs = {s['tp'] * s['mbs']} > 16"],
    )


def _fill(b: Bank) -> None:
    # the 8B on A100: best tp=2 mbs=2, then tp=4; a setting with cp=4 that the new space cannot express
    b.add_trials("a100-8b", [
        make_trial(0, {"tp": 1, "mbs": 1}, 2.0, role="baseline", peak_gib=40),
        make_trial(1, {"tp": 2, "mbs": 2}, 1.0),
        make_trial(2, {"tp": 4, "mbs": 1}, 1.1),
        make_trial(3, {"tp": 2, "mbs": 2, "recompute": "selective"}, 0.9),  # 'selective' is not in the new domain
        make_trial(4, {"tp": 1, "mbs": 4}, None, status="oom", peak_gib=None),
    ], hardware=A100, workload=LLAMA8B)
    b.add_posteriors("a100-8b", [Prior(knob="tp", value=2, time_mean=-0.3, time_sd=0.05, mem_mean=-0.5, mem_sd=0.05),
                                 Prior(knob="tp", value=4, time_mean=-0.4, time_sd=0.05, mem_mean=-0.9, mem_sd=0.05),
                                 Prior(knob="cp", value=2, time_mean=-0.1)],  # a knob the new space lacks
                     hardware=A100, workload=LLAMA8B, reference_peak_bytes=40 * GiB)
    b.add_trials("a100-70b", [make_trial(0, {"tp": 8, "mbs": 1}, 5.0), make_trial(1, {"tp": 4, "mbs": 1}, 6.0)],
                 hardware=A100, workload=LLAMA70B)
    b.add_posteriors("a100-70b", [Prior(knob="tp", value=2, time_mean=0.1, time_sd=0.05)],
                     hardware=A100, workload=LLAMA70B)
    b.add_trials("a100-moe", [make_trial(0, {"tp": 1, "mbs": 4}, 3.0)], hardware=A100, workload=MIXTRAL)
    b.add_trials("h100-8b-all-failed", [make_trial(0, {"tp": 1, "mbs": 4}, None, status="oom")],
                 hardware=H100, workload=LLAMA8B)


def test_seed_picks_the_most_similar_workload_across_hardware(bank):
    _fill(bank)
    seed = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, k=3)
    assert [s.run_id for s in seed.sources] == ["a100-8b", "a100-70b", "a100-moe"]  # no ok trial: skipped
    assert seed.sources[0].hw_distance == pytest.approx(1.0) and seed.sources[0].wl_distance == 0
    # the 8B's fastest expressible settings first; 'selective' could not be mapped and was dropped
    assert seed.initial[0] == {"tp": 2, "mbs": 2, "recompute": "none"}
    assert {"tp": 2, "mbs": 2, "recompute": "selective"} not in [dict(s) for s in seed.initial]
    assert len(seed.initial) == 3 and all(_space().is_valid(s) for s in seed.initial)

    big = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA70B, k=1)
    assert big.sources[0].run_id == "a100-70b" and big.initial == [{"tp": 8, "mbs": 1, "recompute": "none"}]
    moe = seed_from_bank(bank, _space(), hardware=H100, workload=MIXTRAL, k=1)
    assert moe.sources[0].run_id == "a100-moe" and moe.initial == [{"tp": 1, "mbs": 4, "recompute": "none"}]


def test_seed_priors_are_similarity_weighted_and_widened(bank):
    _fill(bank)
    seed = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, k=3)
    pri = {p.feature: p for p in seed.priors}
    assert set(pri) == {"tp=2", "tp=4"}  # cp is not in the new space
    # tp=2: the 8B (-0.3, sim e^-1) outweighs the 70B (+0.1, sim e^-(1+d)) but the disagreement widens it
    assert -0.3 < pri["tp=2"].time_mean < -0.1
    assert pri["tp=2"].time_sd > 0.15 and pri["tp=2"].source == "bank"
    assert pri["tp=4"].time_mean == pytest.approx(-0.4) and pri["tp=4"].time_sd > 0.05
    assert pri["tp=4"].mem_mean == pytest.approx(-0.9)  # no target baseline: kept relative


def test_seed_rebases_memory_in_bytes_with_a_target_baseline(bank):
    _fill(bank)
    seed = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, k=1, max_sources=1, reference_peak_bytes=80 * GiB)
    pri = {p.feature: p for p in seed.priors}
    saved = 40 * GiB * (1 - math.exp(-0.5))  # what tp=2 saved on the A100 run (reference peak 40 GiB)
    assert pri["tp=2"].mem_mean == pytest.approx(math.log((80 * GiB - saved) / (80 * GiB)))
    assert bank.runs()[0].reference_peak_bytes == 40 * GiB


def test_seed_rereferences_effects_to_the_new_default(bank):
    _fill(bank)
    seed = seed_from_bank(bank, _space(tp_default=2), hardware=H100, workload=LLAMA8B, max_sources=1)
    pri = {p.feature: p for p in seed.priors}
    assert "tp=2" not in pri  # the reference now
    assert pri["tp=4"].time_mean == pytest.approx(-0.4 - -0.3)
    assert pri["tp=4"].mem_mean == pytest.approx(-0.9 - -0.5)


def test_seed_from_nothing_similar_is_empty(bank, tmp_path):
    assert seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B) == Seed([], [], [])
    _fill(bank)
    far = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, max_distance=0.5)
    assert far.sources == [] and "unseeded" in far.describe()
    only = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, exclude_runs=["a100-8b"])
    assert "a100-8b" not in [s.run_id for s in only.sources]
    with pytest.raises(ValueError, match="k >= 0"):
        seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, k=-1)


def test_seed_upgrades_the_best_with_values_its_source_could_not_run(bank):
    _fill(bank)
    sp = KnobSpace(knobs=[*_space().knobs, Knob(name="fp8", kind="categorical", domain=("none", "delayed"))],
                   constraints=_space().constraints)
    base = [Prior(knob="fp8", value="delayed", time_mean=-0.2, time_sd=0.1, source="offline"),
            Prior(knob="tp", value=4, time_mean=-0.5, time_sd=0.1, source="offline"),  # the source measured tp=4
            Prior(knob="recompute", value="full", time_mean=0.3, time_sd=0.1, source="offline")]  # predicted slower
    seed = seed_from_bank(bank, sp, hardware=H100, workload=LLAMA8B, k=3, max_sources=1, base_priors=base)
    best = {"tp": 2, "mbs": 2, "recompute": "none", "fp8": "none"}
    assert seed.initial == [best, {**best, "fp8": "delayed"}, {"tp": 4, "mbs": 1, "recompute": "none", "fp8": "none"}]
    assert seed_from_bank(bank, sp, hardware=H100, workload=LLAMA8B, k=3, max_sources=1).initial[1] != {**best, "fp8": "delayed"}


def test_merged_with_multiplies_or_replaces_and_keeps_one_sided_priors(bank):
    _fill(bank)
    seed = seed_from_bank(bank, _space(), hardware=H100, workload=LLAMA8B, max_sources=1)
    b = {p.feature: p for p in seed.priors}["tp=2"]
    offline = [Prior(knob="tp", value=2, time_mean=-0.1, time_sd=0.1, mem_mean=-0.6, mem_sd=0.2, source="offline"),
               Prior(knob="recompute", value="full", time_mean=0.3, time_sd=0.1, source="offline")]
    got = {p.feature: p for p in seed.merged_with(offline)}
    w1, w2 = 1 / 0.1**2, 1 / b.time_sd**2
    assert got["tp=2"].time_mean == pytest.approx((w1 * -0.1 + w2 * b.time_mean) / (w1 + w2))
    assert got["tp=2"].time_sd == pytest.approx((w1 + w2) ** -0.5) and got["tp=2"].time_sd < min(0.1, b.time_sd)
    assert got["recompute=full"] == offline[1]  # the bank knows nothing about it
    assert got["tp=4"].source == "bank"  # only the bank knows it
    assert {p.feature: p for p in seed.merged_with(offline, how="replace")}["tp=2"] == b
    with pytest.raises(ValueError, match="product"):
        seed.merged_with(offline, how="average")
