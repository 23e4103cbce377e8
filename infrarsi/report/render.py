"""Build the report of a run as blocks, then write them as markdown (plots as PNG files beside it) and a
self-contained HTML page (the same plots inline, base64 PNG), where RunDir keeps the report.

Every number cites the trials it comes from (ids in the run's ``trials/`` folder) or the file it was
read from. Sections: summary, baseline noise, trials (best so far, status), models (predicted vs
observed, memory boundary), the pre-flight memory estimate vs the measured peak per trial, knob
effects, priors vs posteriors, verification (and every pair run again) and MFU, failed-trial cost,
source-path audit.
"""

from __future__ import annotations

import base64
import html
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..adapters.registry import simulated
from ..execute.end_to_end import extra_startup_s
from ..execute.record import cost_by_status
from .cost import run_cost
from ..execute.runner import unisolated
from ..io import atomic_write
from ..knobs import Setting
from ..rundir import ModelsRecord, RunDir
from ..trial.verified import VerifiedCandidate
from ..verify.speedup import CI_NAME, geometric_means
from ..trial.record import WARMUP_ROLE
from ..trial.status import TrialStatus
from . import conditions, plots
from .audit import audit_files, best_promoted, candidate_problems, changed, run_problems
from .fit import saved_fit
from .load import RunData
from .mfu import flops_per_step, formula, mfu

MiB = 2**20
REPORT_MD = RunDir.REPORT_MD
REPORT_HTML = RunDir.REPORT_HTML
FILES_DIR = RunDir.REPORT_FILES
V, S, N = RunDir.VERIFICATION, RunDir.SEARCH, RunDir.NOISE  # named in the report where its figures come from


@dataclass(frozen=True)
class Block:
    kind: str  # h1 | h2 | p | table | img | code
    text: str = ""
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    png: bytes = b""
    name: str = ""  # image file stem


def pct(x: float) -> float:
    return 100.0 * math.expm1(x)


def _ids(ids: Sequence[int], limit: int = 24) -> str:
    ids = list(ids)
    s = ", ".join(str(i) for i in ids[:limit])
    return f"[{s}{', ...' if len(ids) > limit else ''}]"


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "unknown"


def _knobs(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items()) or "(baseline)"


def _mib(b: float | None) -> str:
    return f"{b / MiB:.0f}" if b else "-"


def _priced_by(models: ModelsRecord | None) -> str:
    """Which models the search ranked and priced with, beside the additive models whose effects the report shows
    ('' for a run recorded before the search said so)."""
    if models is None or models.memory_priced_by == "not recorded":
        return ""
    return (f" At the end of the search, step time was ranked by {models.time_priced_by} and P(OOM) priced by "
            f"{models.memory_priced_by}; the effects below are the additive models' (models/time.py, "
            f"models/memory.py).")


