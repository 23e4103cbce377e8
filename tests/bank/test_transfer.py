"""Transfer: settings mapped into a new space, knob effects carried across hardware and workloads."""

from __future__ import annotations

import math
import random

import pytest

from infrarsi.bank import combine, distill, map_setting, transfer_prior
from infrarsi.bank.transfer import MEM_SD_PER_HW, TIME_SD_PER_HW, TIME_SD_PER_WL, Z90
from infrarsi.trial import Metrics, Trial
from infrarsi.knobs import Knob, KnobSpace
from infrarsi.trial.prior import Prior

GiB = 2**30


def _space() -> KnobSpace:
    return KnobSpace(
        knobs=[Knob(name="tp", kind="int", domain=(1, 2, 4, 8)), Knob(name="mbs", kind="int", domain=(1, 2, 4)),
               Knob(name="recompute", kind="categorical", domain=("none", "selective", "full")),
               Knob(name="overlap", kind="bool")],
        constraints=[lambda s: None if s["tp"] * s["mbs"] <= 16 else f"tp*mbs = {s['tp'] * s['mbs']} > 16"],
    )


def test_map_setting_keeps_fills_moves_and_drops():
    sp = _space()
    assert map_setting({"tp": 2, "mbs": 2, "recompute": "full", "overlap": True}, sp) == {
        "tp": 2, "mbs": 2, "recompute": "full", "overlap": True}
    # a knob the new space lacks is dropped; a missing one takes the default
    assert map_setting({"tp": 4, "cp": 2}, sp) == {"tp": 4, "mbs": 1, "recompute": "none", "overlap": False}
    # ints outside the domain move to the nearest valid value on a log2 scale: 16 -> 8; 3 -> 4 (log2 4/3 < log2 3/2)
    assert map_setting({"tp": 16}, sp)["tp"] == 8
    assert map_setting({"tp": 1, "mbs": 3}, sp)["mbs"] == 4
    assert map_setting({"tp": 16, "mbs": 3}, sp) is None  # moved to 8 x 4 = 32: breaks the constraint
    # categorical outside the domain, a bool given for an int, a broken constraint: dropped
    assert map_setting({"recompute": "block"}, sp) is None
    assert map_setting({"tp": True}, sp) is None
    assert map_setting({"tp": 8, "mbs": 4}, sp) is None  # 32 > 16


def test_time_effect_is_relative_and_widened_by_distance():
    p = Prior(knob="tp", value=2, time_mean=-0.2, time_sd=0.1, mem_mean=-0.3, mem_sd=0.1)
    same = transfer_prior(p, hw_distance=0, wl_distance=0, same_task=True)
    assert (same.time_mean, same.time_sd, same.mem_mean, same.mem_sd) == pytest.approx((-0.2, 0.1, -0.3, 0.1))
    far = transfer_prior(p, hw_distance=1.0, wl_distance=0.5, same_task=False)
    assert far.time_mean == -0.2 and far.source == "bank"
    assert far.time_sd == pytest.approx(math.sqrt(0.1**2 + TIME_SD_PER_HW**2 + (TIME_SD_PER_WL * 0.5) ** 2))
    assert far.mem_sd > same.mem_sd and far.mem_mean == -0.3  # other workload: kept relative


def test_memory_effect_moves_in_bytes_for_the_same_task():
    # source: baseline 40 GiB, recompute saves 40 * (1 - e^-0.5) = 15.74 GiB
    p = Prior(knob="recompute", value="full", time_mean=0.25, time_sd=0.05, mem_mean=-0.5, mem_sd=0.05)
    t = transfer_prior(p, hw_distance=1.0, wl_distance=0.0, same_task=True,
                       source_peak_bytes=40 * GiB, target_peak_bytes=60 * GiB)
    saved = 40 * GiB * (1 - math.exp(-0.5))
    assert t.mem_mean == pytest.approx(math.log((60 * GiB - saved) / (60 * GiB)))  # -0.30: a smaller fraction
    assert -0.5 < t.mem_mean < 0
    sd = 0.05 * 40 * math.exp(-0.5) / (60 - saved / GiB)
    assert t.mem_sd == pytest.approx(math.sqrt(sd**2 + MEM_SD_PER_HW**2))
    # without a target baseline the effect stays relative
    rel = transfer_prior(p, hw_distance=1.0, wl_distance=0.0, same_task=True, source_peak_bytes=40 * GiB)
    assert rel.mem_mean == -0.5
    # saving more than the target's whole peak is floored at 5% of it
    big = transfer_prior(p, hw_distance=0, wl_distance=0, same_task=True,
                         source_peak_bytes=400 * GiB, target_peak_bytes=10 * GiB)
    assert big.mem_mean == pytest.approx(math.log(0.05))


