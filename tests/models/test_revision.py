"""Prior revision: a prior with the wrong sign is flagged and corrected within 20 trials; a
right prior is not flagged; effects print as percentages."""

from __future__ import annotations

import dataclasses

import numpy as np

from infrarsi.models import MemoryModel, TimeModel, revision
from infrarsi.models.revision import Effect
from infrarsi.trial.prior import Prior


def test_wrong_sign_priors_flagged_and_corrected_within_20_trials(space, truth, time_coef, mem_coef):
    priors = [
        # wrong: full recompute is slower (+0.3), and the distributed optimizer saves memory (-0.25)
        Prior(knob="recompute_granularity", value="full", time_mean=-0.2, time_sd=0.1, source="llm"),
        Prior(knob="distributed_optimizer", value=True, mem_mean=0.2, mem_sd=0.1, source="llm"),
        # right, and confident
        Prior(knob="tensor_parallel", value=2, time_mean=0.1, time_sd=0.05, mem_mean=-0.35, mem_sd=0.1, source="offline"),
        # about a knob this space does not have: ignored
        Prior(knob="use_flash_attn", value=True, time_mean=-0.1, source="offline"),
    ]
    rng = np.random.default_rng(12)
    pool = list(space.enumerate())
    settings = [pool[i] for i in rng.integers(0, len(pool), size=20)]
    truth = dataclasses.replace(truth, capacity_bytes=96 * 2**30)  # fewer OOMs: most trials time
    times, peaks, ooms = truth.simulate(settings, rng)
    assert 2 <= ooms.sum() <= 8
    # the wrongly-believed value was tried: full recompute in >= 5 timed trials of the 20
    assert sum(s["recompute_granularity"] == "full" and np.isfinite(t) for s, t in zip(settings, times)) >= 5
    tm = TimeModel(space, priors=priors, noise_cv=0.02).fit(settings, times)
    mm = MemoryModel(space, truth.capacity_bytes, priors=priors).fit(settings, peaks, ooms)
    assert [p.feature for p in tm.design.unused_priors] == ["use_flash_attn=True"]

    rt = {r.feature: r for r in revision(priors, tm)}
    rm = {r.feature: r for r in revision(priors, mm)}
    assert "use_flash_attn=True" not in rt

    r = rt["recompute_granularity=full"]
    assert r.miscalibrated and r.direction == "wrong sign" and r.source == "llm"
    assert r.post_lo <= time_coef["recompute_granularity=full"] <= r.post_hi  # corrected
    r = rm["distributed_optimizer=True"]
    assert r.miscalibrated and r.direction == "wrong sign"
    assert r.post_hi < 0  # corrected to the right sign (memory scatter 0.1: the size is still shrunk toward the prior)
    assert not rt["tensor_parallel=2"].miscalibrated and rt["tensor_parallel=2"].direction == "consistent"
    assert not rm["tensor_parallel=2"].miscalibrated
    # a prior with no data against it stays as it was
    assert not rt["distributed_optimizer=True"].miscalibrated
    assert "wrong sign" in str(rt["recompute_granularity=full"])


def test_size_errors_are_named():
    from infrarsi.models.revision import _direction

    e = Effect("k=v", "time", mean=0.5, lo=0.4, hi=0.6, prior_mean=0.1, prior_sd=0.05, source="llm")
    assert _direction(0.1, e, True) == "stronger than believed"
    e = Effect("k=v", "time", mean=0.01, lo=-0.02, hi=0.04, prior_mean=0.3, prior_sd=0.05, source="llm")
    assert _direction(0.3, e, True) == "weaker than believed"


def test_effect_prints_as_percent():
    e = Effect("recompute_granularity=selective", "memory", mean=-0.478, lo=-0.598, hi=-0.357,
               prior_mean=0.0, prior_sd=1.0, source="uninformative")
    assert str(e) == "recompute_granularity=selective: -38% [-45, -30] memory"