class _Builder:
    def __init__(self, data: RunData, step: Callable[[str], None]) -> None:
        self.d = data
        self.step = step
        self.blocks: list[Block] = []
        self.baseline = ((data.verification.baseline if data.verification else None)
                         or (data.noise.baseline if data.noise else {}) or data.contract.baseline)
        # a what-if cluster (its step times modelled, not measured): its trials use no devices
        self.sim = simulated(data.contract.workload.adapter)

    def h1(self, t: str) -> None:
        self.blocks.append(Block("h1", t))

    def h2(self, t: str) -> None:
        self.blocks.append(Block("h2", t))

    def p(self, t: str) -> None:
        self.blocks.append(Block("p", t))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(Block("table", headers=tuple(headers), rows=tuple(tuple(str(c) for c in r) for r in rows)))

    def img(self, name: str, alt: str, png: bytes) -> None:
        self.blocks.append(Block("img", alt, png=png, name=name))

    # ------------------------------------------------------------------ sections
    def build(self, sections: Sequence[str] | None = None) -> list[Block]:
        for name, fn in (("summary", self.summary), ("noise", self.noise), ("trials", self.trials),
                         ("models", self.models), ("estimate", self.estimate), ("effects", self.effects),
                         ("priors", self.priors), ("verification", self.verification), ("failures", self.failures),
                         ("cost", self.cost_table), ("audit", self.audit)):
            if sections is not None and name not in sections:
                continue
            self.step(name)
            fn()
        return self.blocks

    def summary(self) -> None:
        d, c = self.d, self.d.contract
        hw = c.hardware
        self.h1(f"InfraRSI report: {c.name}")
        peak = f"{hw.peak_flops:.3g} FLOP/s per device" if hw.peak_flops else "peak FLOP/s unknown"
        self.p(f"Contract `{c.name}` (sha256 `{d.contract_sha256}`), adapter `{c.workload.adapter}`, locked "
               f"{_when(d.locked_at)} from `{d.contract_path}`. Hardware: {hw.kind} x {hw.devices}, "
               f"{hw.memory_capacity_gib:g} GiB per device, {peak}. Run directory `{d.run_dir}`; report written "
               f"{_when(datetime.now(timezone.utc).timestamp())}.")
        self.h2("Summary")
        for prob in (run_problems(d) if d.verification is not None else []):
            self.p(f"**Warning:** {prob}")
        bare = [t.id for t in d.trials if unisolated(t)]
        if bare:
            allowed = c.invariants.isolation.allow_unisolated
            self.p(f"**Isolation:** {len(bare)} of {len(d.trials)} trials ran without isolation {_ids(bare, 12)}: "
                   f"they could read the run's records and write outside their directory (the repository and the "
                   f"seals were checked after each). " + ("The contract allows promotion on such evidence "
                   "(invariants.isolation.allow_unisolated)." if allowed else "Promotion on such evidence needs "
                   "invariants.isolation.allow_unisolated = true in the contract."))
        best = best_promoted(d)
        mde = d.verification.mde if d.verification is not None else (d.noise.mde if d.noise else math.nan)
        if best is not None:  # what won, by how much, how sure
            pairs = ", ".join(f"{a}/{b}" for a, b in best.trials)
            lo, hi = best.ci95 or (math.nan, math.nan)
            note = (f" {len(best.unisolated)} of its trials ran without isolation (allowed by the contract)."
                    if best.unisolated else "")
            times = ""
            if best.baseline_s and len(best.baseline_s) == len(best.candidate_s or []):
                gb, gc = geometric_means(best.baseline_s, best.candidate_s)
                times = f" ({gb:.4g} s -> {gc:.4g} s per step, geometric means of its {len(best.baseline_s)} pairs)"
            self.p(f"**Result:** {_knobs(changed(best.setting, self.baseline))} makes a training step "
                   f"**{best.speedup:.3f}x** as fast as the baseline{times}. How sure: with 95% confidence or more, the "
                   f"speedup lies between {lo:.3f}x and {hi:.3f}x, from {best.pairs} back-to-back runs of baseline "
                   f"and candidate (trials {pairs}); it is promoted because even {lo:.3f}x beats the noise floor "
                   f"(+{mde:.1%}: the smallest change this machine's run-to-run noise lets us tell from chance)."
                   f"{note}")
        elif d.verification is not None:
            self.p(f"**No candidate was promoted**: no setting re-ran faster than the baseline by more than the noise "
                   f"floor (+{mde:.1%}, the smallest change the run-to-run noise lets us tell from chance) at the "
                   f"pessimistic end of its {CI_NAME} (see Verification). The launch stays as it is.")
        else:
            self.p(f"No verification yet (`{V}` is missing): run `infrarsi run`.")
        ts = d.trials
        by_status: dict[str, list[int]] = {}
        for t in ts:
            by_status.setdefault(t.status.value, []).append(t.id)
        counts = "; ".join(f"{k} {len(v)} {_ids(v, 12)}" for k, v in by_status.items())
        roles = {r: sum(t.role.startswith(r) for t in ts) for r in ("search", "verify")}
        self.p(f"What was tried: {roles['search']} settings in the search, {roles['verify']} verification re-runs, "
               f"{len(ts) - roles['search'] - roles['verify']} baseline runs; {len(ts)} trials in all ({counts}). "
               f"The search stopped because {_stop_in_words(d.search.stop_reason)}. What it cost: {self.cost(ts)}.")

    def cost(self, ts) -> str:
        """The run's cost in words: device time for measured trials; a simulated cluster's trials spent none."""
        wall = sum(t.cost.wall_s for t in ts if t.status.is_finished())
        if self.sim:
            return (f"{wall:.0f} s on this machine; the cluster is simulated, so its step times are the model's "
                    f"what-if answers and no accelerator time was spent")
        dev = sum(t.cost.device_s for t in ts if t.status.is_finished())
        return f"{dev / 3600:.2f} device-hours ({wall / 3600:.2f} h of wall time, each trial times its devices)"

    def noise(self) -> None:
        self.h2("Baseline and noise")
        n = self.d.noise
        self.p(f"Baseline setting: {_knobs(self.baseline)}.")
        if n is None:
            self.p(f"No noise profile (`{N}`): run `infrarsi doctor`.")
            return
        self.p(f"Median baseline step time {n.median_step_s:.4g} s, 95% bootstrap CI [{n.ci95[0]:.4g}, {n.ci95[1]:.4g}] "
               f"over {n.repeats} runs (trials {_ids(n.trial_ids)}); CV {n.cv:.2%}; minimum detectable effect "
               f"{n.mde:.2%} at {n.repeats} repeats; detecting {n.target_effect:.0%} needs {n.repeats_for_target} "
               f"repeats per setting. Formula: `{n.formula}`.")
        if n.phases:
            self.table(["phase", "s/step (median)"], [(k, f"{v:.4g}") for k, v in n.phases.items()])
        if n.numerics is not None:
            r = n.numerics
            self.p(f"Loss referee: loss and gradient norm compared step for step over {r.window} steps on the "
                   f"fixed data order; {r.basis}. Precision knobs: {', '.join(r.precision_knobs) or 'none'}.")
            self.table(["series", "exact tolerance (max)", "precision band (min..max)", "seed spread (max)"],
                       [(k, f"{max(r.exact[k]):.3g}", f"{min(r.precision[k]):.3g}..{max(r.precision[k]):.3g}",
                         f"{max(r.seed_spread[k]):.3g}" if r.seed_spread.get(k) else "-")
                        for k in r.exact])

    def trials(self) -> None:
        self.h2("Trials")
        ts = self.d.trials
        if not ts:
            self.p("No trials on disk.")
            return
        best = best_promoted(self.d)
        verified = ((statistics.median(best.candidate_s), [b for _, b in best.trials])
                    if best is not None and best.candidate_s and best.trials else None)
        self.img("progress", "Step time by trial: the best the search found, the verified result, every trial's status",
                 plots.progress(ts, verified))
        ok = [t for t in ts if t.status is TrialStatus.OK and t.role != WARMUP_ROLE]  # a warm-up's figures are not data
        if ok:
            b = min(ok, key=lambda t: t.metrics.step_time_s)
            self.p(f"Fastest single trial: {b.metrics.step_time_s:.4g} s/step (trial {b.id}, {b.role}); a single run "
                   f"is not a verified speedup -- see Verification.")
        props = self.d.search.proposals
        rows = []
        for t in ts:
            why = props.get(str(t.id))
            kind = why.kind if why else ""
            if why and why.savers:
                kind += " + " + "+".join(why.savers)
            rows.append((t.id, t.role, t.status.value.upper() if t.status.is_failure() else t.status.value,
                         (">=" if t.status is TrialStatus.PRUNED else "") + f"{t.metrics.step_time_s:.4g}"
                         if t.metrics.step_time_s else "-",
                         _mib(t.metrics.peak_memory_bytes) if t.status is TrialStatus.OK else "-",
                         f"{t.cost.wall_s if self.sim else t.cost.device_s:.1f}",
                         _knobs(changed(t.setting, self.baseline)), kind, t.reason or ""))
        self.table(["trial", "role", "status", "step s", "peak MiB", "wall s here" if self.sim else "device-s",
                    "knobs vs baseline", "proposal", "reason"], rows)

    def models(self) -> None:
        self.h2("Models: predicted vs observed")
        fit = saved_fit(self.d)
        if fit is None:
            self.p(f"No fitted models in `{S}` (the search has not run, or an older version wrote it: rerun "
                   "`infrarsi run`).")
            return
        self.img("predicted_vs_observed", "Predicted vs observed step time and peak memory",
                 plots.predicted_vs_observed(fit))
        inside = sum(1 for r in fit.time if r.lo_s <= r.observed_s <= r.hi_s)
        self.p(f"The tuner's own time model, as fitted at the end of the search, on {len(fit.time)} ok trials "
               f"{_ids([r.trial for r in fit.time])}: {inside} of {len(fit.time)} observed step times fall inside their "
               f"90% predictive interval (in-sample). Its memory model on {len(fit.memory)} trials ({sum(r.status is TrialStatus.OOM for r in fit.memory)} OOMs as censored "
               f"observations, peak > capacity {fit.capacity_bytes / MiB:.0f} MiB)."
               + (f" Trials the tuner was not told, left out: {_ids(fit.skipped)}." if fit.skipped else "")
               + _priced_by(self.d.search.models))
        self.table(["trial", "observed s", "predicted s [90%]", "predicted before the trial"],
                   [(r.trial, f"{r.observed_s:.4g}", f"{r.mean_s:.4g} [{r.lo_s:.4g}, {r.hi_s:.4g}]",
                     f"{r.proposed_s:.4g}" if r.proposed_s else "-") for r in fit.time])
        if fit.memory:
            self.img("memory_boundary", "Memory boundary against capacity", plots.memory_boundary(fit))
            self.table(["trial", "status", "observed MiB", "predicted MiB [90%]", "P(OOM)"],
                       [(r.trial, r.status.value.upper() if r.status is TrialStatus.OOM else r.status.value,
                         _mib(r.observed_bytes) if r.observed_bytes else "> capacity",
                         f"{r.mean_bytes / MiB:.0f} [{r.lo_bytes / MiB:.0f}, {r.hi_bytes / MiB:.0f}]", f"{r.p_oom:.2f}")
                        for r in sorted(fit.memory, key=lambda r: r.trial)])

    def estimate(self) -> None:
        """Per trial: the pre-flight estimate the tuner priced P(OOM) with, the measured peak (or OOM) and
        measured / estimate. An OOM's ratio is a bound: its peak was above capacity, so the ratio is above
        capacity / estimate."""
        self.h2("Pre-flight memory estimate vs measured")
        models = self.d.search.models
        est = models.fitted.estimate if models is not None and models.fitted is not None else {}
        if not est:
            self.p(f"No pre-flight estimates in `{S}` (the search has not run, it ran without a memory "
                   "offset, or an older version wrote it: rerun `infrarsi run`).")
            return
        cap = float(models.capacity_bytes or self.d.contract.hardware.memory_capacity_bytes)
        rows, ratios, missing = [], [], []
        oom_flagged = oom_missed = fit_flagged = 0
        for t in self.d.trials:
            got = est.get(Setting(t.setting).key())
            if got is None:
                missing.append(t.id)
                continue
            e, basis = got
            peak = t.metrics.peak_memory_bytes
            if t.status is TrialStatus.OK and peak:
                ratios.append(peak / e)
                measured, ratio = _mib(peak), f"{peak / e:.3f}"
                fit_flagged += e > cap
            elif t.status is TrialStatus.OOM:
                measured, ratio = f"OOM (> {cap / MiB:.0f})", f"> {cap / e:.3f}"
                oom_flagged, oom_missed = oom_flagged + (e > cap), oom_missed + (e <= cap)
            else:
                measured, ratio = f"- ({t.status.value})", "-"
            rows.append((t.id, t.role, _knobs(changed(t.setting, self.baseline)), f"{e / MiB:.0f}", basis, measured,
                         ratio))
        bases = sorted({b for _, b in est.values()})
        text = (f"The per-rank peak the tuner's memory model took as its offset ({', '.join(bases)}), fixed before "
                f"each trial ran, against the trial's measured peak; capacity {cap / MiB:.0f} MiB. P(OOM) was priced "
                f"by {models.memory_priced_by} at the end of the search.")
        if ratios:
            text += (f" Measured / estimate over {len(ratios)} measured trials: median {statistics.median(ratios):.3f}, "
                     f"range {min(ratios):.3f}..{max(ratios):.3f}; median |error| of the estimate "
                     f"{statistics.median(abs(1 / r - 1) for r in ratios):.1%}.")
        if oom_flagged + oom_missed:
            text += (f" Of {oom_flagged + oom_missed} OOM trials the estimate alone put {oom_flagged} over capacity"
                     + (" (the memory model's learned residual priced the rest)." if oom_missed else "."))
        if fit_flagged:
            text += f" {fit_flagged} trials that fit were estimated over capacity."
        if missing:
            text += f" Trials whose setting the tuner was never told (no estimate saved): {_ids(missing)}."
        self.p(text)
        self.table(["trial", "role", "knobs vs baseline", "estimate MiB", "basis", "measured MiB",
                    "measured / estimate"], rows)

    def effects(self) -> None:
        self.h2("Knob effects (posteriors)")
        s = self.d.search.models
        te, me = (s.time_effects, s.memory_effects) if s is not None else ([], [])
        if not te and not me:
            self.p(f"No effects recorded (`{S}` has none): the search has not run.")
            return
        fit_ids = [t.id for t in self.d.trials if t.status is TrialStatus.OK and t.role in ("doctor", "search")]
        oom_ids = [t.id for t in self.d.trials if t.status is TrialStatus.OOM]
        self.p(f"From `{S}`: the run's time model (fit on ok doctor and search trials {_ids(fit_ids)}) and "
               f"memory model (the same plus OOM trials {_ids(oom_ids)} as censored). Effects are relative to each "
               f"knob's default, percent = 100 (exp(x) - 1), with central 90% posterior intervals."
               + (f" Memory effects are whole effects: the pre-flight estimate's effect (its additive projection, "
                  f"RMS misfit {s.estimate_projection_rms or 0:.3f} log) plus the correction the memory model "
                  f"learned on top of it, whose interval they carry." if s.memory_estimate else "")
               + _priced_by(s))
        cands = self.d.verification.candidates if self.d.verification is not None else []
        flagged = conditions.unreproduced_effects(te, cands, self.baseline)
        if flagged:
            self.p("**Measured under other conditions than verification:** "
                   + "; ".join(f"**{f}** ({why})" for f, why in flagged.items())
                   + ". These effects are the search's; verification did not bear them out.")
        self.img("effects", "Per-knob effect posteriors, time and memory", plots.effects(te, me))
        for name, es in (("time", te), ("memory", me)):
            self.table([f"{name} effect", "mean %", "90% interval %", "prior mean %", "prior source"],
                       [(e.feature, f"{pct(e.mean):+.1f}", f"[{pct(e.lo):+.1f}, {pct(e.hi):+.1f}]",
                         f"{pct(e.prior_mean):+.1f}", e.source) for e in es])

    def priors(self) -> None:
        self.h2("Priors vs posteriors")
        m = self.d.search.models
        revs = m.time_revisions + m.memory_revisions if m is not None else []
        if not revs:
            self.p("No prior revisions recorded (no priors, or the search has not run).")
            return
        bad = [r for r in revs if r.miscalibrated]
        self.p(f"{len(bad)} of {len(revs)} priors were **miscalibrated** (their 90% interval and the posterior's do "
               f"not overlap): " + (", ".join(f"**{r.feature}** ({r.target}, {r.source}: {r.direction})"
                                             for r in bad) or "none") + ".")
        self.img("priors", "Prior vs posterior, miscalibrated priors in red", plots.priors_vs_posteriors(revs))
        self.table(["feature", "target", "source", "prior % [90%]", "posterior % [90%]", "verdict", "rationale"],
                   [(r.feature, r.target, r.source,
                     f"{pct(r.prior_mean):+.1f} [{pct(r.prior_lo):+.1f}, {pct(r.prior_hi):+.1f}]",
                     f"{pct(r.post_mean):+.1f} [{pct(r.post_lo):+.1f}, {pct(r.post_hi):+.1f}]",
                     f"**MISCALIBRATED** ({r.direction})" if r.miscalibrated else "consistent",
                     r.rationale or "") for r in revs])  # whole: the page wraps it

    def verification(self) -> None:
        self.h2("Verification")
        ver = self.d.verification
        if ver is None:
            self.p(f"Not verified yet (`{V}` is missing).")
            return
        cands = ver.candidates
        self.p(f"In words: the best settings of the search were re-run alternately with the baseline (at most "
               f"{ver.repeats} back-to-back pairs each, so a slow drift of the machine hits both sides; two candidates "
               f"verified together share each round's baseline run, one just before it and one just after); a "
               f"candidate is "
               f"promoted when even the pessimistic end of its confidence interval is faster than the baseline by more "
               f"than the noise floor, the minimum detectable effect (mde) of {ver.mde:.2%}, and its loss trace matches "
               f"the baseline's. Rule as recorded: {ver.rule}; finished {_when(ver.finished_at)}. Speedup = exp(mean "
               f"of log(t_baseline / t_candidate) over the pairs), the geometric mean of the pairs' ratios; the "
               f"{CI_NAME} is the sequential one of the look that decided: the looks spend 5% between them, so it "
               f"holds the true speedup with 95% confidence or more however many looks were made.")
        rows = []
        for i, c in enumerate(cands, 1):
            pairs = ", ".join(f"{a}/{b}" for a, b in c.trials)
            sp = f"{c.speedup:.3f}x" if c.speedup is not None else "-"
            ci = f"[{c.ci95[0]:.3f}, {c.ci95[1]:.3f}]" if c.ci95 else "-"
            rows.append((i, _knobs(changed(c.setting, self.baseline)), pairs, sp, ci,
                         "**yes**" if c.promoted else "no", c.reason))
        self.table(["#", "knobs vs baseline", "pairs (baseline/candidate trials)", "speedup", CI_NAME, "promoted",
                    "reason"], rows)
        self.startup()
        for line in conditions.drift_lines(self.d.trials):
            self.p(f"**The machine changed:** {line}")
        for i, c in enumerate(cands, 1):
            if c.explanation:
                self.p(f"Candidate #{i} ({_knobs(changed(c.setting, self.baseline))}): {c.explanation}.")
        if cands:
            self.img("verification", f"Speedup with its {CI_NAME} per candidate",
                     plots.verification(cands, ver.mde))
        self.rerun(ver)
        self.mfu(cands)

    def startup(self) -> None:
        """What the contract's startup_allowance_s exposes, and how much of it the promoted candidate used."""
        t = self.d.contract.invariants.timing
        if not t.startup_allowance_s:
            return
        n = t.warmup_steps + t.measured_steps
        words = (f"**Start-up allowance:** the contract lets a setting spend {t.startup_allowance_s:g} s more than the "
                 f"baseline outside its steps without being charged per step (invariants.timing.startup_allowance_s: "
                 f"torch.compile, autotuning); no measurement tells a start-up from steps computed before their lines, "
                 f"so a trial could hide up to {t.startup_allowance_s:g} s / {n} steps = "
                 f"{t.startup_allowance_s / n * 1000:.1f} ms per step of computation in its start-up.")
        best, by_id = best_promoted(self.d), self.d.by_id
        pairs = [(by_id.get(a), by_id.get(b)) for a, b in best.trials] if best is not None else []
        extra = [x for a, b in pairs if a is not None and b is not None
                 for x in [extra_startup_s(a, b)] if x is not None]
        if extra:
            words += (f" The promoted candidate used {statistics.median(extra):.1f} s of it (its time outside its "
                      f"steps minus its pair's baseline's, median of {len(extra)} pairs, {_span_s(extra)}).")
        self.p(words)

    def rerun(self, ver) -> None:
        """Every A/B pair that was set aside and run again, and verify trials that no pair accounts for."""
        rows = []
        for i, c in enumerate(ver.candidates, 1):
            if c.disturbed:
                rows += [(f"{a}/{b}", f"#{i} {_knobs(changed(c.setting, self.baseline))}", c.disturbed.reason)
                         for a, b in c.disturbed.trials]
        for r in ver.rerun:
            who = _knobs(changed(r.candidate, self.baseline)) if r.candidate else "-"
            rows.append(("/".join(map(str, r.trials)), who, r.reason))
        named = {i for c in ver.candidates for p in (*c.trials, *(c.disturbed.trials if c.disturbed else ()))
                 for i in p} | {i for r in ver.rerun for i in r.trials}
        stray = [t.id for t in self.d.trials if t.role == "verify" and t.id not in named]
        if not rows and not stray:
            self.p("Pairs run again: none (every verify trial is in a pair above).")
            return
        self.p(f"**Pairs run again: {len(rows)}.** A pair is run again only when a trial of it did not finish or "
               f"another job disturbed it; each one is listed here with why.")
        if rows:
            self.table(["pair (baseline/candidate trials)", "candidate", "why it was run again"], rows)
        if stray:
            self.p(f"**Verify trials no pair accounts for: {_ids(stray)}** (run for a candidate that is no longer "
                   f"verified, or a pair whose record is missing).")

    def devices(self, trials) -> int:
        """Devices a step time is spread over: the trials' own; a simulated cluster's step is the contract's."""
        if self.sim:
            return self.d.contract.hardware.devices
        return max((t.cost.devices for t in trials), default=1)

    def mfu(self, cands: list[VerifiedCandidate]) -> None:
        self.h2("MFU")
        c = self.d.contract
        f = flops_per_step(c.workload.args, c.workload.adapter)
        self.p(f"One formula for every MFU here: {formula()}.")
        if f is None:
            self.p("MFU unknown: the workload arguments do not give layers, hidden size, sequence length, global "
                   "batch and vocabulary.")
            return
        flops, n, t = f
        self.p(f"This workload: N = {n:,} matmul parameters, T = {t:,} tokens per step, FLOPs/step = {flops:.4g}.")
        peak = c.hardware.peak_flops
        if not peak:
            self.p("MFU unknown: hardware.peak_flops is unset in the contract (set it to the device's peak FLOP/s "
                   "to get MFU).")
        by = self.d.by_id
        rows = []
        for i, cd in enumerate(cands, 1):
            if not cd.baseline_s or not cd.candidate_s:
                continue
            b_ids = [a for a, _ in cd.trials]
            c_ids = [b for _, b in cd.trials]
            b_dev = self.devices([by[a] for a in b_ids if a in by])
            c_dev = self.devices([by[b] for b in c_ids if b in by])
            tb, tc = statistics.median(cd.baseline_s), statistics.median(cd.candidate_s)
            mb, mc = mfu(flops, tb, b_dev, peak), mfu(flops, tc, c_dev, peak)
            rows.append((i, f"{tb:.4g} s x {b_dev} dev", f"{tc:.4g} s x {c_dev} dev",
                         f"{mb:.2%}" if mb is not None else "unknown", f"{mc:.2%}" if mc is not None else "unknown",
                         f"{_mib(cd.baseline_peak_memory_bytes)} -> {_mib(cd.peak_memory_bytes)}",
                         f"{_ids(b_ids)} / {_ids(c_ids)}"))
        if rows:
            self.table(["#", "baseline (median step)", "candidate (median step)", "MFU before", "MFU after",
                        "peak MiB before -> after", "trials baseline / candidate"], rows)

    def failures(self) -> None:
        self.h2("Failed trials: cost")
        failed = [t for t in self.d.trials if t.status.is_failure()]
        if not failed:
            self.p("No trial failed.")
            return
        cost = {k: v for k, v in cost_by_status(failed).items() if k != "total"}
        total = sum(t.cost.device_s for t in self.d.trials if t.status.is_finished())
        ids: dict[str, list[int]] = {}
        for t in failed:
            ids.setdefault(t.status.value, []).append(t.id)
        spent = sum(cost.values())
        self.p(f"{len(failed)} failed trials cost {spent:.1f} device-seconds, {spent / total:.1%} of the run's "
               f"{total:.1f}. Each is data: OOMs are censored memory observations, the rest mark settings never to "
               f"try again.")
        self.table(["kind", "trials", "device-s", "share of run"],
                   [(k.upper(), _ids(ids[k]), f"{v:.1f}", f"{v / total:.1%}") for k, v in sorted(cost.items())])
        self.img("failure_cost", "Failed-trial cost in device-seconds by failure kind", plots.failure_cost(cost))

    def cost_table(self) -> None:
        """Device-seconds per phase, what pruning and skipping saved and risked (report/cost.py)."""
        self.h2("Cost")
        c = run_cost(self.d.trials)
        self.table(["phase", "trials", "wall s here" if self.sim else "device-s", "share", "of which start-up",
                    "after the last step"],
                   c.rows())
        for line in c.lines():
            self.p(line)

    def audit(self) -> None:
        self.h2("Source-path audit")
        ver = self.d.verification
        scope = self.d.contract.scope.files
        self.p(f"Locked scope (scope.files): {', '.join(f'`{g}`' for g in scope) or '(none: no file may be written)'}. "
               f"Each promoted candidate's files, their sha256 now, and whether they are still the verified files.")
        proms = ver.promoted() if ver else []
        if not proms:
            self.p("No promoted candidate: nothing to audit.")
        for i, c in enumerate(proms, 1):
            files = audit_files(self.d, c.setting)
            probs = candidate_problems(self.d, c) + run_problems(self.d)
            status = "applicable" if not probs else "NOT applicable: " + "; ".join(probs)
            self.p(f"Promoted candidate {_knobs(changed(c.setting, self.baseline))}: {status}.")
            if not files:
                self.p("It touches no source file (launch knobs only).")
                continue
            self.table(["file", "op", "sha256 now", "verified sha256", "verdict", "scope"],
                       [(f.candidate, f.op, f.sha256 or "missing", f.verified_sha256 or "never verified",
                         f.verdict or "-", f"inside (`{f.scope_glob}`)" if f.in_scope else "**OUTSIDE**")
                        for f in files])
        kv = self.d.search.kernel_verdicts
        if kv:
            self.p(f"Every kernel candidate the run verified ({S}); generated ones say why their op was chosen:")
            self.table(["file", "origin", "verdict", "sha256", "reasons"],
                       [(p, v.origin + (f" ({v.why})" if v.why else ""), v.verdict or "-", v.sha256 or "",
                         "; ".join(v.reasons)) for p, v in sorted(kv.items())])


