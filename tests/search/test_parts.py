"""The Tuner as parts (search/parts.py): a time model, a memory model and the steps, each a small protocol bound to one
tuner and fitted on its History; a part of one's own drives the same search."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import (AdditivePeak, CensoredPeak, JointTime, MemoryPart, NoMemory, Outcome, ResidualTime,
                             Steps, StepsPart, StructuredPeak, TimePart, Tuner, run_tuner)
from infrarsi.search.structured import features
from infrarsi.trial.memory_estimate import MemoryEstimate

CAP = 80e9
SEARCH = Path(__file__).resolve().parents[2] / "infrarsi" / "search"


def space():
    return KnobSpace([Knob(name="a", kind="int", domain=[1, 2, 4, 8]), Knob(name="b", kind="int", domain=[1, 2, 4]),
                      Knob(name="c", kind="categorical", domain=["x", "y", "z"]), Knob(name="d", kind="bool")])


def truth(s):
    t = 1.0 / s["a"] ** 0.3 * (1 + 0.1 * math.log2(s["b"])) * {"x": 1.0, "y": 0.9, "z": 1.2}[s["c"]]
    m = 30e9 * s["a"] / s["b"] * (0.5 if s["d"] else 1.0)
    return Outcome("oom") if m > CAP else Outcome("ok", step_time_s=t, peak_memory_bytes=m)


def test_the_search_parts_meet_their_protocols():
    for part in (JointTime(), ResidualTime()):
        assert isinstance(part, TimePart)
    for part in (StructuredPeak(), CensoredPeak(), AdditivePeak(), NoMemory()):
        assert isinstance(part, MemoryPart)
    assert isinstance(Steps(), StepsPart)
    t = Tuner(space(), memory_capacity_bytes=CAP)
    assert isinstance(t.time, JointTime) and isinstance(t.memory, StructuredPeak) and isinstance(t.steps, Steps)
    assert isinstance(Tuner(space()).memory, NoMemory)
    assert isinstance(Tuner(space(), memory_capacity_bytes=CAP, memory_estimate=lambda s: 1e9).memory, CensoredPeak)


class KnownTime(TimePart):
    """A time part of one's own: it knows the step time (the protocol: bind, fit, predict; what it lacks, such as
    ``sample`` or ``additive``, is the protocol's no-op default)."""

    def bind(self, setup):
        self.fits = 0

    def fit(self, history):
        self.fits += 1

    def predict(self, settings):
        mean = np.array([math.log(1.0 / s["a"] ** 0.3 * (1 + 0.1 * math.log2(s["b"]))
                                  * {"x": 1.0, "y": 0.9, "z": 1.2}[s["c"]]) for s in settings])
        return mean, np.full(len(settings), 1e-3)


class KnownMemory(MemoryPart):
    """A memory part of one's own: it knows the peak."""

    ready = True

    def bind(self, setup):
        pass

    def fit(self, history):
        pass

    def predict(self, settings):
        return np.log([30e9 * s["a"] / s["b"] * (0.5 if s["d"] else 1.0) for s in settings]), np.full(len(settings), 0.01)

    def p_above(self, settings, threshold):
        mean, sd = self.predict(settings)
        return (mean > threshold).astype(float)

    def cap(self, config):
        return config.max_p_oom


def test_parts_of_ones_own_drive_the_same_search():
    t = Tuner(space(), memory_capacity_bytes=CAP, seed=0, time=KnownTime(), memory=KnownMemory())
    run_tuner(t, truth, 8)
    assert t.time.fits >= 4  # refit on the history after tells
    guided = [s for s, _ in t.history if t.why(s).kind != "design"]
    assert guided and all(t.why(s).p_oom == 0.0 for s in guided)  # it never proposes what its memory part prices out
    fits = [s for s in space().enumerate() if truth(s).status == "ok"]
    best = min(fits, key=lambda s: truth(s).step_time_s)
    assert t.best()[0] == best  # and finds the optimum its time part knows
    assert t.time_model is None and t.memory_model is None  # no additive models in these parts: nothing to report


