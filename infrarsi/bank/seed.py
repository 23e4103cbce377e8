"""Seeding: a new run starts from the best settings and the learned knob effects of the most similar
past runs in the bank, on this hardware or another.

Similarity. For a past run with hardware h and workload w, against the new run's (h0, w0):

    D = hardware_distance(h, h0) + workload_distance(w, w0)        (see fingerprint.py, signature.py)
    similarity = exp(-D)

e.g. the same model on A100 instead of H100 (same memory): D = 1.0, similarity 0.37; the same model
at twice the sequence length on the same GPU: D = 0.52, similarity 0.59; MoE vs dense adds 2.0.
Runs with D > ``max_distance`` (default 4) or without an ok trial are not used; the ``max_sources``
nearest are.

Initial design. Each source's ok trials, fastest first, are mapped into the new space
(:func:`~infrarsi.bank.transfer.map_setting`: invalid ones dropped, ints moved to the nearest valid
value) and ranked by ``D + 0.5 * rank`` (rank = position among that source's valid mapped settings):
equally near sources alternate, a much nearer source goes first. The first ``k`` distinct ones are
the seed's initial settings. Given the new run's own ``base_priors`` (offline, LLM), each source's
best is also *upgraded*: one-knob changes to values that source never ran (its hardware or space
lacked them: fp8 recipes seen from an A100) that the base priors predict to be faster; they rank
right after that best (``D + 0.5 * (0.5 + j)``). What a source measured is never second-guessed.

Priors. Each source's posteriors (Prior-shaped rows) for knob values the new space has are
re-referenced to the new space's default when the source's reference differs (effect(v) -
effect(new default), when the source knows the latter), transferred
(:func:`~infrarsi.bank.transfer.transfer_prior`: time relative and widened, memory re-based in bytes
for the same task) and combined across sources with weights = similarity. ``Seed.merged_with(base)``
joins them with the run's other priors (Gaussian product by default).

Usage::

    seed = seed_from_bank(bank, space, hardware=contract.hardware, workload=contract, k=5, base_priors=offline)
    tuner = Tuner(space, memory_capacity_bytes=cap, initial=[baseline, *seed.initial],
                  priors=seed.merged_with(offline))
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..knobs.setting import Setting
from ..knobs.space import KnobSpace
from ..trial.prior import Prior
from ..trial.record import WARMUP_ROLE
from ..trial.status import TrialStatus
from .fingerprint import HardwareFingerprint, fingerprint_from, hardware_distance
from .signature import WorkloadSignature, signature_from, workload_distance
from .transfer import combine, map_setting, transfer_prior

if TYPE_CHECKING:
    from .store import Bank

RANK_PENALTY = 0.5  # distance units per rank step within a source


@dataclass(frozen=True)
class SeedSource:
    """One past run the seed drew on, and how far it was."""

    run_id: str
    hardware_kind: str
    workload_name: str
    hw_distance: float
    wl_distance: float
    similarity: float  # exp(-(hw_distance + wl_distance))
    best_step_time_s: float | None
    n_initial: int  # initial settings it contributed
    n_priors: int  # knob values it informed


@dataclass(frozen=True)
class Seed:
    """What a new run starts from: settings to try first, priors for the models, and where they came from."""

    initial: list[Setting]
    priors: list[Prior]
    sources: list[SeedSource]

    def merged_with(self, base: Iterable[Prior], *, how: str = "product") -> list[Prior]:
        """``base`` priors (offline, LLM) merged with the bank's, feature by feature.

        ``how="product"``: where both have a prior, their Gaussians are multiplied, time and memory
        separately (precision-weighted mean, sd = 1 / sqrt(1/sd_a^2 + 1/sd_b^2)): a confident rule of
        thumb is not drowned by a vague transferred posterior, nor the other way round. It counts the
        source run's own starting prior a second time when that was the same base; the transfer's
        widening keeps that small. ``how="replace"``: the bank's prior wins wherever it has one.
        Features only one side knows keep that side's prior."""
        if how not in ("product", "replace"):
            raise ValueError(f"merged_with(how={how!r}): use 'product' or 'replace'")
        mine = {p.feature: p for p in self.priors}
        out = []
        for p in base:
            b = mine.pop(p.feature, None)
            if b is None:
                out.append(p)
            elif how == "replace":
                out.append(b)
            else:
                tm, ts = _product(p.time_mean, p.time_sd, b.time_mean, b.time_sd)
                mm, ms = _product(p.mem_mean, p.mem_sd, b.mem_mean, b.mem_sd)
                out.append(Prior(knob=p.knob, value=p.value, time_mean=tm, time_sd=ts, mem_mean=mm, mem_sd=ms,
                                 source="bank", rationale=f"{p.source}: {p.rationale} | bank: {b.rationale}"[:500]))
        return out + list(mine.values())

    def describe(self) -> str:
        if not self.sources:
            return "bank: no similar past run; starting unseeded"
        parts = [f"{s.run_id} ({s.hardware_kind}, {s.workload_name or 'workload'}, sim {s.similarity:.2f})"
                 for s in self.sources]
        return f"bank: {len(self.initial)} initial settings, {len(self.priors)} priors from " + ", ".join(parts)


