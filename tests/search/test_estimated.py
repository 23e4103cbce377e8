"""The search's time model starting from the predicted step time (search/estimated.py): before any trial it ranks by
the estimate; a wrong estimate is overturned by the trials; the run stage uses it for a Megatron launch on a GPU the
step-time model knows, and not where it cannot price the launch or where the estimate is the landscape itself."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

import infrarsi.workloads.simulated as sim
from infrarsi.adapters.workload import Workload
from infrarsi.estimate.step_model import TimeEstimate, unread_knobs
from infrarsi.search import Outcome, Tuner, TunerConfig
from infrarsi.search.estimated import EstimatedTime, _column_knobs
from infrarsi.estimate.choice import time_prior
from infrarsi.trial import TrialStatus
from infrarsi.workloads.simulated import space_for

ROOT = Path(__file__).resolve().parents[2]
BASE = "dense8b-h100x8"


def _estimate():
    space = space_for(BASE)
    unread = set(unread_knobs({k: None for k in space.names}))
    est = TimeEstimate(w=sim.get_workload(BASE), base={}, knobs=frozenset(k for k in space.names if k not in unread))
    return space, est


def _fitting(space, n, seed=0):
    """``n`` valid settings that fit on the simulated cluster, with their noise-free step times."""
    out = []
    for s in space.candidates(4 * n, random.Random(seed)):
        r = sim.simulate(BASE, s, noise_cv=0.0)
        if not r.oom:
            out.append((s, r.step_time_s))
        if len(out) == n:
            break
    return out


def test_a_design_column_names_the_knobs_it_is_made_of():
    assert _column_knobs("tensor_parallel=2") == {"tensor_parallel"}
    assert _column_knobs("log2(tensor_parallel)*pipeline_parallel=2") == {"tensor_parallel", "pipeline_parallel"}


def test_before_any_trial_the_estimate_ranks_the_pool():
    space, est = _estimate()
    t = Tuner(space, seed=0, time=EstimatedTime(est, reads=est.knobs), config=TunerConfig(n_candidates=1000))
    mean, sd = t.time.predict(t.pool)
    logs = np.log([est(s) for s in t.pool])
    # knobs the estimate does not read keep their semantic priors: the ranking is the estimate's, nearly exactly
    assert spearmanr(mean, logs).statistic > 0.95
    # its fastest is the estimate's fastest, give or take what the semantic priors of the unread knobs add
    assert logs[int(np.argmin(mean))] < logs.min() + 0.03
    assert (sd > 0).all()


@pytest.mark.parametrize("reverse", [False, True])
def test_the_trials_correct_the_estimate_and_overturn_a_reversed_one(reverse):
    space, est = _estimate()
    pivot = est(space.complete(sim.get_workload(BASE).baseline))
    fn = (lambda s: pivot * pivot / est(s)) if reverse else est
    part = EstimatedTime(fn, reads=None if reverse else est.knobs)  # the reversed one: a function of all knobs
    t = Tuner(space, seed=0, time=part, noise_cv=0.02, config=TunerConfig(knob_semantics=False, n_candidates=500))
    tried = _fitting(space, 25)
    for s, sec in tried:
        t.tell(s, Outcome(status=TrialStatus.OK, step_time_s=sec))
    t.fit_models()
    held = _fitting(space, 60, seed=1)
    mean, _ = part.predict([s for s, _ in held])
    rho = spearmanr(mean, np.log([sec for _, sec in held])).statistic
    # the true landscape here is the estimate's own formulas: right, it ranks held-out layouts almost perfectly;
    # reversed (a rank correlation of -1 before any trial), 25 trials turn it to a positive one
    assert rho > (0.9 if not reverse else 0.3), rho
    assert spearmanr(np.log([fn(s) for s, _ in held]), np.log([sec for _, sec in held])).statistic < (0 if reverse else 2)


def test_the_run_stage_starts_a_megatron_gpu_launch_from_its_predicted_step_time():
    path = ROOT / "contracts/megatron-llama3-70b-h100x64.toml"
    wl = Workload.of_file(path)
    part = time_prior(wl.knob_space(), wl.contract, contract_dir=path.parent)
    assert isinstance(part, EstimatedTime)
    assert {"tensor_parallel", "pipeline_parallel", "micro_batch_size"} <= set(part.reads) == set(part.estimate.knobs)
    s = wl.knob_space().complete(dict(wl.contract.baseline))
    assert part.estimate(s) > 0


def test_the_run_stage_starts_a_torchtitan_gpu_launch_from_its_predicted_step_time():
    path = ROOT / "contracts/llama3-8b-h100x64.toml"
    wl = Workload.of_file(path)
    part = time_prior(wl.knob_space(), wl.contract, contract_dir=path.parent)
    assert isinstance(part, EstimatedTime)
    assert part.estimate.w.dp_sharding == "per_block"
    assert {"tensor_parallel", "micro_batch_size", "recompute_granularity"} <= set(part.estimate.knobs)
    space = wl.knob_space()
    t = {rc: part.estimate(space.complete({"micro_batch_size": 2, "recompute_granularity": rc}))
         for rc in ("none", "selective", "full")}
    assert 0 < t["none"] < t["selective"] < t["full"]


@pytest.mark.parametrize("contract", ["sim-dense8b-h100x8.toml", "megatron-cpu.toml"])
def test_no_time_prior_where_the_estimate_is_the_landscape_or_cannot_price_the_launch(contract):
    path = ROOT / "contracts" / contract
    wl = Workload.of_file(path)
    assert time_prior(wl.knob_space(), wl.contract, contract_dir=path.parent) is None


def test_a_setting_the_estimate_cannot_price_ranks_as_the_median_layout():
    space, est = _estimate()
    pool = space.candidates(50, random.Random(0))
    unpriced = pool[0]
    part = EstimatedTime(lambda s: None if s == unpriced else est(s), reads=None)
    Tuner(space, seed=0, time=part, config=TunerConfig(n_candidates=100))
    logs = part.log_estimate(pool)
    assert np.isfinite(logs).all() and logs[0] == pytest.approx(np.median(
        [v for k, v in part._log_est.items() if k != unpriced]))
