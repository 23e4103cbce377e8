"""The loss referee: does a setting train the same model as the baseline? ("silent numerical drift")

A trial is compared step for step with the baseline's first run over the contract's window
(``[invariants.loss] compare_steps``) on two series: the loss and the global gradient norm (before
clipping). The comparison is meaningful because the data order is fixed: the workload's seed and data are
fixed workload arguments that no setting may change (:func:`.invariants.setting_violations`).

Tolerances are calibrated by the doctor from the baseline's own spread (relative differences to the first
run, per step and series)::

    repeat_spread[i] = max over repeat runs r of |x_r[i] - x_0[i]| / |x_0[i]|          (same seed)
    seed_spread[i]   = max over seed runs s of |x_s[i] - x_0[i]| / |x_0[i]|            (seed + 1, + 2, ...)
    exact[i]     = max(exact_rtol, spread_factor * repeat_spread[i])
    precision[i] = max(exact[i], precision_fraction * seed_spread[i])   (no seed run: max(exact[i], rtol))

A setting whose changed knobs (against the baseline) are all exact (micro-batch at the same global batch,
recompute, data-parallel split, attention backend, kernels, optimizer implementation) must match within
``exact``; a setting that changes a precision knob (group "precision": bf16, fp8, ...) within ``precision``.
Anything else is ``numerics_drift``. A patch that halves the loss, skips a layer's backward or drops a
gradient all-reduce moves the loss or the gradient norm by far more than either band (BENCHMARKS.md,
"Loss referee", and ``scripts/bench_numerics.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..rundir.records import LossBands
from .model import Contract

SERIES = ("loss", "grad_norm")


def rel_diffs(xs: Sequence[float], ref: Sequence[float], n: int) -> list[float]:
    """|x - ref| / max(|ref|, 1e-12) for the first n steps (inf where x is missing or not finite)."""
    out = []
    for i in range(n):
        if i >= len(xs) or i >= len(ref) or not math.isfinite(xs[i]):
            out.append(math.inf)
        else:
            out.append(abs(xs[i] - ref[i]) / max(abs(ref[i]), 1e-12))
    return out


def _series(metrics: Any) -> dict[str, list[float]]:
    return {"loss": list(metrics.losses), "grad_norm": list(getattr(metrics, "grad_norms", []) or [])}


class Referee(LossBands):
    """The calibrated comparison: the bands (built by :func:`calibrate`, stored in the noise record's ``numerics``)
    and how a trial is judged against them."""

    def kind(self, setting: Mapping[str, Any]) -> str:
        """"precision" when the setting moves a precision knob off the baseline, else "exact"."""
        moved = [k for k in self.precision_knobs if k in setting and setting[k] != self.baseline.get(k)]
        return "precision" if moved else "exact"

    def violations(self, setting: Mapping[str, Any], metrics: Any) -> tuple[float, list[str]]:
        """(worst ratio of difference to tolerance, violation lines); [] when the trial matches."""
        kind = self.kind(setting)
        tol = self.exact if kind == "exact" else self.precision
        got = _series(metrics)
        worst, bad = 0.0, []
        for name in SERIES:
            ref = self.reference.get(name) or []
            if not ref:
                continue  # the baseline did not log this series
            diffs = rel_diffs(got[name], ref, self.window)
            for i, (d, t) in enumerate(zip(diffs, tol[name])):
                ratio = d / t if t > 0 else math.inf
                worst = max(worst, ratio)
                if d > t:
                    x = got[name][i] if i < len(got[name]) else None
                    bad.append((i, f"step {i + 1}: {name} {x if x is None else f'{x:.7g}'} vs baseline {ref[i]:.7g}: "
                               f"rel diff {d:.3g} > {kind} tolerance {t:.3g}"))
        return worst, [line for _, line in sorted(bad, key=lambda x: x[0])]  # earliest step first

    def judge(self, verdict: Any, setting: Mapping[str, Any]) -> Any:
        """An ok verdict that leaves its band becomes numerics_drift (metrics kept, evidence: the steps)."""
        from ..trial.status import TrialStatus

        if verdict.status is not TrialStatus.OK:
            return verdict
        worst, bad = self.violations(setting, verdict.metrics)
        if not bad:
            return verdict
        return verdict.model_copy(update={
            "status": TrialStatus.NUMERICS_DRIFT, "evidence": verdict.evidence + bad[:5],
            "reason": f"{self.kind(setting)} numerics: {len(bad)} step(s) outside the calibrated band, up to "
                      f"{worst:.3g}x the tolerance ({bad[0]})"})


@dataclass(frozen=True)
class Calibration:
    exact_rtol: float
    spread_factor: float
    precision_fraction: float
    rtol: float  # the precision band when no seed run was made
    extra: dict[str, Any] = field(default_factory=dict)


def calibrate(repeats: Sequence[Any], seeds: Sequence[Any], *, window: int, cal: Calibration,
              precision_knobs: Sequence[str], baseline: Mapping[str, Any]) -> Referee:
    """The referee from the doctor's runs: ``repeats`` (same seed; the first is the reference) and ``seeds``
    (the baseline with other seeds). Each is a Metrics with losses and grad_norms."""
    ref = _series(repeats[0])
    reference, exact, precision, rep, sd = {}, {}, {}, {}, {}
    for name in SERIES:
        if len(ref[name]) < window:
            continue  # the workload does not log this series (or not long enough): only the others are judged
        reference[name] = ref[name][:window]
        rep[name] = [max([0.0, *col]) for col in zip(*[rel_diffs(_series(m)[name], ref[name], window)
                                                      for m in repeats[1:]])] if len(repeats) > 1 else [0.0] * window
        exact[name] = [max(cal.exact_rtol, cal.spread_factor * r) for r in rep[name]]
        if seeds:
            sd[name] = [max([0.0, *(x for x in col if math.isfinite(x))]) for col in zip(*[rel_diffs(_series(m)[name], ref[name], window) for m in seeds])]
            precision[name] = [max(e, cal.precision_fraction * s) for e, s in zip(exact[name], sd[name])]
        else:
            precision[name] = [max(e, cal.rtol) for e in exact[name]]
    basis = (f"exact: max({cal.exact_rtol:g}, {cal.spread_factor:g} x spread of {len(repeats)} same-seed runs); "
             + (f"precision: max(exact, {cal.precision_fraction:g} x spread of {len(seeds)} other-seed run(s))"
                if seeds else f"precision: max(exact, rtol {cal.rtol:g}) (no other-seed run)"))
    return Referee(window=window, reference=reference, exact=exact, precision=precision, repeat_spread=rep,
                   seed_spread=sd, precision_knobs=list(precision_knobs), baseline=dict(baseline), basis=basis)


def reference_of(noise: Any) -> "Referee | list[float]":
    """What trials are judged against: the doctor's calibrated referee, or (a noise record written before the
    referee existed) the first baseline run's loss trace, checked within ``rtol``."""
    bands = noise.numerics
    return Referee(**dict(bands)) if bands is not None else list(noise.reference_losses)


def drift_of(reference: "Referee | Sequence[float]", contract: Contract, setting: Mapping[str, Any], metrics: Any) -> str | None:
    """None when the trial's numerics match the baseline, else one line saying where they left the band."""
    if isinstance(reference, Referee):
        worst, bad = reference.violations(setting, metrics)
        return f"{reference.kind(setting)} numerics off by up to {worst:.3g}x the tolerance: {bad[0]}" if bad else None
    from .invariants import loss_violation

    return loss_violation(contract, reference, metrics.losses)