def distance(hw_a: HardwareFingerprint, wl_a: WorkloadSignature, hw_b: HardwareFingerprint,
             wl_b: WorkloadSignature) -> tuple[float, float, float]:
    """(hardware distance, workload distance, similarity = exp(-sum))."""
    dh, dw = hardware_distance(hw_a, hw_b), workload_distance(wl_a, wl_b)
    return dh, dw, math.exp(-(dh + dw))


def seed_from_bank(bank: "Bank", space: KnobSpace, *, hardware: Any, workload: Any, k: int = 5,
                   max_sources: int = 3, max_distance: float = 4.0, reference_peak_bytes: float | None = None,
                   base_priors: Iterable[Prior] = (), exclude_runs: Iterable[str] = ()) -> Seed:
    """A Seed for a new run on ``hardware`` training ``workload`` in ``space`` (see the module docstring).

    ``reference_peak_bytes``: the new run's estimated peak memory at the knob defaults (bytes, e.g. from
    a memory calculator), used to re-base memory effects in bytes (with the source's stored reference
    peak, see ``Bank.add_posteriors``); None keeps them relative. ``base_priors``: what the new run
    believes without the bank (offline, LLM); they propose upgrades of each source's best setting with
    knob values that source never ran (see the module docstring). ``exclude_runs``: run ids not to use
    (e.g. the new run itself when it resumes)."""
    if k < 0:
        raise ValueError(f"seed: k={k}; ask for k >= 0 initial settings")
    hw0, wl0 = fingerprint_from(hardware), signature_from(workload)
    base = {p.feature: p for p in base_priors}
    skip = set(exclude_runs)
    scored = []
    for run in bank.runs():
        if run.run_id in skip or run.n_ok == 0:
            continue
        dh, dw, sim = distance(run.hardware, run.workload, hw0, wl0)
        if dh + dw <= max_distance:
            scored.append((dh + dw, run.created_at, run, dh, dw, sim))
    scored.sort(key=lambda x: (x[0], -x[1]))  # nearest first; among equals, the newest
    chosen = scored[:max_sources]

    # ---- initial design
    ranked: list[tuple[float, int, Setting]] = []
    for i, (d, _, run, *_rest) in enumerate(chosen):
        seen: set[Setting] = set()
        every = bank.trials(run.run_id)
        tried = {(name, _k(v)) for st in every for name, v in st.trial.setting.items()}
        ok = sorted((st for st in every if st.trial.status is TrialStatus.OK and st.trial.role != WARMUP_ROLE),
                    key=lambda st: st.trial.metrics.step_time_s)  # a warm-up's figures are not data
        for st in ok:
            s = map_setting(st.trial.setting, space)
            if s is None or s in seen:
                continue
            if not seen and base:  # the source's best, upgraded with what its hardware could not run
                for j, up in enumerate(_upgrades(s, space, tried, base)):
                    ranked.append((d + RANK_PENALTY * (0.5 + j), i, up))
            ranked.append((d + RANK_PENALTY * len(seen), i, s))  # rank 0 for the source's fastest
            seen.add(s)
            if len(seen) >= k:
                break
    ranked.sort(key=lambda x: (x[0], x[1]))
    initial: list[Setting] = []
    contributed = [0] * len(chosen)
    for _, i, s in ranked:
        if len(initial) >= k:
            break
        if s not in initial:
            initial.append(s)
            contributed[i] += 1

    # ---- priors
    by_feature: dict[str, list[tuple[Prior, float]]] = {}
    informed = [0] * len(chosen)
    for i, (_, _, run, dh, dw, sim) in enumerate(chosen):
        rows = [p for _, p in bank.posteriors(run.run_id)]
        for p in _rereference(rows, space):
            t = transfer_prior(p, hw_distance=dh, wl_distance=dw, same_task=run.workload.same_task(wl0),
                               source_peak_bytes=run.reference_peak_bytes, target_peak_bytes=reference_peak_bytes,
                               rationale=f"{run.run_id} on {run.hardware.kind} (sim {sim:.2f}): "
                                         f"time x{math.exp(p.time_mean):.2f}, memory x{math.exp(p.mem_mean):.2f} there")
            by_feature.setdefault(t.feature, []).append((t, sim))
            informed[i] += 1
    priors = []
    for feat in space.feature_names:  # the space's order: stable output
        got = by_feature.get(feat)
        if got:
            priors.append(combine([p for p, _ in got], [w for _, w in got]))

    sources = [SeedSource(run.run_id, run.hardware.kind, run.workload.name, dh, dw, sim, run.best_step_time_s,
                          contributed[i], informed[i])
               for i, (_, _, run, dh, dw, sim) in enumerate(chosen)]
    return Seed(initial=initial, priors=priors, sources=sources)


