"""The ask/tell tuner: valid proposals, failures as data, memory-aware search that beats random search."""

import math
import random

import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import Outcome, Tuner, TunerConfig, run_tuner
from infrarsi.search.pairing import one_knob_changes, pairings
from infrarsi.search.steps import Steps


def example_space():
    return KnobSpace(knobs=[Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),
                            Knob(name="mbs", kind="int", domain=[1, 2, 4, 8, 16]),
                            Knob(name="recompute", kind="categorical", domain=["none", "selective", "full"]),
                            Knob(name="seq_par", kind="bool")],
                     constraints=[lambda s: None if s["tp"] > 1 or not s["seq_par"] else "sequence parallel needs tp > 1"])


CAP = 80e9


def truth(s, noise=0.0, rng=None):
    """A known landscape: bigger micro-batches are faster and hungrier; recompute saves memory at a time cost."""
    t = (1 - 0.12 * math.log2(s["mbs"])) * (1 + 0.08 * math.log2(s["tp"])) \
        * {"none": 1, "selective": 1.05, "full": 1.33}[s["recompute"]] * (0.97 if s["seq_par"] else 1)
    m = 30e9 * s["mbs"] ** 0.8 / s["tp"] ** 0.7 * {"none": 1, "selective": 0.6, "full": 0.3}[s["recompute"]] \
        * (0.8 if s["seq_par"] else 1)
    if m > CAP:
        return Outcome("oom")
    if rng is not None:
        t *= math.exp(rng.gauss(0, noise))
    return Outcome("ok", step_time_s=t, peak_memory_bytes=m)


def test_the_documented_example_runs():
    space = KnobSpace(knobs=[Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),
                             Knob(name="recompute", kind="categorical", domain=["none", "selective", "full"]),
                             Knob(name="seq_par", kind="bool"),
                             Knob(name="mb", kind="int", domain=[1, 2, 4], means="micro_batch_size")],
                      constraints=[lambda s: None if s["tp"] > 1 or not s["seq_par"] else "sequence parallel needs tp > 1"])
    tuner = Tuner(space, memory_capacity_bytes=80 * 2**30, seed=0)
    assert tuner.meanings == {"tp": "tensor_parallel", "recompute": "recompute_granularity",
                              "seq_par": "sequence_parallel", "mb": "micro_batch_size"}
    assert {p.knob for p in tuner.priors if p.source == "semantic"} == {"recompute", "seq_par"}
    s = tuner.ask()
    assert space.is_valid(s)
    tuner.tell(s, Outcome(status="ok", step_time_s=1.23, peak_memory_bytes=7.1e10))
    s2 = tuner.ask()
    assert s2 != s
    tuner.tell(s2, Outcome(status="oom"))
    best_setting, best_outcome = tuner.best()
    assert best_setting == s and best_outcome.step_time_s == 1.23
    batch = tuner.ask(3)
    assert len(set(batch)) == 3 and all(space.is_valid(b) for b in batch) and not {s, s2} & set(batch)


def test_outcomes_are_validated():
    with pytest.raises(ValueError, match="needs a finite step_time_s"):
        Outcome("ok", step_time_s=float("nan"))
    with pytest.raises(ValueError, match="use one of"):
        Outcome("exploded")
    with pytest.raises(ValueError, match="has no step_time_s"):
        Outcome("oom", step_time_s=1.0)


def test_an_exhausted_space_says_so():
    space = KnobSpace([Knob(name="a", kind="bool")])
    t = Tuner(space, seed=0)
    for _ in range(2):
        s = t.ask()
        t.tell(s, Outcome("crash"))
    with pytest.raises(RuntimeError, match="exhausted"):
        t.ask()
    assert t.best() is None


def _random(space, budget, seed):
    valid = list(space.enumerate())
    random.Random(seed).shuffle(valid)
    return [(s, truth(s)) for s in valid[:budget]]


