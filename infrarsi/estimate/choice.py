"""Which estimates a run's models start from: the peak-memory estimate the memory model refines (the real model's
fake step where it runs (this package), else the analytical estimate (priors/offline.py)) and how long its fake
steps may take (bounded by the baseline's own trial time); the predicted step time the time model starts from."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..adapters import Adapter
from ..contract.model import Contract
from ..knobs import KnobSpace
from ..trial import Trial


def memory_estimate(space: KnobSpace, contract: Contract, *, contract_dir: Path | None = None, budget_s: float | None = None,
                    adapter: Adapter | None = None):
    """The peak-memory estimate the memory model refines: the real model's fake step where it runs (estimate/),
    else the analytical one. ``contract_dir``: the locked contract's folder, which ``workload.launch`` is
    relative to; ``budget_s``: seconds of fake steps (None: the estimate's own default); ``adapter``: the run's,
    bound to ``contract_dir`` (None: one is built)."""
    from ..estimate import memory_estimator as real_model_estimator
    from ..estimate.run import anchored
    from ..priors.offline import memory_estimator

    from ..adapters.workload import Workload

    workload = dict(contract.workload.args)
    try:  # the model's shape, where the launch states it
        workload = {**Workload(contract, contract_dir, adapter).model_shape(), **workload}
    except ValueError:  # an unreadable launch: the run reports it where it launches
        pass
    analytical = memory_estimator(space, workload=workload, hardware=contract.hardware.model_dump())
    return real_model_estimator(space, anchored(contract, contract_dir), fallback=analytical, budget_s=budget_s,
                                adapter=adapter) or analytical


ESTIMATE_TRIALS = 2.0


def estimate_budget_s(base_trials: list[Trial]) -> float | None:
    """Fake steps exist to save trials, so they may cost at most ESTIMATE_TRIALS of the baseline's trials (wall
    time, median of the doctor's runs); None (the estimate's default) when $INFRARSI_ESTIMATE_BUDGET_S is set."""
    import os

    from ..estimate.run import BUDGET_ENV, DEFAULT_BUDGET_S

    walls = [t.cost.wall_s for t in base_trials if t.cost.wall_s > 0]
    if os.environ.get(BUDGET_ENV) or not walls:
        return None
    return min(DEFAULT_BUDGET_S, ESTIMATE_TRIALS * statistics.median(walls))


def time_prior(space: KnobSpace, contract: Contract, *, contract_dir: Path | None = None,
               adapter: Adapter | None = None):
    """The time part starting from the predicted step time (search/estimated.py), for a Megatron or torchtitan launch
    on a GPU the step-time model knows; None otherwise (a simulated contract: the estimate is its own landscape, a
    circular prior; a launch or GPU the model cannot price)."""
    from ..adapters.workload import Workload
    from ..fakestep.result import EstimateError
    from .step_model import time_estimate
    from ..search.estimated import EstimatedTime

    try:
        workload = Workload(contract, contract_dir, adapter)
        if workload.adapter.step_model != "launch":
            return None
        est = time_estimate(workload, space)
        return EstimatedTime(est, reads=est.knobs)
    except (EstimateError, ValueError):
        return None