def _product(m1: float, s1: float, m2: float, s2: float) -> tuple[float, float]:
    """The normalised product of N(m1, s1^2) and N(m2, s2^2): (mean, sd)."""
    w1, w2 = 1 / s1**2, 1 / s2**2
    return (w1 * m1 + w2 * m2) / (w1 + w2), 1 / math.sqrt(w1 + w2)


UPGRADE_MIN = 0.02  # log-time gain a base prior must predict for an untried value to be proposed


def _upgrades(best: Setting, space: KnobSpace, tried: set[tuple[str, str]], base: dict[str, Prior]) -> list[Setting]:
    """One-knob changes of ``best`` to values its source run never ran (its hardware or space lacked
    them, e.g. fp8 on an A100), where the base prior predicts a gain over ``best``'s value of at least
    UPGRADE_MIN; the best value per knob, largest predicted gain first; valid settings only."""
    gains = []
    for knob in space.knobs:
        cur = base.get(f"{knob.name}={best[knob.name]}")
        cur_t = 0.0 if best[knob.name] == knob.default or cur is None else cur.time_mean
        options = []
        for v in knob.domain:
            p = base.get(f"{knob.name}={v}")
            if v == best[knob.name] or (knob.name, _k(v)) in tried or p is None:
                continue
            if p.time_mean - cur_t <= -UPGRADE_MIN:
                options.append((p.time_mean - cur_t, v))
        if options:
            gain, v = min(options, key=lambda o: o[0])
            s = best.replace(**{knob.name: v})
            if space.is_valid(s):
                gains.append((gain, s))
    return [s for _, s in sorted(gains, key=lambda g: g[0])]


def _rereference(rows: list[Prior], space: KnobSpace) -> list[Prior]:
    """Keep the rows about values the space has, expressed relative to the space's default.

    A source whose knob default differed stores an effect for the new default value too; then
    effect'(v) = effect(v) - effect(new default), sds added in quadrature. The row for the new default
    itself is dropped (it is the reference now)."""
    by_key = {(p.knob, _k(p.value)): p for p in rows}
    out = []
    for p in rows:
        if p.knob not in space:
            continue
        knob = space[p.knob]
        match = [v for v in knob.domain if _k(v) == _k(p.value)]
        if not match or _k(match[0]) == _k(knob.default):
            continue
        ref = by_key.get((p.knob, _k(knob.default)))
        if ref is not None:
            p = Prior(knob=p.knob, value=match[0], time_mean=p.time_mean - ref.time_mean,
                      time_sd=math.hypot(p.time_sd, ref.time_sd), mem_mean=p.mem_mean - ref.mem_mean,
                      mem_sd=math.hypot(p.mem_sd, ref.mem_sd), source=p.source, rationale=p.rationale)
        else:
            p = p.model_copy(update={"value": match[0]})
        out.append(p)
    return out


def _k(v: Any) -> str:
    """A type-aware key: True and 1 are different knob values."""
    return f"{type(v).__name__}:{v!r}"