def test_finds_the_optimum_with_fewer_ooms_than_random_search():
    space = example_space()
    valid = list(space.enumerate())
    opt = min(o.step_time_s for o in map(truth, valid) if o.status == "ok")
    fracs, ooms, rand_fracs, rand_ooms = [], [], [], []
    for seed in range(4):
        t = Tuner(space, memory_capacity_bytes=CAP, seed=seed, initial=[{"tp": 1, "mbs": 1, "recompute": "none", "seq_par": False}])
        hist = run_tuner(t, truth, 20)
        fracs.append(opt / t.best()[1].step_time_s)
        ooms.append(sum(o.status == "oom" for _, o in hist))
        r = _random(space, 20, seed)
        rand_fracs.append(opt / min(o.step_time_s for _, o in r if o.status == "ok"))
        rand_ooms.append(sum(o.status == "oom" for _, o in r))
    assert min(fracs) >= 0.97, fracs
    assert sum(fracs) > sum(rand_fracs)
    assert sum(ooms) <= sum(rand_ooms), (ooms, rand_ooms)


def test_a_fast_setting_that_does_not_fit_is_paired_with_memory_savers():
    space = example_space()
    t = Tuner(space, memory_capacity_bytes=CAP, seed=0)
    # What we know: mbs 16 without savers runs out of memory; mbs 4 fits comfortably; bigger mbs is faster.
    for s in ({"tp": 1, "mbs": 1, "recompute": "none", "seq_par": False}, {"tp": 1, "mbs": 4, "recompute": "none", "seq_par": False},
              {"tp": 1, "mbs": 2, "recompute": "none", "seq_par": False}, {"tp": 1, "mbs": 16, "recompute": "none", "seq_par": False},
              {"tp": 2, "mbs": 16, "recompute": "none", "seq_par": False}, {"tp": 1, "mbs": 4, "recompute": "selective", "seq_par": False},
              {"tp": 1, "mbs": 2, "recompute": "full", "seq_par": False}):
        t.tell(s, truth(s))
    kinds = []
    for _ in range(6):
        s = t.ask()
        kinds.append(t.why(s))
        t.tell(s, truth(s))
    paired = [w for w in kinds if w.kind == "paired"]
    assert paired, kinds
    assert all(w.savers and w.paired_from for w in paired)
    assert all(w.p_oom <= 0.5 for w in paired)


def test_pairing_gives_each_hungry_candidate_its_fastest_fitting_saver_variant_once():
    space = example_space()
    t = Tuner(space, memory_capacity_bytes=CAP, seed=0)
    for s in ({"tp": 1, "mbs": 1, "recompute": "none", "seq_par": False}, {"tp": 1, "mbs": 4, "recompute": "none", "seq_par": False},
              {"tp": 1, "mbs": 16, "recompute": "none", "seq_par": False}, {"tp": 2, "mbs": 16, "recompute": "none", "seq_par": False},
              {"tp": 1, "mbs": 4, "recompute": "selective", "seq_par": False}, {"tp": 1, "mbs": 2, "recompute": "full", "seq_par": False}):
        t.tell(s, truth(s))
    t.fit_models()
    ctx = t.context()
    taken = ctx.taken
    cands = [c for c in space.candidates(1000, random.Random(0)) if c not in taken]
    mean, _ = t.predict_time(cands)
    p_oom, cap = ctx.p_oom(cands), ctx.cap
    out = pairings(ctx, cands, -mean, p_oom, taken)
    assert out, "fast candidates that do not fit (mbs 16 without savers) get paired"
    variants = [v for v, _ in out]
    assert len(set(variants)) == len(variants)  # no variant is claimed twice
    assert not set(variants) & taken
    claimed = set(variants)
    for v, (src, savers) in out:
        assert p_oom[cands.index(src)] > cap and ctx.p_oom([v])[0] <= cap
        assert {f"{k}={v[k]}" for k in src if v[k] != src[k]} == set(savers)  # the variant is the source + its savers
        # no one-knob saver of the source that fits, is unclaimed and valid is predicted faster than the variant
        peak = t.predict_memory([src])[0][0]
        others = [m for m, _ in one_knob_changes(space, src)
                  if space.is_valid(m) and m not in taken and m not in claimed
                  and t.predict_memory([m])[0][0] < peak - 0.01 and ctx.p_oom([m])[0] <= cap]
        if others:
            assert t.predict_time([v])[0][0] <= t.predict_time(others)[0].min() + 1e-12


