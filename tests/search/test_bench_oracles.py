"""scripts/bench_search.py's diagnosis parts (scripts/bench_oracles.py): ``cold-oracle-time`` ranks with the landscape's
own step times, ``cold-oracle-physics`` / ``-formulas`` with the simulator's formulas and a GP on what they miss."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_search.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_search_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


def _oracle(bench, sd: float, monkeypatch):
    monkeypatch.setattr(bench.bench_oracles, "ORACLE_TIME_SD", sd)
    land = bench.Landscape("dense8b-h100x8", 0)
    b = bench.Bench(land, 0, "peaks")
    return land, bench.Tuner(b.space, memory_capacity_bytes=b.capacity, seed=0, time=bench.bench_oracles.OracleTime(b))


def test_time_oracle_predicts_the_landscapes_noise_free_time_and_a_time_for_settings_that_do_not_fit(
        bench, monkeypatch):
    land, t = _oracle(bench, 0.0, monkeypatch)
    pool = t.space.candidates(300, random.Random(1))
    fit = [s for s in pool if not land.simulate(s, None, 0.0).oom][:20]
    oom = [s for s in pool if land.simulate(s, None, 0.0).oom][:5]
    assert len(fit) == 20 and oom
    mean, sd = t.predict_time(fit + oom)
    truth = [math.log(land.simulate(s, None, 0.0).noise_free_step_time_s) for s in fit]
    assert mean[:20] == pytest.approx(truth, abs=1e-9)
    assert all(math.isfinite(m) for m in mean[20:]) and (sd == 1e-3).all()


def test_time_oracle_error_is_fixed_per_setting_and_stated_as_its_sd(bench, monkeypatch):
    land, exact = _oracle(bench, 0.0, monkeypatch)
    pool = exact.space.candidates(100, random.Random(2))[:40]
    m0, _ = exact.predict_time(pool)
    _, noisy = _oracle(bench, 0.1, monkeypatch)
    m1, sd1 = noisy.predict_time(pool)
    m2, _ = noisy.predict_time(list(reversed(pool)))
    err = m1 - m0
    assert m2[::-1] == pytest.approx(m1)  # the same error for the same setting, asked in any order
    assert 0.05 < err.std() < 0.2 and (sd1 == 0.1).all()


def test_time_oracle_run_is_scored_like_any_tuner(bench, monkeypatch):
    monkeypatch.setattr(bench.bench_oracles, "ORACLE_TIME_SD", 0.0)
    run = bench._job(("dense8b-h100x8", 0, 0, "peaks", "cold-oracle-time", [8], {}, {}))
    sc = run["scores"][8]
    assert run["tuner"] == "cold-oracle-time" and 0.0 < sc["frac"] <= 1.0 and "own_pick" in sc


def test_formula_time_is_the_variants_step_time_without_its_hidden_factors(bench):
    land = bench.Landscape("moe16b-h100x32", 3)
    pool = land.space.candidates(200, random.Random(3))[:40]
    ratios = [land.v.step_time(s) / land.v.formula_time(s) for s in pool]
    assert ratios == pytest.approx([land.v.time_factor(s) for s in pool], rel=1e-12)
    assert len({round(r, 9) for r in ratios}) > 5  # the hidden factors differ from setting to setting
    drawn = [land.v.formula_time(s) for s in pool]
    nominal = [land.v.formula_time(s, drawn=False) for s in pool]
    gaps = sorted(abs(math.log(a / b)) for a, b in zip(drawn, nominal))
    assert gaps[len(gaps) // 2] > 0.01  # the drawn hardware is not the nominal
    base = bench.Landscape("moe16b-h100x32", None)
    fit = [s for s in pool if not base.simulate(s, None, 0.0).oom]
    assert fit and [land.v.formula_time(s, drawn=False) for s in fit] == pytest.approx(
        [base.simulate(s, None, 0.0).noise_free_step_time_s for s in fit], rel=1e-12)


def test_physics_oracle_starts_at_the_formulas_and_learns_the_hidden_factors_from_trials(bench):
    land = bench.Landscape("moe16b-h100x32", 3)
    b = bench.Bench(land, 0, "peaks")
    t = bench.Tuner(b.space, memory_capacity_bytes=b.capacity, seed=0, time=bench.bench_oracles.OraclePhysics(b))
    pool = [s for s in t.space.candidates(400, random.Random(4)) if not land.simulate(s, None, 0.0).oom]
    tried, held = pool[:25], pool[25:]
    mean, sd = t.predict_time(tried)
    assert mean == pytest.approx([math.log(land.v.formula_time(s)) for s in tried]) and (sd == 0.1).all()
    for s in tried:
        t.tell(s, b(s))
    t.fit_models()
    truth = [math.log(land.v.step_time(s)) for s in tried]
    formula = [math.log(land.v.formula_time(s)) for s in tried]
    mean, sd = t.predict_time(tried)
    before = sum(abs(f - y) for f, y in zip(formula, truth))
    after = sum(abs(m - y) for m, y in zip(mean, truth))
    assert after < 0.5 * before  # at the trials, the GP took up what the formulas miss
    assert (sd < 0.1).all()
    m_held, _ = t.predict_time(held[:20])
    assert all(math.isfinite(m) for m in m_held)


def test_physics_oracles_refuse_a_named_workload_and_run_on_a_variant(bench):
    b = bench.Bench(bench.Landscape("dense8b-h100x8", None), 0, "peaks")
    with pytest.raises(SystemExit, match="need a perturbed variant"):
        bench.bench_oracles.OraclePhysics(b, drawn=False)
    run = bench._job(("dense8b-h100x8", 0, 0, "peaks", "cold-oracle-formulas", [8], {}, {}))
    assert run["tuner"] == "cold-oracle-formulas" and 0.0 < run["scores"][8]["frac"] <= 1.0
