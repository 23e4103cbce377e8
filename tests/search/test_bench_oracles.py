"""scripts/bench_search.py's diagnosis tuners: ``cold-oracle-time`` ranks with the landscape's own step times."""

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
    monkeypatch.setattr(bench, "ORACLE_TIME_SD", sd)
    land = bench.Landscape("dense8b-h100x8", 0)
    b = bench.Bench(land, 0, "peaks")
    return land, bench.OracleTimeTuner(b.space, bench=b, memory_capacity_bytes=b.capacity, seed=0)


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
    monkeypatch.setattr(bench, "ORACLE_TIME_SD", 0.0)
    run = bench._job(("dense8b-h100x8", 0, 0, "peaks", "cold-oracle-time", [8], {}))
    sc = run["scores"][8]
    assert run["tuner"] == "cold-oracle-time" and 0.0 < sc["frac"] <= 1.0 and "own_pick" in sc
