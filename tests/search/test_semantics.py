"""What the knobs mean for step time: weak priors a cold search holds, that given priors replace and trials overturn."""

import math
import random

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.trial.prior import Prior
from infrarsi.search import Outcome, Tuner, TunerConfig
from infrarsi.search.semantics import TIME, semantic_priors
from infrarsi.testing.synthetic import ten_knob_space

CAP = 1e15  # nothing runs out of memory here


def test_only_the_values_in_the_space_that_no_given_prior_states():
    space = KnobSpace(knobs=[Knob(name="recompute_granularity", kind="categorical", domain=["none", "full"]),
                             Knob(name="tp_comm_overlap", kind="bool"),
                             Knob(name="tensor_parallel", kind="int", domain=[1, 2, 4])])
    given = [Prior(knob="tp_comm_overlap", value=True, time_mean=0.1, time_sd=0.05, source="llm")]
    got = {p.feature: p for p in semantic_priors(space, given=given)}
    assert set(got) == {"recompute_granularity=full"}  # no "selective" in the domain; the overlap stated; tp: none
    p = got["recompute_granularity=full"]
    assert (p.time_mean, p.time_sd) == TIME["recompute_granularity"]["full"][:2]
    assert p.source == "semantic" and p.mem_mean == 0.0 and p.rationale


def test_a_prior_is_against_the_spaces_default_whatever_it_is():
    """A launch that runs full recompute and fp32 today: dropping recompute is faster, bf16 is faster."""
    space = KnobSpace(knobs=[Knob(name="recompute_granularity", kind="categorical",
                                  domain=["none", "selective", "full"], default="full"),
                             Knob(name="bf16", kind="bool", default=False)])
    got = {p.feature: p for p in semantic_priors(space)}
    assert set(got) == {"recompute_granularity=none", "recompute_granularity=selective", "bf16=True"}
    assert math.isclose(got["recompute_granularity=none"].time_mean, -0.2)
    assert math.isclose(got["recompute_granularity=selective"].time_mean, 0.05 - 0.2)
    assert math.isclose(got["recompute_granularity=selective"].time_sd, math.hypot(0.15, 0.2))
    assert got["bf16=True"].time_mean < -0.3


def test_the_tuner_holds_them_only_when_asked_and_never_over_a_given_prior():
    space = ten_knob_space()
    given = Prior(knob="recompute_granularity", value="full", time_mean=-0.2, time_sd=0.1, source="offline")
    on = Tuner(space, memory_capacity_bytes=CAP, priors=[given])
    stated = [p for p in on.priors if p.feature == "recompute_granularity=full"]
    assert stated == [given]
    assert {p.feature for p in on.priors if p.source == "semantic"} >= {"recompute_granularity=selective",
                                                                          "overlap_grad_reduce=True"}
    off = Tuner(space, memory_capacity_bytes=CAP, config=TunerConfig(knob_semantics=False))
    assert off.priors == []


def _step_time(s, full_effect: float) -> float:
    rec = {"none": 0.0, "selective": 0.03, "full": full_effect}[s["recompute_granularity"]]
    return math.exp(0.1 * math.log2(s["tensor_parallel"]) - 0.05 * math.log2(s["micro_batch_size"]) + rec)


def _gap(t: Tuner, s) -> float:
    """Predicted log step time of s with full recompute minus with none."""
    full, none = dict(s, recompute_granularity="full"), dict(s, recompute_granularity="none")
    mean, _ = t.predict_time([t.space.complete(full), t.space.complete(none)])
    return float(mean[0] - mean[1])


def _told(config: TunerConfig, settings, full_effect: float) -> Tuner:
    t = Tuner(ten_knob_space(), memory_capacity_bytes=CAP, seed=0, config=config)
    for s in settings:
        t.tell(s, Outcome("ok", step_time_s=_step_time(s, full_effect), peak_memory_bytes=1e9))
    t.fit_models()
    return t


def _valid(n: int, rng: random.Random, **fixed):
    space = ten_knob_space()
    out = []
    while len(out) < n:
        s = space.complete({**{k.name: rng.choice(list(k.domain)) for k in space.knobs}, **fixed})
        if space.is_valid(s) and s not in out:
            out.append(s)
    return out


def test_untried_full_recompute_is_priced_slower_only_with_the_semantics():
    """Eight trials, none with full recompute: cold without semantics the move to it is a coin toss (mean 0), with
    them it costs about what the belief says."""
    trials = _valid(8, random.Random(1), recompute_granularity="none")
    on = _gap(_told(TunerConfig(), trials, 0.25), trials[0])
    off = _gap(_told(TunerConfig(knob_semantics=False), trials, 0.25), trials[0])
    assert 0.1 < on < 0.3, on
    assert abs(off) < 0.05, off


def test_trials_overturn_a_belief_the_landscape_contradicts():
    """Where full recompute is 25% faster (a framework that fuses the recompute, say), twenty trials, half with it,
    put the posterior on the right side of none despite the +22% belief (sd 0.2: twelve trials did not yet)."""
    rng = random.Random(2)
    trials = (_valid(10, rng, recompute_granularity="none") + _valid(10, rng, recompute_granularity="full"))
    gap = _gap(_told(TunerConfig(), trials, -0.25), trials[0])
    assert gap < -0.15, gap