def test_ask_n_gives_distinct_settings_for_parallel_trials():
    t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=1)
    for _ in range(3):
        batch = t.ask(4)
        assert len(set(batch)) == 4
        for s in batch:
            t.tell(s, truth(s))
    assert len({s for s, _ in t.history}) == 12


def test_local_steps_try_the_incumbents_neighbourhood():
    t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=0)
    kinds = []
    for _ in range(14):
        s = t.ask()
        kinds.append(t.why(s).kind)
        if kinds[-1] == "local":
            inc = t.top(1)[0]
            assert sum(s[k] != inc[k] for k in s) <= 4  # one knob plus its repairs
        t.tell(s, truth(s))
    assert "local" in kinds


def _drifting(s):
    """The landscape of ``truth``, where sequence parallelism computes a different gradient: every setting with it
    that runs breaks the loss check (its peak is still measured)."""
    o = truth(s)
    if s["seq_par"] and o.status == "ok":
        return Outcome("numerics_drift", peak_memory_bytes=o.peak_memory_bytes)
    return o


def test_settings_that_break_the_loss_check_make_their_knob_values_less_likely_to_be_proposed():
    from infrarsi.search import TunerConfig

    for seed in range(3):
        n = {}
        for learn in (True, False):
            t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=seed, steps=Steps(learn_drift=learn))
            n[learn] = sum(o.status == "numerics_drift" for _, o in run_tuner(t, _drifting, 16))
        assert n[True] < n[False], (seed, n)  # without it, each drifting setting taught the search nothing


def test_a_drifted_trial_is_memory_data_and_prices_what_shares_its_values():
    t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=0)
    base = {"tp": 1, "mbs": 4, "recompute": "full", "seq_par": False}
    t.tell(base, truth(base))
    drifted = {"tp": 2, "mbs": 4, "recompute": "full", "seq_par": True}
    t.tell(drifted, Outcome("numerics_drift", peak_memory_bytes=40e9))
    t.fit_models()
    assert t.memory_model.n_obs == 2  # its peak was measured like any trial's that ran
    space = t.space
    near = space.complete({"tp": 4, "mbs": 4, "recompute": "full", "seq_par": True})  # shares seq_par=True
    far = space.complete({"tp": 1, "mbs": 8, "recompute": "full", "seq_par": False})  # shares what also passed
    p_near, p_far = t.p_pass([near, far])
    assert p_near <= 0.5 < p_far
    ok = space.complete({"tp": 4, "mbs": 2, "recompute": "full", "seq_par": True})
    t.tell(ok, Outcome("ok", step_time_s=1.0, peak_memory_bytes=10e9))  # seq_par passed once: less suspect
    assert t.p_pass([near])[0] > p_near


def test_an_estimate_that_states_its_error_sets_the_memory_models_priors():
    from infrarsi.trial.memory_estimate import MemoryEstimate
    from infrarsi.trial.prior import Prior
    from infrarsi.search.memory import RESIDUAL_MEM_SD

    space = KnobSpace(knobs=[Knob(name="micro_batch_size", kind="int", domain=[2, 4, 8]),
                             Knob(name="recompute_granularity", kind="categorical", domain=["none", "selective", "full"])])

    def estimate(s):
        return 1e9 * s["micro_batch_size"]

    priors = [Prior(knob="recompute_granularity", value="full", time_mean=0.2, mem_mean=-0.5, mem_sd=0.3)]
    plain = Tuner(space, memory_capacity_bytes=CAP, priors=priors, memory_estimate=estimate)
    stated = Tuner(space, memory_capacity_bytes=CAP, priors=priors,
                   memory_estimate=MemoryEstimate(peak=estimate, residual_sd=0.05, interaction_sd=0.01))
    names = stated.memory_model.design.names
    col = names.index("recompute_granularity=full")
    assert plain.memory_model.design.prior_sd[col] == pytest.approx(RESIDUAL_MEM_SD)
    assert stated.memory_model.design.prior_sd[col] == pytest.approx(0.05)
    inter = [i for i, n in enumerate(names) if n in stated.memory_model.design.interaction_names]
    assert inter  # micro-batch x recompute
    assert all(stated.memory_model.design.prior_sd[i] == pytest.approx(0.01) for i in inter)
    assert all(plain.memory_model.design.prior_sd[i] == pytest.approx(0.1) for i in inter)