def build(data: RunData, step: Callable[[str], None] = lambda s: None, *,
          sections: Sequence[str] | None = None) -> list[Block]:
    """The report's blocks; ``sections`` picks some (summary, noise, trials, models, estimate, effects, priors,
    verification, failures, cost, audit), None = all."""
    return _Builder(data, step).build(sections)


# ---------------------------------------------------------------------- writers
def _span_s(xs: Sequence[float]) -> str:
    return f"{min(xs):.1f} s" if max(xs) - min(xs) < 0.05 else f"{min(xs):.1f} to {max(xs):.1f} s"


def _stop_in_words(reason: str | None) -> str:
    """The search's recorded stop reason, said plainly ("expected improvement 0.21 below log(1 + mde 0.36)")."""
    if not reason:
        return "it did not record why"
    if reason.startswith("expected improvement"):
        return ("no setting left untried was expected to beat the best one by more than the noise floor "
                f"({reason})")
    return {"budget spent": "its trial budget was spent",
            "search space exhausted": "every valid setting had been tried"}.get(reason, reason)


def _md_text(s: str) -> str:
    """Text made inert for a Markdown renderer. Some fields carry text from outside the project: a prior's
    rationale and source (an LLM's words, or a bank's), a generated kernel's reason for its op, the verifier's
    reasons (a candidate's own error text). Raw HTML (``<script>``, ``<img onerror=...>``, ``<a href=...>``, an
    autolink ``<javascript:...>``) becomes text (``<`` -> ``&lt;``); a link or an image (``[x](javascript:...)``,
    ``![x](http://tracker/)``, ``[x][ref]``) loses its target (``](`` -> ``]\\(``) and no line starts a link
    definition (``[ref]: ...``). Bold and code spans stay (they run nothing). report.html escapes every field."""
    s = s.replace("<", "&lt;").replace("](", "]\\(").replace("][", "]\\[")
    return re.sub(r"(?m)^(\s*)\[", r"\1\\[", s)


