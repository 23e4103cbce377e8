"""The search learns from every trial: memory from both sides of the capacity, and time against wrong priors."""

import math
import random

import numpy as np
import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.models import MemoryModel
from infrarsi.models._fit import GridPosterior
from infrarsi.models.revision import revision
from infrarsi.trial.prior import Prior
from infrarsi.search.surrogate import Surrogate
from infrarsi.search import JointTime, Outcome, ResidualTime, Steps, StructuredPeak, Tuner, TunerConfig, run_tuner

CAP = 80e9


def space():
    return KnobSpace(knobs=[Knob(name="mbs", kind="int", domain=[1, 2, 4, 8, 16]),
                            Knob(name="recompute", kind="categorical", domain=["none", "selective", "full"]),
                            Knob(name="tp", kind="int", domain=[1, 2, 4]),
                            Knob(name="fused", kind="bool")])


def peak(s, base=40e9):
    return base * s["mbs"] / s["tp"] ** 0.5 * {"none": 1.0, "selective": 0.6, "full": 0.25}[s["recompute"]]


def step_time(s):
    return (1 - 0.1 * math.log2(s["mbs"])) * {"none": 1.0, "selective": 1.05, "full": 1.3}[s["recompute"]] \
        * (1 + 0.1 * math.log2(s["tp"])) * (0.95 if s["fused"] else 1.0)


def time_only(s):
    """An ok trial reports its step time and nothing about memory; an OOM says only peak > capacity."""
    if peak(s) > CAP:
        return Outcome("oom")
    return Outcome("ok", step_time_s=step_time(s))


def test_a_trial_that_ran_is_a_censored_memory_observation():
    sp = space()
    fit = [s for s in sp.enumerate() if peak(s) <= CAP]
    oom = [s for s in sp.enumerate() if peak(s) > CAP]
    rng = random.Random(0)
    seen_fit, seen_oom = rng.sample(fit, 8), rng.sample(oom, 4)
    rows = seen_fit + seen_oom
    ooms = [False] * len(seen_fit) + [True] * len(seen_oom)
    two_sided = MemoryModel(sp, CAP).fit(rows, [None] * len(rows), ooms, fits=[not o for o in ooms])
    one_sided = MemoryModel(sp, CAP).fit(rows, [None] * len(rows), ooms)  # "ran" ignored: only OOMs count
    assert two_sided.n_fit == 8 and two_sided.n_censored == 4 and one_sided.n_fit == 0
    # The settings seen to run are priced as fitting only when "it ran" is used.
    assert two_sided.p_oom(seen_fit).max() < 0.5
    assert one_sided.p_oom(seen_fit).mean() > two_sided.p_oom(seen_fit).mean() + 0.2
    # ... and the model separates unseen settings of both kinds better than chance.
    rest_fit = [s for s in fit if s not in seen_fit]
    rest_oom = [s for s in oom if s not in seen_oom]
    assert two_sided.p_oom(rest_oom).mean() > two_sided.p_oom(rest_fit).mean() + 0.2


def test_time_only_tuner_stops_proposing_what_it_has_seen_fail():
    """Told only "ok" (no peak) or "oom", the tuner prices the boundary from both sides: its OOM share
    falls as evidence accumulates and stays far below that of a tuner that learns from OOMs alone."""
    sp = space()
    ooms = {True: [], False: []}
    for two_sided in (True, False):
        for seed in range(3):
            t = Tuner(sp, memory_capacity_bytes=CAP, seed=seed, memory=StructuredPeak(from_runs_without_peak=two_sided))
            ooms[two_sided].append([o.status == "oom" for _, o in run_tuner(t, time_only, 24)])
    late = {k: sum(sum(x[12:]) for x in v) for k, v in ooms.items()}
    assert late[True] <= 0.5 * late[False], ooms
    assert sum(map(sum, ooms[True])) < 0.7 * sum(map(sum, ooms[False])), ooms