def test_acquisition_steps_stay_within_the_trust_radius_of_the_fastest_settings():
    cfg = TunerConfig(trust_radius=1, local_every=0)
    t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=0, config=cfg)
    seen = 0
    for _ in range(14):
        ok = sorted((o.step_time_s, s) for s, o in t.history if o.status == "ok")
        s = t.ask()
        if t.why(s).kind in ("acquisition", "paired"):  # a paired variant is the acquisition's pick too
            seen += 1
            assert min(sum(s[k] != f[k] for k in s) for _, f in ok[:5]) <= 1
        t.tell(s, truth(s))
    assert seen >= 5


def test_the_exploitation_scale_prefers_what_the_model_predicts_fast_and_leaves_the_stopping_rule_alone():
    picks, stop = {}, {}
    for scale in (1.0, 0.1):
        cfg = TunerConfig(ei_sd_scale=scale, local_every=0)
        t = Tuner(example_space(), memory_capacity_bytes=CAP, seed=1, config=cfg)
        for s in [{"tp": 1, "mbs": 1, "recompute": "full"}, {"tp": 8, "mbs": 2, "recompute": "none", "seq_par": True},
                  {"tp": 2, "mbs": 4, "recompute": "selective"}, {"tp": 4, "mbs": 1, "recompute": "none"}]:
            t.tell(s, truth(t.space.complete(s)))
        s = t.ask()
        picks[scale] = t.predict_time([s])[0][0]
        stop[scale] = t.last_best_ei
    assert picks[0.1] < picks[1.0]  # the lower predicted log step time, not the most uncertain candidate
    assert stop[0.1] == pytest.approx(stop[1.0], rel=0.05)  # the stop reads the whole posterior either way


def test_pruned_and_skipped_trials_are_data_never_the_best_and_never_proposed_again():
    """A pruned trial tells the time parts a lower bound (the GP ranks it at its expected time above the bound), a
    skipped one tells the memory part "peak > capacity"; neither is the best, top or proposed again."""
    space = example_space()
    tuner = Tuner(space, memory_capacity_bytes=CAP, seed=2)
    rng = random.Random(0)
    told = []
    for _ in range(8):
        s = tuner.ask()
        told.append(s)
        tuner.tell(s, truth(s, 0.01, rng))
    slow, hungry = tuner.ask(), tuner.ask()
    tuner.tell(slow, Outcome("pruned", step_time_s=5.0))  # at least 5 s/step: far slower than anything told
    tuner.tell(hungry, Outcome("skipped"))
    assert [s for s, _ in tuner.history.lower_bounds()] == [slow]
    assert hungry in [s for s, _ in tuner.history.memory_rows()]
    tuner.fit_models()
    assert tuner.time_model.n_censored == 1
    (m,), _ = tuner.predict_time([slow])
    assert m > math.log(2.0)  # the GP holds it slow: near its bound, not at the trials' mean
    assert tuner.p_oom([hungry])[0] > 0.5
    assert tuner.best()[0] not in (slow, hungry) and not {slow, hungry} & set(tuner.top(3))
    for _ in range(6):
        assert tuner.ask() not in (slow, hungry)
