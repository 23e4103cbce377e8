"""The search's steps (:class:`~.parts.StepsPart`): which candidate a :class:`~.tuner.Tuner` proposes next -- the
initial design, then a model-guided step (a probe of an untested prior claim, a local step, a Thompson step, or the
acquisition's best within the trust radius; :mod:`.acquisition` scores, :mod:`.pairing` pairs). See the module
docstring of :mod:`.tuner`, steps 1, 2, 4 and 7.

A step reads a :class:`Context` the tuner builds per ask: the candidates, the history, what is pending, the parts and
the config. It keeps its own counters (asks, probed knobs, the last best EI); it reads and writes nothing else.

    steps = Steps(); steps.bind(setup)
    setting, why = steps.propose(ctx)     # None when no candidate is left
    steps.last_best_ei                    # the stopping rule's input (log scale)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..knobs import KnobSpace, Setting
from ..trial.prior import Prior
from ..trial.proposal import Proposal
from ..trial.status import TrialStatus
from .acquisition import hamming, score
from .config import TunerConfig
from .design import maximin
from .encoder import Encoder
from .history import History
from .parts import NUMERICS, Bound, MemoryPart, StepsPart, TimePart
from .prior_check import untested_claim
from .scored import Scored



@dataclass(frozen=True)
class Context:
    """One ask, as the steps see it. ``taken``: told or pending; ``candidates``: the pool and the neighbours of the best
    settings, minus what is taken; ``threshold``: log(capacity x (1 - oom_margin)), None without a capacity;
    ``incumbent``: the setting the time model believes fastest among those that ran (None before one ran)."""

    space: KnobSpace
    config: TunerConfig
    history: History
    pending: frozenset[Setting]
    taken: frozenset[Setting]
    encoder: Encoder
    time: TimePart
    memory: MemoryPart
    threshold: float | None
    candidates: list[Setting]
    incumbent: Setting | None
    neighbors: Callable[[Setting], list[Setting]]
    is_valid: Callable[[Setting], bool]
    numerics: Callable[[str], None]
    cap_factor: float = 1.0  # the steps' own correction of the memory part's cap (Steps.calibrated)

    def p_oom(self, settings: Sequence[Setting]) -> np.ndarray:
        """P(peak > capacity x (1 - oom_margin)) per setting (zeros until the memory part is ``ready``)."""
        if self.threshold is None:
            return np.zeros(len(settings))
        return self.memory.p_above(settings, self.threshold)

    @property
    def cap(self) -> float:
        """The P(OOM) above which a proposal is a last resort (the memory part's, :meth:`.MemoryPart.cap`, times
        ``cap_factor``)."""
        return self.memory.cap(self.config) * self.cap_factor


class Steps(Bound, StepsPart):
    """The search's steps; see the module docstring. ``thompson_every``: every k-th model-guided proposal is the fastest
    fitting setting under one posterior draw (0: never; off: on the perturbed clusters, cold, Thompson steps improved
    the best in 4 of 74 trials, acquisition steps 27 of 184, local steps 59 of 174; BENCHMARKS.md). ``learn_drift``:
    price candidates by the knob values of settings that broke the loss check (False: such a setting is only never
    proposed again, an ablation). ``local_by_evidence``: choose a local or a global step by each kind's record
    (:meth:`local_due`; off: every ``local_every``-th model-guided ask is local; cold, catalog names, 10+ paired runs
    the choice by evidence scored below the schedule at 20 and 30 trials, docs/notes/search.md)."""

    def __init__(self, *, thompson_every: int = 0, learn_drift: bool = True, local_by_evidence: bool = False) -> None:
        self.thompson_every, self.learn_drift = thompson_every, learn_drift
        self.local_by_evidence = local_by_evidence
        self.asks = 0  # model-guided proposals so far
        self.chosen: dict[Setting, str] = {}  # model-guided proposals -> the arm that chose them ("local" / "global")
        self.probed: set[str] = set()  # knobs whose strongest prior claim a probe has tested
        self.last_best_ei: float | None = None
        self.priced: dict[Setting, float] = {}  # model-guided proposals -> the P(OOM) they were proposed at

    def propose(self, ctx: Context) -> tuple[Setting, Proposal] | None:
        if not ctx.candidates:
            return None
        has_time = bool(ctx.history.ok())
        if len(ctx.history) + len(ctx.pending) < ctx.config.n_initial or not has_time:
            return design_step(ctx, self.p_pass(ctx.history, ctx.candidates))
        ctx = replace(ctx, cap_factor=self.calibrated(ctx.history))
        sc = score(ctx, self.p_pass)
        self.last_best_ei = sc.best_ei
        j, kind = self.pick(ctx, sc)
        s = sc.cands[j]
        self.priced[s] = float(sc.p_oom[j])
        src, savers = sc.paired.get(s, (None, []))
        return s, Proposal(kind="paired" if src is not None else kind, ei=float(sc.ei[j]), p_oom=float(sc.p_oom[j]),
                           p_drift=float(1.0 - sc.p_pass[j]) if sc.p_pass[j] < 1.0 else None,
                           predicted_s=float(np.exp(sc.mean[j])), paired_from=src.to_dict() if src is not None else None,
                           savers=list(savers))

    def calibrated(self, history: History) -> float:
        """The cap's factor from the model-guided proposals' record: (expected OOMs + 1) / (observed OOMs + 1) when
        that is below 1, the expected being the sum of the P(OOM) each was proposed at. A memory model that knows little
        (no knob's meaning, few trials) is overconfident where it has seen nothing, and its own record says so. (The
        same factor above 1, a looser cap where the model was too careful, gained on the OOM-heavy arm with the
        catalog's names but cost OOMs where the model knew the knobs: BENCHMARKS.md.)"""
        told = [(self.priced[s], o.status.over_capacity()) for s, o in history if s in self.priced]
        expected, observed = sum(p for p, _ in told), sum(oom for _, oom in told)
        return min(1.0, (expected + 1.0) / (observed + 1.0))

    def p_pass(self, history: History, cands: Sequence[Setting]) -> np.ndarray:
        """P(each candidate passes the loss check), from the trials that ran (:mod:`.tuner` docstring, step 5): all ones
        until one has broken it."""
        ran = [(s, o.status is TrialStatus.NUMERICS_DRIFT) for s, o in history if o.status.ran()]
        if not self.learn_drift or not any(d for _, d in ran):
            return np.ones(len(cands))
        return drift_p_pass(ran, [k.name for k in self.setup.model_space.knobs], cands)

    def pick(self, ctx: Context, sc: Scored) -> tuple[int, str]:
        """Which scored candidate, and as what: a probe first when one is due, every ``local_every``-th model-guided
        ask the best move from the incumbent, every ``thompson_every``-th the fastest under one posterior draw, else
        the acquisition's best within the trust radius."""
        self.asks += 1
        cfg = ctx.config
        acq = sc.acq
        if cfg.prior_probe > 0:
            j = self.probe(ctx, sc)
            if j is not None:
                return j, "probe"
        if self.local_due(ctx, cfg):
            near = set(ctx.neighbors(ctx.incumbent))
            local = np.array([c in near for c in sc.cands]) & np.isfinite(acq)
            if local.any():
                j = int(np.argmax(np.where(local, acq, -np.inf)))
                self.chosen[sc.cands[j]] = "local"
                return j, "local"
        if self.thompson_every and self.asks % self.thompson_every == 0:
            # Thompson step: the fastest fitting setting under one coherent posterior draw. It explores where the
            # (possibly misspecified) mean model is too sure of itself.
            draw = thompson_draw(ctx, sc.cands)
            if draw is not None:
                draw = np.where(np.isfinite(acq) & (sc.p_pass >= 0.5), draw, np.inf)
                if np.isfinite(draw).any():
                    return int(np.argmin(draw)), "thompson"
        j = int(np.argmax(acq))
        if cfg.trust_radius:
            near = within_trust_radius(ctx.encoder, ctx.history, sc.cands, cfg.trust_radius) & np.isfinite(acq)
            if near.any():
                j = int(np.argmax(np.where(near, acq, -np.inf)))
        self.chosen[sc.cands[j]] = "global"
        return j, "acquisition"

    def local_due(self, ctx: Context, cfg: TunerConfig) -> bool:
        """Whether this ask is a local step (the best one-knob move from the incumbent) rather than a global one (the
        acquisition's best within the trust radius). By evidence (``local_by_evidence``): a Thompson draw from each
        arm's Beta(1 + improved, 1 + did not) over the proposals it chose, whether each beat every trial told before it
        (an OOM did not); the arm with the larger draw. Else every ``local_every``-th model-guided ask (a schedule, an
        ablation)."""
        if not self.local_by_evidence:
            return bool(cfg.local_every) and self.asks % cfg.local_every == 1 % cfg.local_every
        wins = step_record(ctx.history, self.chosen)
        rng = np.random.default_rng([self.setup.seed, self.asks])
        draw = {arm: rng.beta(1 + w, 1 + n - w) for arm, (w, n) in sorted(wins.items())}
        return draw["local"] > draw["global"]

    def probe(self, ctx: Context, sc: Scored) -> int | None:
        """The nearest fitting candidate with the value of :func:`.prior_check.untested_claim` (once per knob)."""
        priors: list[Prior] = list(ctx.time.priors)
        if not priors:
            return None
        ran = [s for s, o in ctx.history if o.status is TrialStatus.OK]
        inc = ctx.incumbent
        claim = untested_claim(priors, ctx.space, inc, ran, skip=self.probed, min_claim=ctx.config.prior_probe,
                               max_sd=ctx.config.prior_probe_sd)
        if claim is None:
            return None
        knob, u = claim
        self.probed.add(knob)
        ok = np.array([c[knob] == u for c in sc.cands]) & np.isfinite(sc.acq)
        if not ok.any():
            return None
        dist = hamming(ctx.encoder.onehot(sc.cands), ctx.encoder.onehot([inc])[0])
        tie = 1e-3 * sc.acq / max(float(np.abs(sc.acq[ok]).max()), 1e-12)  # among the nearest, the best acquisition
        return int(np.argmax(np.where(ok, -dist + tie, -np.inf)))


def step_record(history: History, chosen: dict[Setting, str]) -> dict[str, tuple[int, int]]:
    """Per arm ("local", "global"): (proposals that beat the fastest trial told before them, proposals told), over the
    told settings ``chosen`` names, in the order they were told."""
    out = {"local": [0, 0], "global": [0, 0]}
    best = np.inf
    for s, o in history:
        t = o.step_time_s if o.status is TrialStatus.OK and o.step_time_s else np.inf
        arm = chosen.get(s)
        if arm is not None:
            out[arm][0] += int(t < best)
            out[arm][1] += 1
        best = min(best, t)
    return {arm: (w, n) for arm, (w, n) in out.items()}


def design_step(ctx: Context, p_pass: np.ndarray) -> tuple[Setting, Proposal]:
    """Initial design: promising (prior/model mean, penalised by P(OOM) and P(drift)) and diverse (maximin); once
    ``n_initial`` trials have run out of memory with nothing that ran, every other trial the smallest predicted peak."""
    cands = ctx.candidates
    x = ctx.encoder.onehot(cands)
    mean, _ = ctx.time.predict(cands)
    p_oom = ctx.p_oom(cands)
    score_ = mean - np.log(np.maximum(1.0 - p_oom, 1e-6)) - np.log(np.maximum(p_pass, 1e-6))
    extra = len(ctx.history) + len(ctx.pending) - ctx.config.n_initial
    if extra >= 0 and extra % 2 == 0 and ctx.memory.ready:
        # The design ran its course and nothing ran: every other trial, the smallest predicted peak. Diverse picks
        # alone (the farthest of the promising quarter, where the memory model knows least) went on failing for 19
        # more trials on a perturbed cluster where 9 in 10 valid settings OOM (tests/search/test_structured.py). Not
        # the likeliest to fit: after OOMs alone that is where the model is least sure (the largest predictive sd),
        # not where it believes the peak is small.
        j = int(np.argmin(ctx.memory.predict(cands)[0]))
    else:
        taken = list(ctx.taken)
        x_taken = ctx.encoder.onehot(taken) if taken else None
        j = maximin(x, score_, 1, x_taken=x_taken)[0]
    return cands[j], Proposal(kind="design", p_oom=float(p_oom[j]), predicted_s=float(np.exp(mean[j])),
                              p_drift=float(1.0 - p_pass[j]) if p_pass[j] < 1.0 else None)


def within_trust_radius(encoder: Encoder, history: History, cands: list[Setting], radius: int) -> np.ndarray:
    """(m,) bool: the candidates within ``radius`` knob changes of one of the 5 fastest settings measured."""
    top = encoder.codes(history.fastest(5))
    return ((encoder.codes(cands)[:, None, :] != top[None, :, :]).sum(axis=2) <= radius).any(axis=1)


def thompson_draw(ctx: Context, cands: list[Setting]) -> np.ndarray | None:
    """One coherent posterior draw of log step time over ``cands`` (the time part's ``sample``), or None when the part
    cannot draw or the draw fails on its numerics (logged; the EI maximiser is proposed instead)."""
    try:
        return ctx.time.sample(cands)
    except NUMERICS as e:
        ctx.numerics(f"Thompson draw failed ({type(e).__name__}: {e}); proposed by EI instead")
        return None


def drift_p_pass(ran: list[tuple[Setting, bool]], names: list[str], cands: Sequence[Setting]) -> np.ndarray:
    """P(pass) per candidate: the product over its values of 1 - d / (d + p + 1), d and p the trials with that value
    that drifted and that passed (``ran``: (setting, drifted) of the trials that ran)."""
    counts: dict[tuple[str, Any], list[int]] = {}
    for s, drifted in ran:
        for n in names:
            counts.setdefault((n, s[n]), [0, 0])[0 if drifted else 1] += 1
    out = np.ones(len(cands))
    for i, c in enumerate(cands):
        for n in names:
            d, p = counts.get((n, c[n]), (0, 0))
            if d:
                out[i] *= 1.0 - d / (d + p + 1.0)
    return out