def test_a_wrong_prior_is_overturned_and_flagged():
    sp = space()
    # Believed with confidence: full recompute makes steps 40% faster. The truth: 30% slower.
    wrong = Prior(knob="recompute", value="full", time_mean=math.log(0.6), time_sd=0.1, source="llm")
    rng = random.Random(1)

    def noisy(s):  # the default (no recompute) fits at small micro-batches, so the effect is identifiable
        if peak(s, 12e9) > CAP:
            return Outcome("oom")
        return Outcome("ok", step_time_s=step_time(s) * math.exp(rng.gauss(0, 0.02)), peak_memory_bytes=peak(s, 12e9))

    # The baseline (the default setting) runs first, as in the run stage: effects are relative to it.
    t = Tuner(sp, memory_capacity_bytes=CAP, priors=[wrong], noise_cv=0.02, seed=0, initial=[sp.default()])
    run_tuner(t, noisy, 20)
    t.fit_models()
    eff = {e.feature: e for e in t.time_model.effects()}["recompute=full"]
    assert eff.mean > 0.0 and eff.hi > 0.15, eff  # the posterior sits on the right side: full recompute is slower
    rev = {r.feature: r for r in revision([wrong], t.time_model)}["recompute=full"]
    assert rev.miscalibrated, rev  # the prior's 90% interval and the posterior's do not overlap
    best, _ = t.best()
    assert best["recompute"] != "full"


def test_ask_survives_a_fit_that_fails_on_its_numerics(monkeypatch):
    sp = space()
    t = Tuner(sp, memory_capacity_bytes=CAP, seed=0)
    run_tuner(t, time_only, 6)
    hungry = {"mbs": 16, "recompute": "none", "tp": 1, "fused": False}  # an OOM in the history, whatever the search ran
    t.tell(hungry, time_only(hungry))
    t.ask()

    def broken(*a, **k):
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    monkeypatch.setattr(t.memory_model, "fit", broken)
    t.tell(t.ask(), Outcome("oom"))
    s = t.ask()  # refits: the search goes on
    assert sp.is_valid(s)
    # the additive memory model (what the report shows) is fitted when read, once the structured one prices P(OOM):
    # its fit fails, the previous posterior is kept and the failure is logged
    assert t.memory_model.n_censored > 0
    assert t.numerics_log and "memory model fit failed" in t.numerics_log[-1]


def test_a_posterior_draw_survives_a_covariance_rounded_off_positive_definite():
    # a rank-1 covariance with a rounding-sized negative eigenvalue, as a near-duplicate design row leaves it
    v = np.array([1.0, 1.0, 1e-9])
    cov = np.outer(v, v) - 1e-12 * np.eye(3)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(cov)
    post = GridPosterior(np.zeros(1), np.ones(1), np.zeros((1, 3)), cov[None])
    theta, sigma = post.sample(500, np.random.default_rng(0))
    assert np.isfinite(theta).all() and theta.shape == (500, 3) and sigma.shape == (500,)
    assert abs(np.corrcoef(theta[:, 0], theta[:, 1])[0, 1] - 1.0) < 1e-3  # the draw keeps the covariance


@pytest.mark.parametrize("joint", [True, False])
def test_ask_survives_a_thompson_draw_that_fails_on_its_numerics(monkeypatch, joint):
    sp = space()
    t = Tuner(sp, memory_capacity_bytes=CAP, seed=0, config=TunerConfig(local_every=0),
              time=JointTime() if joint else ResidualTime(), steps=Steps(thompson_every=1))
    run_tuner(t, time_only, 6)

    def broken(*a, **k):
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    if joint:  # the draw comes from the joint GP (refit at the next ask: patch its class)
        monkeypatch.setattr(Surrogate, "sample", broken)
    else:
        monkeypatch.setattr(t.time_model, "sample", broken)
    s = t.ask()  # every model-guided ask would be a Thompson step: it falls back to the EI maximiser
    assert sp.is_valid(s) and t.why(s).kind in ("acquisition", "paired")
    assert "Thompson draw failed" in t.numerics_log[-1]
