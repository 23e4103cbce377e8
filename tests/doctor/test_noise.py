"""Noise statistics: CV, bootstrap CI of the median, MDE and repeats, with hand-checked numbers."""

from __future__ import annotations

import math
import statistics

import pytest

from infrarsi.doctor.noise import (bootstrap_median_ci, cv, mde, median_phases, noise_warning, profile, repeats_for)


def test_cv_and_its_guards():
    assert math.isclose(cv([1.0, 1.1, 0.9]), 0.1)  # sd 0.1 / mean 1.0
    with pytest.raises(ValueError, match="at least 2"):
        cv([1.0])


def test_mde_and_repeats_match_the_documented_formula():
    # CV 3%, 5 repeats: 2.80 * 0.03 * sqrt(2/5) = 0.0531
    assert math.isclose(mde(0.03, 5), 2.801585 * 0.03 * math.sqrt(0.4), rel_tol=1e-6)
    assert round(mde(0.03, 5), 4) == 0.0532
    assert repeats_for(0.02, 0.03) == 36  # ceil(2 * (2.80 * 0.03 / 0.02)^2) = ceil(35.3)
    assert repeats_for(0.02, 0.001) == 2  # never fewer than 2
    assert mde(0.03, repeats_for(0.02, 0.03)) <= 0.02 < mde(0.03, repeats_for(0.02, 0.03) - 1)


def test_bootstrap_ci_brackets_the_median_and_narrows_with_more_runs():
    few = [1.00, 1.05, 0.97, 1.10, 0.95]
    lo, hi = bootstrap_median_ci(few)
    assert lo <= statistics.median(few) <= hi and min(few) <= lo and hi <= max(few)
    assert bootstrap_median_ci(few) == (lo, hi)  # seeded: reproducible
    many = few * 8
    lo2, hi2 = bootstrap_median_ci(many)
    assert hi2 - lo2 < hi - lo


def test_profile_phases_and_warning():
    p = profile([1.0, 1.02, 0.98], trial_ids=[0, 1, 2], phases=[{"fwd": 0.4, "bwd": 0.6}, {"fwd": 0.5}, {"fwd": 0.3, "bwd": 0.8}])
    assert p.median_step_s == 1.0 and p.repeats == 3 and p.phases == {"fwd": 0.4, "bwd": 0.7}
    assert p.summary_json().keys() == {"cv", "median_step_s", "ci95", "mde", "repeats", "phases"}
    w = noise_warning(p)  # CV 2%: MDE with 3 repeats is 4.6%
    assert w is not None and f"{p.repeats_for_target} repeats" in w and "2% change" in w
    quiet = profile([1.0, 1.0001, 0.9999], trial_ids=[0, 1, 2])
    assert noise_warning(quiet) is None
    assert median_phases([]) == {}