def _md_cell(s: str) -> str:
    """A table cell: as :func:`_md_text`, on one line (a cell starts after ``| ``: no line of it starts a
    definition, so a leading ``[1, 2]`` stays as written)."""
    return s.replace("<", "&lt;").replace("](", "]\\(").replace("][", "]\\[").replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: Sequence[Block], files_dir: str = FILES_DIR) -> str:
    out = []
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {_md_text(b.text)}\n")
        elif b.kind == "h2":
            out.append(f"## {_md_text(b.text)}\n")
        elif b.kind == "p":
            out.append(_md_text(b.text) + "\n")
        elif b.kind == "img":
            out.append(f"![{b.text}]({files_dir}/{b.name}.png)\n")
        elif b.kind == "table":
            out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
            out.append("|" + "---|" * len(b.headers))
            out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in b.rows]
            out.append("")
    return "\n".join(out)


def _strong(m: re.Match) -> str:
    """Bold text: green for a success, red for an alarm (Warning, MISCALIBRATED, OUTSIDE...), else plain bold."""
    text = m.group(1)
    if text.startswith(("Result", "yes")) or re.fullmatch(r"[0-9.]+x", text):
        return f"<strong class='good'>{text}</strong>"
    if text.startswith(("Warning", "Isolation", "No candidate")) or (text.isupper() and len(text) > 2):
        return f"<strong class='bad'>{text}</strong>"
    return f"<strong>{text}</strong>"