def test_combine_moment_matches_and_disagreement_widens():
    a = Prior(knob="tp", value=2, time_mean=-0.2, time_sd=0.1)
    b = Prior(knob="tp", value=2, time_mean=0.2, time_sd=0.1)
    c = combine([a, b], [1.0, 1.0])
    assert c.time_mean == pytest.approx(0.0) and c.time_sd == pytest.approx(math.sqrt(0.01 + 0.04))
    w = combine([a, b], [3.0, 1.0])
    assert w.time_mean == pytest.approx(-0.1)
    with pytest.raises(ValueError, match="one weight per prior"):
        combine([a], [1.0, 2.0])


def test_distill_recovers_knob_effects_from_trials():
    sp = _space()
    rng = random.Random(0)
    trials = []
    # truth: tp=2 -> -0.3, tp=4 -> -0.45 on log time; recompute=full -> +0.2 time, -0.6 memory
    for i, s in enumerate(sp.sample(rng, 60)):
        lt = 0.0 + {1: 0, 2: -0.3, 4: -0.45, 8: -0.4}[s["tp"]] + (0.2 if s["recompute"] == "full" else 0)
        lm = math.log(30 * GiB) + (-0.6 if s["recompute"] == "full" else 0) + 0.3 * math.log2(s["mbs"])
        trials.append(Trial(id=i, setting=dict(s), status="ok",
                            metrics=Metrics(step_time_s=math.exp(lt + rng.gauss(0, 0.02)),
                                            peak_memory_bytes=math.exp(lm + rng.gauss(0, 0.02)))))
    trials.append(Trial(id=99, setting={"tp": 1, "mbs": 4}, status="oom"))  # censored: not used for effects
    got = {p.feature: p for p in distill(trials, sp)}
    assert got["tp=2"].time_mean == pytest.approx(-0.3, abs=0.05)
    assert got["tp=4"].time_mean == pytest.approx(-0.45, abs=0.05)
    assert got["recompute=full"].time_mean == pytest.approx(0.2, abs=0.05)
    assert got["recompute=full"].mem_mean == pytest.approx(-0.6, abs=0.05)
    assert got["tp=2"].time_sd < 0.05
    assert distill([], sp) == []


def test_priors_from_effects_reads_the_models_effects():
    from dataclasses import dataclass

    from infrarsi.bank import priors_from_effects

    @dataclass
    class Eff:  # the fields TimeModel/MemoryModel.effects() rows carry
        feature: str
        mean: float
        lo: float
        hi: float

    sp = _space()
    time_eff = [Eff("tp=2", -0.3, -0.3 - Z90 * 0.1, -0.3 + Z90 * 0.1), Eff("overlap=True", -0.05, -0.2, 0.1),
                Eff("log2(tp)*overlap=True", 0.1, 0.0, 0.2), Eff("cp=2", -0.1, -0.2, 0.0)]
    mem_eff = [Eff("tp=2", -0.5, -0.6, -0.4)]
    got = {p.feature: p for p in priors_from_effects(time_eff, mem_eff, space=sp)}
    assert set(got) == {"tp=2", "overlap=True"}  # interactions and knobs outside the space skipped
    assert got["tp=2"].value == 2 and got["overlap=True"].value is True
    assert got["tp=2"].time_sd == pytest.approx(0.1) and got["tp=2"].mem_mean == -0.5
    assert got["overlap=True"].mem_sd == 1.0  # no memory effect: uninformative
    free = {p.feature: p for p in priors_from_effects(time_eff)}
    assert free["cp=2"].value == 2 and free["overlap=True"].value is True


def test_priors_from_a_fitted_time_model():
    from infrarsi.models import TimeModel
    from infrarsi.bank import priors_from_effects

    sp = _space()
    rng = random.Random(1)
    settings = sp.sample(rng, 24)
    times = [math.exp({1: 0, 2: -0.3, 4: -0.45, 8: -0.4}[s["tp"]] + rng.gauss(0, 0.02)) for s in settings]
    tm = TimeModel(sp, seed=0)
    tm.fit(settings, times)
    got = {p.feature: p for p in priors_from_effects(tm.effects(), space=sp)}
    assert set(got) == set(sp.feature_names)
    assert got["tp=2"].time_mean == pytest.approx(-0.3, abs=0.1)
