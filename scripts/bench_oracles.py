"""The diagnosis parts of ``bench_search.py`` (``--tuners cold-oracle-*``): not peers, but the cold search with one of
its models replaced by knowledge of the landscape, to say where its gap to the optimum is and how far any model could
close it. Each is a part given to the search's own Tuner (``Tuner(space, time=OracleTime(bench), ...)``), which keeps
its pool, trust radius, local and paired steps, and every model not replaced.

- ``memory``: P(OOM) is the truth (does it fit);
- ``time``: the time model is the landscape's noise-free step time, optionally off by a fixed error per setting
  (``ORACLE_TIME_SD``, ``--oracle-time-sd``);
- ``physics``: the variant's step-time formulas on its drawn constants, plus a GP on what they miss;
- ``formulas``: the same formulas on the base workload's nominal constants, plus the GP.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from infrarsi.knobs import Setting
from infrarsi.search import History, StructuredPeak
from infrarsi.search.parts import Bound, TimePart
from infrarsi.search.residual import Residual
from infrarsi.workloads.variants import LAYOUT_SD

ORACLE_TIME_SD = 0.0  # cold-oracle-time: sd of a fixed error per setting on its log step time (--oracle-time-sd)


class OracleMemory(StructuredPeak):
    """A diagnosis, not a peer: the cold search's memory part told the true answer to "does it fit" for every candidate
    (its P(OOM) is 0 or 1 from the landscape itself); its peak predictions (which pairing reads) stay the model's. How
    far the search gets when memory pricing is perfect says how much of the gap to the optimum is the memory model's
    and how much the time model's."""

    def __init__(self, bench: Any) -> None:
        super().__init__()
        self.bench = bench

    def p_above(self, settings: Sequence[Setting], threshold: float) -> np.ndarray:
        return np.array([float(self.bench.land.simulate(s, None, 0.0).oom) for s in settings])


class OracleTime(Bound, TimePart):
    """A diagnosis, not a peer: a time part that is the landscape's noise-free step time (for a setting that does not
    fit, the time it would take with memory to spare), off by a fixed error per setting of sd ``ORACLE_TIME_SD`` on the
    log scale (--oracle-time-sd; the predictive sd says so, at least 0.001). The memory part and every step of the
    search are its own, so how far it gets says how much of the gap to the optimum is the time model's, and how accurate
    a time model must be to close it."""

    def __init__(self, bench: Any) -> None:
        self.bench = bench
        self._true_log: dict[Setting, float] = {}

    def fit(self, history: History) -> None:
        pass

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        out = np.empty(len(settings))
        for i, s in enumerate(settings):
            if s not in self._true_log:
                err = random.Random(f"oracle-time:{self.bench.seed}:{s.key()}").gauss(0.0, 1.0) * ORACLE_TIME_SD
                self._true_log[s] = math.log(self.bench.land.step_time(s)) + err
            out[i] = self._true_log[s]
        return out, np.full(len(settings), max(ORACLE_TIME_SD, 1e-3))


class OraclePhysics(Bound, TimePart):
    """A diagnosis, not a peer: a time part that knows the simulator. Its mean is the variant's own step-time formulas on
    the variant's drawn hardware (``Variant.formula_time``: every formula and constant right), plus a GP
    (``search/residual.py``, noise sd the bench's CV) on what those miss, fitted on the log step times that ran: the
    hidden per-layout efficiencies and knob-pair interactions of the variant, which only trials reveal. The memory part
    and every step of the search are its own. How far it gets is the ceiling of any time model a search could learn
    without measuring every layout: the cold search's gap to it is what learning the physics could still win; its own
    gap to the optimum is what no model of these formulas can. ``drawn=False``: the same formulas on the base
    workload's nominal constants, so the GP must also learn the cluster's hardware."""

    def __init__(self, bench: Any, *, drawn: bool = True) -> None:
        if bench.land.v is None:
            raise SystemExit("cold-oracle-physics, cold-oracle-formulas: need a perturbed variant (--suite family); a "
                             "named workload's formulas are its whole step time")
        self.bench, self.drawn = bench, drawn
        self._formula_log: dict[Setting, float] = {}
        self.residual: Residual | None = None

    def _formula(self, settings: Sequence[Setting]) -> np.ndarray:
        for s in settings:
            if s not in self._formula_log:
                self._formula_log[s] = math.log(self.bench.land.formula_time(s, drawn=self.drawn))
        return np.array([self._formula_log[s] for s in settings])

    def fit(self, history: History) -> None:
        ok = history.ok()
        if not ok:
            return
        ss = [s for s, _ in ok]
        r = np.log([o.step_time_s for _, o in ok]) - self._formula(ss)
        self.residual = Residual.fit(self.setup.encoder.codes(ss), r, self.bench.noise_cv)

    def predict(self, settings: Sequence[Setting]) -> tuple[np.ndarray, np.ndarray]:
        mean = self._formula(settings)
        if self.residual is None or not len(settings):
            return mean, np.full(len(settings), 2 * LAYOUT_SD)  # what the formulas miss before any trial
        gm, gv = self.residual.predict(self.setup.encoder.codes(settings))
        return mean + gm, np.sqrt(gv + 1e-6)


# bench_search._run_ours(oracle=...): which part each diagnosis replaces, built for one bench
ORACLES = {"memory": lambda b: {"memory": OracleMemory(b)}, "time": lambda b: {"time": OracleTime(b)},
           "physics": lambda b: {"time": OraclePhysics(b)},
           "formulas": lambda b: {"time": OraclePhysics(b, drawn=False)}}