def test_a_part_that_is_not_its_protocol_is_refused_naming_the_fix():
    """The tuner asks a part for its optional capabilities (no probing), so a part states them: by subclassing its
    protocol, which holds the no-op defaults."""

    class Bare:
        def bind(self, setup):
            pass

        def fit(self, history):
            pass

        def predict(self, settings):
            return np.zeros(len(settings)), np.ones(len(settings))

    with pytest.raises(ValueError, match=r"time=Bare\(...\) is not a TimePart: subclass infrarsi.search.TimePart"):
        Tuner(space(), seed=0, time=Bare())


def test_a_part_belongs_to_one_tuner_and_a_memory_part_needs_a_capacity():
    part = JointTime()
    Tuner(space(), time=part)
    with pytest.raises(ValueError, match="already part of a Tuner"):
        Tuner(space(), time=part)
    with pytest.raises(ValueError, match="give memory_capacity_bytes"):
        Tuner(space(), memory=StructuredPeak())


def test_steps_that_propose_a_setting_already_tried_are_refused():
    class Again(Steps):
        def propose(self, ctx):
            return (ctx.history[0][0], None) if len(ctx.history) else super().propose(ctx)

    t = Tuner(space(), memory_capacity_bytes=CAP, steps=Again())
    run_tuner(t, truth, 1)
    with pytest.raises(RuntimeError, match="already taken"):
        t.ask()


def test_the_encoder_encodes_each_setting_once_in_every_form():
    t = Tuner(space(), memory_capacity_bytes=CAP, seed=0)
    enc, pool = t.encoder, t.pool[:50]
    assert np.array_equal(enc.onehot(pool), space().encode(pool))
    assert np.array_equal(enc.features(pool), features(enc.model_space, pool))
    assert enc.codes(pool).tolist() == [[k.domain.index(s[k.name]) for k in enc.model_space.knobs] for s in pool]
    n = len(enc._rows)
    enc.codes(pool), enc.onehot(pool), enc.features(pool)
    assert len(enc._rows) == n  # one cache: nothing encoded again


def test_no_function_of_the_search_reads_the_tuners_private_state():
    for path in sorted(SEARCH.glob("*.py")):
        if path.name == "tuner.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tuner":
                assert not node.attr.startswith("_"), f"{path.name}:{node.lineno} reads tuner.{node.attr}"


def test_an_estimate_prices_memory_from_the_first_ask():
    # The estimate is the memory prior before any trial: a setting it puts at ~3x the capacity is priced near
    # P(OOM) 1, one at ~0.4x near 0, and the first proposal is one the estimate says fits (before, nothing was priced
    # until a memory row was told: P(OOM) 0 everywhere, and the design's first pick was the largest setting).
    estimate = MemoryEstimate(peak=lambda s: 30e9 * s["a"] / s["b"] * (0.5 if s["d"] else 1.0),  # the truth's, exactly
                              residual_sd=0.1)
    t = Tuner(space(), memory_capacity_bytes=CAP, memory_estimate=estimate, seed=0)
    sp = space()
    huge = sp.complete({"a": 8, "b": 1, "c": "x", "d": False})   # 240 GB
    small = sp.complete({"a": 1, "b": 1, "c": "x", "d": False})  # 30 GB
    p_huge, p_small = t.p_oom([huge, small])
    assert p_huge > 0.99 and p_small < 0.01
    mean, sd = t.predict_memory([huge])
    assert mean[0] == pytest.approx(math.log(240e9)) and 0.1 <= sd[0] < 0.2
    first = t.ask()
    assert estimate(first) < CAP, first
    ablated = Tuner(space(), memory_capacity_bytes=CAP, memory_estimate=estimate, seed=0,
                    memory=CensoredPeak(prior_from_estimate=False))
    assert ablated.p_oom([huge])[0] == 0.0