def _inline(s: str) -> str:
    s = html.escape(s)
    s = re.sub(r"\*\*(.+?)\*\*", _strong, s)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", s)


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.4em;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f2f2f2}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}
strong.good{color:#17702a}strong.bad{color:#a40000}code{background:#f4f4f4;padding:0 3px}h2{border-bottom:1px solid #ddd;padding-bottom:3px}"""


def to_html(blocks: Sequence[Block]) -> str:
    title = next((b.text for b in blocks if b.kind == "h1"), "InfraRSI report")
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
           f"<style>{CSS}</style></head><body>"]
    for b in blocks:
        if b.kind in ("h1", "h2"):
            out.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            out.append(f"<p>{_inline(b.text)}</p>")
        elif b.kind == "img":
            data = base64.b64encode(b.png).decode()
            out.append(f"<figure><img id='fig-{b.name}' alt='{html.escape(b.text, quote=True)}' "
                       f"src='data:image/png;base64,{data}'><figcaption>{html.escape(b.text)}</figcaption></figure>")
        elif b.kind == "table":
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.headers) + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in b.rows]
            out.append("</tbody></table>")
    out.append("</body></html>")
    return "\n".join(out)


def write_report(data: RunData, step: Callable[[str], None] = lambda s: None) -> tuple[Path, Path]:
    """Write the report (markdown, its plots as PNG files beside it, and a self-contained HTML page) into the
    run directory."""
    blocks = build(data, step)
    step("writing")
    run = RunDir(data.run_dir)
    files = run.file(FILES_DIR)
    files.mkdir(exist_ok=True)
    for b in blocks:
        if b.kind == "img":
            (files / f"{b.name}.png").write_bytes(b.png)
    md, page = run.file(REPORT_MD), run.file(REPORT_HTML)
    atomic_write(md, to_markdown(blocks))
    atomic_write(page, to_html(blocks))
    return md, page
