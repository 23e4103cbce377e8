"""The peers of ``bench_search.py``: the tuners users have, each given the same space, validity rule and repair moves
as this search (random search, greedy coordinate descent from the typical config, Optuna TPE and GPSampler, SMAC3).
An invalid proposal of TPE/GP/SMAC is told as infeasible at no budget and replaced by the nearest valid untried setting
of a shared pool (``Bench.project``, the same projection for all)."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

from infrarsi.knobs import Setting
from infrarsi.search import Outcome
from infrarsi.trial.status import TrialStatus

from bench_landscape import Bench

History = list[tuple[Setting, Outcome]]


def run_random(b: Bench, budget: int) -> tuple[History, float]:
    t0 = time.perf_counter()
    settings = b.space.candidates(4000, random.Random(b.seed))
    random.Random(b.seed + 1).shuffle(settings)
    hist = [(s, b(s)) for s in settings[:budget]]
    return hist, (time.perf_counter() - t0) / budget


def run_greedy(b: Bench, budget: int) -> tuple[History, float]:
    """Coordinate descent from the typical config: every one-knob move (with the repairs it needs, as the
    tuner's own moves) in knob order; take the first faster one and start over from it."""
    t0 = time.perf_counter()
    hist: History = []
    seen: set[Setting] = set()
    cur = b.baseline
    o = b(cur)
    hist.append((cur, o))
    seen.add(cur)
    best = o.step_time_s if o.status is TrialStatus.OK else math.inf
    order = {k.name: i for i, k in enumerate(b.space.knobs)}
    improved = True
    while len(hist) < budget and improved:
        improved = False
        moves = b.space.neighbors(cur, repair=True)
        # group by the first knob that differs, in knob order (the one-knob change, then its repairs)
        moves.sort(key=lambda s: min(order[k] for k in order if s[k] != cur[k]))
        for cand in moves:
            if cand in seen:
                continue
            seen.add(cand)
            o = b(cand)
            hist.append((cand, o))
            if o.status is TrialStatus.OK and o.step_time_s < best:
                cur, best, improved = cand, o.step_time_s, True
                break
            if len(hist) >= budget:
                break
    return hist, (time.perf_counter() - t0) / max(1, len(hist))


def _optuna(b: Bench, budget: int, kind: str) -> tuple[History, float]:
    import optuna

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # constraints_func: still the documented way in 5.0
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cons = lambda t: t.user_attrs.get("c", (0.0,))  # noqa: E731  (> 0: infeasible)
    if kind == "tpe":
        sampler = optuna.samplers.TPESampler(seed=b.seed, multivariate=True, group=True, constraints_func=cons,
                                             n_startup_trials=min(10, budget // 3))
    else:
        sampler = optuna.samplers.GPSampler(seed=b.seed, constraints_func=cons, n_startup_trials=min(10, budget // 3))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    dists = {k.name: optuna.distributions.CategoricalDistribution(list(k.domain)) for k in b.space.knobs}
    rng = random.Random(b.seed)
    hist: History = []
    taken: set[Setting] = set()
    worst = 1.0
    t0 = time.perf_counter()
    while len(hist) < budget:
        trial = study.ask(dists)
        s = dict(trial.params)
        st = Setting(s)
        if not b.space.is_valid(st) or st in taken:
            # Infeasible at no budget (the framework would refuse it at start-up); then the nearest valid one.
            trial.set_user_attr("c", (float(len(b.space.validate(st)) or 1),))
            study.tell(trial, math.log(worst) + 1.0)
            st = b.project(s, taken, rng)
            if st is None:
                break
            study.enqueue_trial(dict(st))
            trial = study.ask(dists)
        o = b(st)
        hist.append((st, o))
        taken.add(st)
        if o.status is TrialStatus.OK:
            worst = max(worst, o.step_time_s)
            trial.set_user_attr("c", (0.0,))
            study.tell(trial, math.log(o.step_time_s))
        else:
            trial.set_user_attr("c", (1.0,))
            study.tell(trial, math.log(worst) + 1.0)
    return hist, (time.perf_counter() - t0) / max(1, len(hist))


def run_smac(b: Bench, budget: int) -> tuple[History, float]:
    import logging

    from ConfigSpace import CategoricalHyperparameter, Configuration, ConfigurationSpace
    from smac import HyperparameterOptimizationFacade, Scenario
    from smac.runhistory.dataclasses import TrialInfo, TrialValue

    logging.getLogger("smac").setLevel(logging.ERROR)
    names = {k.name: [str(v) for v in k.domain] for k in b.space.knobs}
    back = {k.name: {str(v): v for v in k.domain} for k in b.space.knobs}
    cs = ConfigurationSpace(seed=b.seed)
    cs.add([CategoricalHyperparameter(n, vals) for n, vals in names.items()])
    import tempfile

    out = tempfile.mkdtemp(prefix="smac-")
    scen = Scenario(cs, deterministic=True, n_trials=budget * 4, seed=b.seed, output_directory=Path(out))
    smac = HyperparameterOptimizationFacade(scen, lambda config, seed=0: 0.0, overwrite=True, logging_level=40,
                                            initial_design=HyperparameterOptimizationFacade.get_initial_design(
                                                scen, n_configs=min(10, budget // 3)))
    rng = random.Random(b.seed)
    hist: History = []
    taken: set[Setting] = set()
    worst = 1.0
    t0 = time.perf_counter()
    while len(hist) < budget:
        info = smac.ask()
        s = {n: back[n][info.config[n]] for n in names}
        st = Setting(s)
        if not b.space.is_valid(st) or st in taken:
            smac.tell(info, TrialValue(cost=math.log(worst) + 1.0))
            st = b.project(s, taken, rng)
            if st is None:
                break
            info = TrialInfo(config=Configuration(cs, values={n: str(st[n]) for n in names}), seed=info.seed)
        o = b(st)
        hist.append((st, o))
        taken.add(st)
        if o.status is TrialStatus.OK:
            worst = max(worst, o.step_time_s)
        cost = math.log(o.step_time_s) if o.status is TrialStatus.OK else math.log(worst) + math.log(2.0)
        smac.tell(info, TrialValue(cost=cost))
    return hist, (time.perf_counter() - t0) / max(1, len(hist))


