"""The steps choose between a local step (the best one-knob move from the incumbent) and a global one (the
acquisition's best within the trust radius) by each arm's record of beating the fastest trial so far."""

import random

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import Outcome, Steps, Tuner
from infrarsi.search.steps import step_record

CAP = 80e9


def space():
    return KnobSpace([Knob(name="a", kind="int", domain=[1, 2, 4, 8]), Knob(name="b", kind="int", domain=[1, 2, 4]),
                      Knob(name="c", kind="categorical", domain=["x", "y", "z"]), Knob(name="d", kind="bool")])


def ok(t):
    return Outcome("ok", step_time_s=t, peak_memory_bytes=1e10)


def test_the_record_counts_the_proposals_that_beat_every_trial_told_before_them():
    t = Tuner(space(), memory_capacity_bytes=CAP, seed=0, steps=Steps(local_by_evidence=True))
    sp = t.space
    rows = [({"a": 1}, ok(1.0), None), ({"a": 2}, ok(0.9), "local"), ({"a": 4}, ok(0.95), "global"),
            ({"a": 8}, Outcome("oom"), "global"), ({"b": 2}, ok(0.8), "global"), ({"b": 4}, ok(0.85), "local")]
    chosen = {}
    for s, o, arm in rows:
        t.tell(s, o)
        if arm:
            chosen[sp.complete(s)] = arm
    assert step_record(t.history, chosen) == {"local": (1, 2), "global": (1, 3)}


def _tuner_with_record(local_wins: bool):
    """A tuner whose steps chose 5 local and 5 global proposals after a first trial: one arm's proposals each beat
    everything before them, the other's never did."""
    t = Tuner(space(), memory_capacity_bytes=CAP, seed=1, steps=Steps(local_by_evidence=True))
    settings = t.space.candidates(11, random.Random(0))
    t.tell(settings[0], ok(1.0))
    best = 1.0
    for i, s in enumerate(settings[1:]):
        arm = "local" if i % 2 == 0 else "global"
        wins = (arm == "local") == local_wins
        best = best * 0.97 if wins else best
        t.tell(s, ok(best if wins else 1.5))
        t.steps.chosen[s] = arm
    return t


def test_the_choice_between_local_and_global_steps_follows_the_evidence():
    for local_wins in (True, False):
        t = _tuner_with_record(local_wins)
        ctx = t.context()
        picks = []
        for _ in range(40):
            t.steps.asks += 1
            picks.append(t.steps.local_due(ctx, t.config))
        share = sum(picks) / len(picks)
        assert (share >= 0.8) if local_wins else (share <= 0.2), (local_wins, share)


def test_a_local_step_proposes_a_neighbour_of_the_incumbent():
    t = _tuner_with_record(local_wins=True)
    for _ in range(3):
        inc = t.top(1)[0]
        s = t.ask()
        why = t.why(s)
        if why.kind == "local":
            assert s in t.space.neighbors(inc, repair=True)
            return
        t.tell(s, ok(2.0))
    raise AssertionError("no local step in 3 asks though every local proposal improved and no global one did")
