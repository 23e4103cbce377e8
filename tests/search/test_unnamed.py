"""A search that knows nothing: knobs whose names mean nothing (k0, k1, ...), spaces where most settings run out of
memory. What raises or lowers the peak is learned from the trials, not looked up."""

from __future__ import annotations

import math
import random

import numpy as np

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import Outcome, Tuner, run_tuner


def landscape(seed: int, oom_share: float = 0.75):
    """Eight opaque knobs with drawn roles in a two-term peak (a power of an int knob's value, a factor per categorical
    value or for a bool), a time that memory savers cost, and the capacity at which ``oom_share`` of the valid settings
    run out of memory: (space, peak, step time, capacity, every valid setting)."""
    r = random.Random(seed)
    knobs, roles = [], []
    for i in range(8):
        kind = r.choice(["int", "int", "int", "categorical", "bool"])
        if kind == "int":
            knobs.append(Knob(name=f"k{i}", kind="int", domain=[1, 2, 4, 8]))
            roles.append((r.choice([0, 1]), r.choice([-1.0, -1.0, 1.0, -0.5, 0.0])))
        elif kind == "categorical":
            knobs.append(Knob(name=f"k{i}", kind="categorical", domain=["a", "b", "c"]))
            roles.append((r.choice([0, 1]), {"a": 1.0, "b": r.choice([1.0, 0.6, 0.3]), "c": r.choice([1.0, 0.6, 0.3])}))
        else:
            knobs.append(Knob(name=f"k{i}", kind="bool"))
            roles.append((r.choice([0, 1]), r.choice([0.5, 1.0, 1.6])))
    slope = {k.name: r.uniform(-0.08, 0.12) for k in knobs}
    space = KnobSpace(knobs)

    def factor(k: Knob, eff, v) -> float:
        return v ** eff if k.kind == "int" else eff[v] if k.kind == "categorical" else (eff if v else 1.0)

    def peak(s) -> float:
        terms = [40.0, 30.0]
        for k, (term, eff) in zip(knobs, roles):
            terms[term] *= factor(k, eff, s[k.name])
        return (terms[0] + terms[1] + 3.0) * 1e9

    def step(s) -> float:
        lt = 0.0
        for k, (_, eff) in zip(knobs, roles):
            v = s[k.name]
            lt += slope[k.name] * (math.log2(v) if k.kind == "int" else k.domain.index(v))
            lt += 0.1 if k.kind != "int" and factor(k, eff, v) < 1 else 0.0  # a memory saver costs time
        return math.exp(lt)

    valid = list(space.enumerate())
    peaks = sorted(peak(s) for s in valid)
    return space, peak, step, peaks[int((1 - oom_share) * len(peaks))], valid


def _objective(peak, step, cap, *, report_peak: bool):
    def run(s):
        p = peak(s)
        if p > cap:
            return Outcome("oom")
        return Outcome("ok", step_time_s=step(s), peak_memory_bytes=p if report_peak else None)

    return run


def test_an_unnamed_space_learns_which_knobs_save_memory_from_ooms_and_fits_alone():
    """Step-time-only trials (a run says only "it fit", an OOM only "it did not"), opaque knob names, 3 in 4 settings out
    of memory. After 20 trials the memory model says which way each knob that matters moves the peak, at the setting
    the search settled on; before any trial it says nothing. It prices settings it never ran better than chance."""
    right = total = 0
    for seed in range(4):
        space, peak, step, cap, valid = landscape(seed)
        t = Tuner(space, memory_capacity_bytes=cap, seed=seed)
        inc = space.default()
        assert np.ptp(t.predict_memory([inc.replace(**{k.name: v}) for k in space.knobs for v in k.domain])[0]) == 0
        run_tuner(t, _objective(peak, step, cap, report_peak=False), 20)
        statuses = [o.status for _, o in t.history]
        assert "ok" in statuses[:8] and statuses.count("oom") <= 10, statuses  # fits, and no more OOMs than runs
        inc = t.best()[0]
        for k in space.knobs:
            lo, hi = inc.replace(**{k.name: k.domain[0]}), inc.replace(**{k.name: k.domain[-1]})
            truth = math.log(peak(hi) / peak(lo))
            if abs(truth) >= 0.3:  # the knobs that matter at the incumbent
                learned = np.diff(t.predict_memory([lo, hi])[0])[0]
                right += np.sign(learned) == np.sign(truth)
                total += 1
        unseen = [s for s in random.Random(seed).sample(valid, 300) if s not in t.history]
        fits = np.array([peak(s) <= cap for s in unseen])
        p_fit = 1 - t.p_oom(unseen)
        auc = (p_fit[fits][:, None] > p_fit[~fits][None, :]).mean()
        assert auc > 0.75, (seed, auc)
    assert total >= 12 and right >= 0.85 * total, (right, total)


def test_a_space_where_three_in_four_settings_oom_finds_a_fitting_setting_within_8_trials():
    for seed in range(8):
        space, peak, step, cap, _ = landscape(seed)
        t = Tuner(space, memory_capacity_bytes=cap, seed=seed)
        run_tuner(t, _objective(peak, step, cap, report_peak=True), 8)
        assert any(o.status == "ok" for _, o in t.history), (seed, [o.status for _, o in t.history])
