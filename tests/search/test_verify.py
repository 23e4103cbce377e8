"""Re-verification statistics: the paired CI and the promotion rule, including the A/A false-promotion rate."""

import math
import random

import pytest

from infrarsi.search.verify import promote, speedup_ci


def test_a_clear_speedup_is_promoted_with_the_arithmetic_in_the_reason():
    base = [1.00, 1.02, 0.99, 1.01]
    cand = [0.80, 0.81, 0.79, 0.80]
    s = speedup_ci(base, cand)
    assert s.speedup == pytest.approx(1.2625, rel=0.01) and s.lo > 1.2 and s.hi < 1.32
    ok, why = promote(s, mde=0.03)
    assert ok and "lower bound > 1 + mde = 1.030" in why


def test_a_change_within_the_noise_is_not_promoted():
    ok, why = promote(speedup_ci([1.0, 1.1, 0.95], [0.97, 1.05, 1.0]), mde=0.02)
    assert not ok and "not promoted" in why


def test_too_few_pairs_is_an_error():
    with pytest.raises(ValueError, match=">= 2 interleaved pairs"):
        speedup_ci([1.0], [1.0])


@pytest.mark.parametrize("cv,repeats", [(0.02, 3), (0.05, 4), (0.10, 2)])
def test_aa_promotes_at_most_5_percent_of_the_time(cv, repeats):
    """A/A: the candidate is the baseline. With the doctor's mde for that noise, promotion must be rare."""
    rng = random.Random(7)
    mde = 2.80 * cv * math.sqrt(2.0 / repeats)  # the doctor's formula
    n, promoted = 2000, 0
    for _ in range(n):
        a = [math.exp(rng.gauss(0, cv)) for _ in range(repeats)]
        b = [math.exp(rng.gauss(0, cv)) for _ in range(repeats)]
        promoted += promote(speedup_ci(a, b), mde)[0]
    assert promoted / n <= 0.05
