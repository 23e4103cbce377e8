"""Simulated draws for the pruning rule (execute/prune.py): how often a trial is stopped, as fast as the incumbent
(A/A: the false-prune rate) or slower by a given factor (the power), at a run-to-run CV.

One draw, in log seconds, with ``cv`` the true run-to-run CV and ``step_cv`` each step's own jitter:

- the doctor measures the baseline ``repeats`` times (each run's offset ~ N(0, cv^2)): its CV and MDE are
  *estimated* from those runs (noise/doctor.py's formulas), so a doctor that happened to see little noise is part of
  the draw;
- the incumbent's figure: the median of ``incumbent_runs`` runs of a setting as fast as the trial's truth x 1;
- the trial: its own run offset ~ N(0, cv^2), times ``slower``; its step lines arrive at the cumulative sums of its
  step times, each step ~ N(offset, step_cv^2); with probability ``late`` a line is held back by 1-4 steps' worth
  (a loaded machine), which lengthens one gap and shortens the next;
- the rule looks after every gap of the measured window (as the runner does per line).

    rate = prune_rate(cv=0.05, draws=2000, seed=0)                 # A/A: the fraction pruned
    rate = prune_rate(cv=0.05, slower=1.5, draws=2000, seed=0)     # power against a 1.5x slower setting
"""

from __future__ import annotations

import math

import numpy as np

from ..doctor.noise import mde
from ..execute.prune import Target, judge


def prune_rate(*, cv: float, draws: int = 2000, seed: int = 0, slower: float = 1.0, step_cv: float | None = None,
               late: float = 0.05, repeats: int = 3, incumbent_runs: int = 1, warmup_steps: int = 2,
               measured_steps: int = 8, alpha: float = 0.05) -> float:
    """The fraction of ``draws`` simulated trials the rule stops (see the module docstring)."""
    rng = np.random.default_rng(seed)
    step_cv = cv if step_cv is None else step_cv
    pruned = 0
    for _ in range(draws):
        doctor = np.exp(rng.normal(0.0, cv, repeats))  # the doctor's runs, true step time 1 s
        cv_hat = max(float(np.std(doctor, ddof=1) / np.mean(doctor)), 1e-3)
        inc = float(np.median(np.exp(rng.normal(0.0, cv, incumbent_runs))))
        target = Target(incumbent_s=inc, incumbent_sd=cv_hat / math.sqrt(incumbent_runs), cv=cv_hat,
                        mde=mde(cv_hat, repeats), warmup_steps=warmup_steps, measured_steps=measured_steps,
                        alpha=alpha)
        offset = rng.normal(math.log(slower), cv)
        steps = np.exp(rng.normal(offset, step_cv, warmup_steps + measured_steps))
        arrivals = np.cumsum(steps)
        held = rng.random(len(arrivals)) < late
        arrivals = arrivals + held * rng.uniform(1.0, 4.0, len(arrivals)) * float(np.exp(offset))
        arrivals = np.maximum.accumulate(arrivals)  # a line held back holds back none before it
        gaps = np.diff(arrivals)[warmup_steps - 1:] if warmup_steps > 0 else np.diff(arrivals)
        for k in range(1, len(gaps) + 1):
            if judge([float(g) for g in gaps[:k]], target) is not None:
                pruned += 1
                break
    return pruned / draws


def table(cvs: tuple[float, ...] = (0.01, 0.03, 0.05, 0.10, 0.15), *, draws: int = 2000, seed: int = 0,
          **kw: float) -> list[tuple[float, float, float, float]]:
    """(cv, A/A false-prune rate, pruned at 1.3x slower, pruned at 2x slower) per cv."""
    return [(cv, prune_rate(cv=cv, draws=draws, seed=seed, **kw),
             prune_rate(cv=cv, draws=draws, seed=seed + 1, slower=1.3, **kw),
             prune_rate(cv=cv, draws=draws, seed=seed + 2, slower=2.0, **kw)) for cv in cvs]


def outrank_skip_rate(*, cv: float, speedup: float, draws: int = 2000, seed: int = 0, repeats: int = 3,
                      rebaselines: int = 2, search_runs: int = 1, max_pairs: int = 12,
                      second: float = 1.0) -> tuple[float, float]:
    """The A/A of the skip before pairs (speedup.outranked_before_pairs): two candidates exactly as fast (true
    ``speedup`` over the baseline, run-to-run CV ``cv``); the first is verified by the sequential rule
    (speedup.decide, pairs until done); when it is promoted, the second is judged on its search figures
    (``search_runs`` of it against ``repeats`` doctor runs and ``rebaselines`` re-baselined ones of the baseline),
    with the doctor's CV estimated from its runs. Draws carry no winner's curse (the search's figure of the second
    is unbiased: the hard case). Returns (the fraction of draws whose second candidate was skipped, the fraction
    whose first was promoted). ``second``: the second's true speedup over the first's (1: the A/A; below 1, the
    fraction skipped is the rule's saving)."""
    from ..verify.speedup import decide, outranked_before_pairs

    rng = np.random.default_rng(seed)
    skipped = promoted = 0
    ls = math.log(speedup)
    for _ in range(draws):
        doctor = np.exp(rng.normal(0.0, cv, repeats))
        cv_hat = max(float(np.std(doctor, ddof=1) / np.mean(doctor)), 1e-3)
        base, cand = [], []
        while True:
            base.append(float(np.exp(rng.normal(0.0, cv))))
            cand.append(float(np.exp(rng.normal(-ls, cv))))
            d = decide(base, cand, mde=mde(cv_hat, repeats), max_pairs=max_pairs)
            if d.done:
                break
        if not d.promoted:
            continue
        promoted += 1
        b = [*doctor.tolist(), *np.exp(rng.normal(0.0, cv, rebaselines)).tolist()]
        c = np.exp(rng.normal(-ls - math.log(second), cv, search_runs)).tolist()
        if outranked_before_pairs(b, c, cv=cv_hat, outrank=d.speedup.lo) is not None:
            skipped += 1
    return skipped / draws, promoted / draws
