"""run: search launch knobs and kernel patches; re-verify the best against the baseline; promote.

Reads the lock, the doctor's noise profile and baseline trials, priors (LLM or offline knowledge
base) and the experience bank. Records every trial, then the search record (the tuner's proposals and
the models' effects and prior revisions) and the verification record (the interleaved re-runs, speedups
with CIs, and which candidates were promoted), all through RunDir. A killed run resumes: finished trials
are told to the tuner again, in-flight ones are re-queued (or adopted, on Slurm).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from .. import exitcodes
from ..adapters import run_adapter
from ..adapters.registry import simulated, spec
from ..contract import ContractError, load_locked
from ..contract.model import Contract
from ..contract.numerics import reference_of
from ..execute.prune import Target
from ..trial import Trial
from ..knobs import KnobSpace, Setting
from ..trial.prior import Prior
from ..trial.proposal import Proposal
from ..progress import Heartbeat, eta, eta_at_most
from ..bank.policy import bank_record, bank_seed
from ..estimate.choice import estimate_budget_s, memory_estimate, time_prior
from ..rundir import RunDir, StageDone, Verification
from ..search import Outcome, Tuner, TunerConfig
from ..verify import rebaseline
from ..verify.reverify import reverify
from ..search.record import save_search
from ..search.skip import over_capacity
from ..trial.status import TrialStatus
from . import run_state as state

if TYPE_CHECKING:
    from ..doctor.noise import NoiseProfile
    from ..execute.record import RunRecord
    from ..execute.runner import Runner, TrialAdapter


def outcome_of(t: Trial) -> Outcome:
    """The tuner's view of a finished trial: ok with time and peak; oom censored; pruned with its step time's lower
    bound (censored) and its peak so far; numerics_drift (it ran every step, its loss trace broke the referee) with its peak; the rest
    (skipped: censored like an OOM) a bare status."""
    if t.status is TrialStatus.OK:
        return Outcome(TrialStatus.OK, step_time_s=t.metrics.step_time_s, peak_memory_bytes=t.metrics.peak_memory_bytes)
    if t.status is TrialStatus.PRUNED:
        return Outcome(TrialStatus.PRUNED, step_time_s=t.metrics.step_time_s,
                       peak_memory_bytes=t.metrics.peak_memory_bytes or None)
    if t.status is TrialStatus.NUMERICS_DRIFT:
        return Outcome(TrialStatus.NUMERICS_DRIFT, peak_memory_bytes=t.metrics.peak_memory_bytes or None)
    return Outcome(t.status)


def load_priors(space: KnobSpace, contract: Contract, run_dir: Path, err: Console) -> list[Prior]:
    from ..priors import priors_for

    try:
        return priors_for(space, workload=dict(contract.workload.args), hardware=contract.hardware.model_dump(),
                          record_dir=run_dir, framework=spec(contract.workload.adapter).title)
    except Exception as e:  # priors are advice: a broken source never stops a run
        err.print(f"[yellow]priors unavailable ({type(e).__name__}: {escape(str(e))}); using uninformative priors[/]")
        return []


def evidence_of(contract: Contract) -> str:
    """The kind of evidence this run's trials are: "simulated" (a what-if cluster) or "measured"."""
    return "simulated" if simulated(contract.workload.adapter) else "measured"


@dataclass
class _Search:
    """What the run stage's steps share: the locked run, its space, the tuner and the trials so far."""

    run_dir: Path
    contract: Contract
    noise: NoiseProfile
    record: RunRecord
    adapter: TrialAdapter  # the run's adapter pinned to the kernel verdicts (kernels/verdicts.Pinned)
    contract_dir: Path | None  # the locked contract's folder: workload.launch is relative to it
    space: KnobSpace
    kernel_verdicts: dict[str, Any]
    baseline: Setting
    base_trials: list[Trial]
    base_losses: Any  # the doctor's calibrated loss referee (contract/numerics.py)
    priors: list[Prior] = field(default_factory=list)
    bank_initial: list[Setting] = field(default_factory=list)
    bank_sources: list[str] = field(default_factory=list)
    tuner: Tuner | None = None
    done: list[Trial] = field(default_factory=list)  # search trials that cost budget, in order
    skipped: list[Trial] = field(default_factory=list)  # settings not launched on their memory estimate (no budget)
    rerun: list[tuple[Setting, Proposal]] = field(default_factory=list)  # cut short by Ctrl-C: run again first
    budget: int = 0
    extended: bool = False  # --more (now or killed before): past the contract's budget and stopping rule
    par: int = 1
    search_done: StageDone | None = None
    ref_s: float = 0.0  # the doctor's median step time: search trials are told on its scale
    used_s: float = 0.0  # device seconds spent so far (cancelled trials cost none)
    proposals: dict[str, Proposal] = field(default_factory=dict)  # trial id -> why it was proposed
    in_flight: dict[str, Proposal] = field(default_factory=dict)  # setting key -> why, of trials in flight


def run(run_dir: Path, *, max_trials: int | None, parallel: int | None, console: Console, err: Console,
        more: int | None = None, seed_from_simulated: bool = False, seed: int | None = None) -> int:
    """The run stage: load, guards, resume, budget, the ask/tell loop, verify, bank (one step each below)."""
    run_dir = Path(run_dir)
    loaded = _load(run_dir, err)
    if isinstance(loaded, int):
        return loaded
    contract, noise = loaded
    if max_trials is not None and max_trials > contract.budget.max_trials:
        console.print(f"[yellow]note:[/] --max-trials {max_trials} is above the contract's budget.max_trials "
                      f"({contract.budget.max_trials}): the search runs at most {contract.budget.max_trials} trials "
                      f"(raise budget.max_trials in the contract, with a new --run-dir, for more; or `infrarsi run "
                      f"--more N` after it finishes)")
    code = _guards(run_dir, max_trials, more, console, err)
    if code is not None:
        return code
    s = _prepare(run_dir, contract, noise, err, seed_from_simulated)
    if isinstance(s, int):
        return s
    code = _resume(s, max_trials=max_trials, parallel=parallel, more=more, seed=seed, err=err)
    if code is not None:
        return code
    console.print(f"[bold]run[/] {contract.name}: budget {s.budget} trials ({len(s.done)} done), {s.par} at a time; "
                  f"noise CV {noise.cv:.2%}, mde {noise.mde:.2%}; {len(s.priors)} priors; "
                  f"{len(s.bank_initial)} settings seeded from the bank")
    verification = _search_and_verify(s, console, err)
    bank_record(run_dir, contract, s.record.finished(), s.tuner, err, evidence=evidence_of(contract))
    n_prom = len(verification.promoted())
    console.print(f"[bold]{n_prom} candidate(s) promoted[/]; see {RunDir(run_dir).file(RunDir.VERIFICATION)}")
    return exitcodes.OK if n_prom else exitcodes.NO_PROMOTION


def _load(run_dir: Path, err: Console) -> tuple[Contract, NoiseProfile] | int:
    """The locked contract and the doctor's noise profile, or the exit code of a run that cannot start."""
    from ..doctor.baseline import load_noise

    try:
        contract = load_locked(run_dir)
    except ContractError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 1
    noise = load_noise(run_dir)
    if noise is None:
        err.print(f"[bold red]error:[/] no noise profile in {run_dir}; run `infrarsi doctor --run-dir {run_dir}` first")
        return 1
    return contract, noise


def _guards(run_dir: Path, max_trials: int | None, more: int | None, console: Console, err: Console) -> int | None:
    """The exit code of a run asked for nothing to do (a bad --max-trials, a finished stage), else None; --more
    reopens the search and verification."""
    if max_trials is not None and max_trials < 1:  # the command line refuses it first (min=1)
        err.print("[bold red]error:[/] --max-trials must be >= 1")
        return 2
    if more is None and state.done(run_dir, "verify"):  # a finished stage is finished
        console.print(state.finished_line(run_dir))
        ver = RunDir(run_dir).verification()
        return exitcodes.OK if ver and ver.promoted() else exitcodes.NO_PROMOTION
    if more is not None:
        state.reopen(run_dir, "search", "verify")
    return None


def _prepare(run_dir: Path, contract: Contract, noise: NoiseProfile, err: Console,
             seed_from_simulated: bool) -> _Search | int:
    """The run's adapter, its space with the kernel candidates that pass, the doctor's baseline trials, the priors
    and the bank's seeds; or the exit code when the baseline trials are missing."""
    from ..execute.record import RunRecord
    from ..kernels.space import prepare as prepare_kernels

    adapter = run_adapter(contract.workload.adapter, run_dir)  # launch files relative to the contract
    contract_dir = adapter.base_dir
    record = RunRecord(run_dir)
    full_space = adapter.knob_space(contract)
    noise_phases = getattr(noise, "phases", {}) or {}
    space, kernel_verdicts, adapter = prepare_kernels(full_space, contract, run_dir, adapter, noise_phases, err)
    base_trials = [t for t in (record.get(i) for i in noise.trial_ids) if t is not None and t.status is TrialStatus.OK]
    if not base_trials:
        err.print("[bold red]error:[/] the doctor's baseline trials are missing or failed; rerun `infrarsi doctor`")
        return 1
    s = _Search(run_dir=run_dir, contract=contract, noise=noise, record=record, adapter=adapter,
                contract_dir=contract_dir, space=space,
                kernel_verdicts=kernel_verdicts, baseline=full_space.complete(contract.baseline),
                base_trials=base_trials, base_losses=reference_of(noise))
    s.bank_initial, s.priors, s.bank_sources = bank_seed(space, contract, run_dir,
                                                         load_priors(space, contract, run_dir, err), err,
                                                         evidence=evidence_of(contract),
                                                         from_simulated=seed_from_simulated)
    return s


def _resume(s: _Search, *, max_trials: int | None, parallel: int | None, more: int | None, seed: int | None,
            err: Console) -> int | None:
    """The tuner, told the baseline and every search trial already measured (a killed run resumes), the settings a
    Ctrl-C cut short, and the budget (--more extends it); the exit code of a bad --seed, else None."""
    contract, noise, run_dir = s.contract, s.noise, s.run_dir
    asked = min(contract.budget.max_trials, max_trials or contract.budget.max_trials)
    s.search_done = state.done(run_dir, "search")
    s.par = parallel or contract.budget.parallel_trials
    cfg = TunerConfig(n_initial=max(3, min(TunerConfig.n_initial, asked // 3)), mde=noise.mde)
    try:
        search_seed = state.search_seed(run_dir, seed)
    except ValueError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 2
    s.tuner = tuner = Tuner(s.space, memory_capacity_bytes=contract.hardware.memory_capacity_bytes, priors=s.priors,
                            seed=search_seed, initial=s.bank_initial, noise_cv=max(noise.cv, 1e-3), config=cfg,
                            memory_estimate=memory_estimate(s.space, contract, contract_dir=s.contract_dir,
                                                            budget_s=estimate_budget_s(s.base_trials)),
                            time=time_prior(s.space, contract, contract_dir=s.contract_dir)
                            if cfg.time_prior_from_estimate else None)
    for t in s.base_trials:
        tuner.tell(t.setting, outcome_of(t))
    s.ref_s = noise.median_step_s  # search trials are told on the doctor's scale (verify/rebaseline.py)
    outside = set(state.refuse_outside_space(s.record, s.space, roles={"search"},
                                             say=lambda line: err.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)))
    finished = [t for t in s.record.finished() if t.role == "search" and t.id not in outside]
    # a cancelled trial costs no budget; nor does a skipped one (never launched), told all the same
    s.done = [t for t in finished if t.status not in (TrialStatus.CANCELLED, TrialStatus.SKIPPED)]
    s.skipped = [t for t in finished if t.status is TrialStatus.SKIPPED]
    for t in s.done + s.skipped:  # resume: everything already measured is data again
        tuner.tell(t.setting, outcome_of(rebaseline.rescaled(t, s.record.trials(), s.ref_s)))
    s.rerun = interrupted_settings(finished, s.done, s.space, state.pending(run_dir))  # cut short by Ctrl-C: run again
    budget = asked
    if more is not None:
        budget = state.extend(run_dir, len(s.done) + more)  # on purpose: past the contract's budget and stopping rule
    s.budget = max(budget, state.extended_budget(run_dir) or 0)  # a killed --more resumes with its budget
    s.extended = s.budget > asked
    return None


def _search_and_verify(s: _Search, console: Console, err: Console) -> Verification:
    """The ask/tell loop until the budget or the stopping rule ends it (resumed trials first), its record, then
    the re-verification of the best against the baseline; one Runner and one live line for both."""
    from ..execute import make_executor
    from ..execute.runner import Runner, TrialAdapter

    executor = make_executor(run_dir=s.run_dir)
    s.used_s = sum(t.cost.device_s for t in s.record.finished() if t.status is not TrialStatus.CANCELLED)
    RunDir(s.run_dir).search()  # refuses a search record it could not read: never rewritten over
    s.proposals, s.in_flight = state.proposals(s.record, s.done), state.pending(s.run_dir)
    state.settle_interrupted(s.record, executor, roles={"verify", rebaseline.ROLE})  # before anything new starts
    from ..execute.end_to_end import allowance_s

    # a search trial's figure must agree with its wall time beyond the doctor's baseline's time outside its steps
    cfg = Runner.Config(parallel=s.par, outside_allowance_s=allowance_s(s.base_trials))
    with Runner(s.record, executor, s.adapter, s.contract, config=cfg) as runner, \
            Heartbeat(console, f"run: trial {len(s.done) + 1} of {s.budget}") as beat:
        _loop(s, runner, beat, console, err)
        beat.note("verify: A/B pairs against the baseline")
        verification = reverify(s.run_dir, s.contract, s.record, runner, s.tuner, s.baseline, s.base_losses, s.noise,
                                console, on_pair=_pair_eta(beat))
        state.mark_done(s.run_dir, "verify", promoted=len(verification.promoted()))
    return verification


def _pair_eta(beat: Heartbeat):
    """The live line during verification: which pair runs, and an ETA from this session's pace per pair over the most
    pairs left (the sequential rule may decide sooner: 'at most')."""
    started, pairs = time.monotonic(), [0]

    def note(subject: str, left: int) -> None:
        beat.note(subject, eta_at_most(pairs[0], left, time.monotonic() - started))
        pairs[0] += 1
    return note


def _loop(s: _Search, runner: Runner, beat: Heartbeat, console: Console, err: Console) -> None:
    """Trials in flight when the run was killed, then ask, run, tell until the budget, the device hours, the
    stopping rule or the space ends the search; the search record is written once it stops."""
    from ..kernels.space import after_trial as kernel_after_trial

    tuner, record, done, proposals = s.tuner, s.record, s.done, s.proposals
    cap_s = s.contract.budget.max_device_hours * 3600.0
    used_s = s.used_s
    stop_reason = (s.search_done.stop_reason or "budget spent") if s.search_done else "budget spent"
    started, done_before = time.monotonic(), len(done)

    def progress(n_batch: int) -> None:  # the live line: which trial (its id, as the log names it) of the budget, ETA
        first, tid = len(done) + 1, record.next_id()
        if first > s.budget:  # the last trial finished: nothing of the budget runs next
            beat.note(f"run: the search's {s.budget} trials ran; its record next")
            return
        which = (f"trial {tid} (search {first} of {s.budget})" if n_batch <= 1 else
                 f"trials {tid}-{tid + n_batch - 1} (search {first}-{first + n_batch - 1} of {s.budget})")
        beat.note(f"run: {which}", eta(len(done) - done_before, s.budget - done_before, time.monotonic() - started))

    _resumed(s, runner)
    while not s.search_done and len(done) < s.budget:
        if used_s >= cap_s:
            stop_reason = f"device-hour budget spent ({used_s / 3600:.2f} h)"
            break
        if not s.extended and tuner.should_stop():
            stop_reason = f"expected improvement {tuner.last_best_ei:.4f} below log(1 + mde {s.noise.mde:.3f})"
            break
        used_s += _baseline_again(s, runner, beat, console)
        batch, whys = _next_batch(s, console)
        if not batch:  # or the estimate refused more settings than the budget has trials
            stop_reason = ("search space exhausted" if len(s.skipped) <= s.budget else
                           f"{len(s.skipped)} proposals skipped: their estimated peaks are above capacity")
            break
        state.write_pending(s.run_dir, whys)
        progress(len(batch))
        target = prune_target(s)  # the same for the whole batch: the incumbent before it
        futs = [(x, runner.submit(x, role="search", reference_losses=s.base_losses, prune=target)) for x in batch]
        for x, fut in futs:
            t = fut.result()
            kernel_after_trial(s.run_dir, t, err, s.kernel_verdicts)  # drifted in situ: refused from now on
            tuner.tell(x, outcome_of(rebaseline.rescaled(t, record.trials(), s.ref_s)))
            done.append(t)
            used_s += t.cost.device_s
            proposals[str(t.id)] = why = whys[x.key()]
            state.write_proposal(record, t.id, why)  # provenance survives a kill
            _print_trial(console, t, why, s.baseline)
            progress(len(futs))
    if not s.search_done:
        save_search(s.run_dir, tuner, s.priors, proposals, stop_reason, s.kernel_verdicts, s.bank_sources)
        state.mark_done(s.run_dir, "search", stop_reason=stop_reason, trials=len(done), budget=s.budget)
    console.print(f"search stopped: {stop_reason}" + (" (earlier)" if s.search_done else ""))


def _resumed(s: _Search, runner: Runner) -> None:
    """The search trials in flight when the run was killed: waited for (or run again), told, their proposals kept."""
    for fut in runner.resume(roles={"search"}, reference_losses=s.base_losses):
        t = fut.result()
        s.tuner.tell(t.setting, outcome_of(rebaseline.rescaled(t, s.record.trials(), s.ref_s)))
        s.done.append(t)
        s.proposals[str(t.id)] = why = s.in_flight.get(s.space.complete(t.setting).key(), Proposal(kind="resumed"))
        state.write_proposal(s.record, t.id, why)


def prune_target(s: _Search) -> Target | None:
    """What a search trial is held against while it runs (execute/prune.py), or None (pruning off, or nothing
    told yet): the incumbent (the told setting with the fastest run) at the median of its told runs, on the doctor's
    scale and put back on the scale the machine has now (the latest baseline run's: verify/rebaseline.py), its
    figure's sd the doctor's CV over the root of its runs."""
    if not s.contract.budget.prune or s.tuner is None or not s.adapter.measured_time:
        return None  # a simulated cluster's step time is modelled, not clocked: nothing to judge while it runs
    best = s.tuner.best()
    if best is None:
        return None
    setting = best[0]
    times = [o.step_time_s for x, o in s.tuner.history.ok() if x == setting]
    base = max((t for t in s.record.trials() if t.role in rebaseline.BASE_ROLES and t.status is TrialStatus.OK),
               key=lambda t: t.id, default=None)
    scale = s.ref_s / base.metrics.step_time_s if base is not None and base.role == rebaseline.ROLE else 1.0
    timing = s.contract.invariants.timing
    cv = max(s.noise.cv, 1e-3)
    return Target(incumbent_s=statistics.median(times) / scale, incumbent_sd=cv / len(times) ** 0.5, cv=cv,
                  mde=max(s.noise.mde, 1e-3), warmup_steps=timing.warmup_steps, measured_steps=timing.measured_steps,
                  last_step=max(timing.warmup_steps + timing.measured_steps,
                                s.contract.invariants.loss.compare_steps),
                  incumbent=f"{'the baseline' if setting == s.baseline else 'the best setting so far'}, "
                            f"{len(times)} run(s)")


def _skip_over_capacity(s: _Search, batch: list[Setting], console: Console) -> list[Setting]:
    """``batch`` less the settings whose estimated peak is above capacity beyond the estimate's error
    (search/skip.py): each is recorded ``skipped`` and told to the tuner (peak > capacity, censored)."""
    if not s.contract.budget.skip_over_capacity or s.tuner is None:
        return batch
    keep = []
    for x in batch:
        why = over_capacity(s.tuner.memory_estimate, x, s.contract.hardware.memory_capacity_bytes)
        if why is None:
            keep.append(x)
            continue
        t = s.record.start(s.space.complete(x).to_dict(), role="search")
        t = s.record.finish(t.model_copy(update={"status": TrialStatus.SKIPPED, "evidence": [why],
                                                 "reason": why.split(": not launched")[0][:200]}))
        s.tuner.tell(x, outcome_of(t))
        s.skipped.append(t)
        console.print(f"  trial {t.id:3d} [yellow]skipped [/] {escape(why)}")
    return keep


def _baseline_again(s: _Search, runner: Runner, beat: Heartbeat, console: Console) -> float:
    """The baseline run again when one is due (a baseline close in time: each search trial is compared with the
    latest one before it); the device seconds it cost (0 when none was due)."""
    again = rebaseline.due(s.record.trials(), s.contract.budget.rebaseline_every)
    if not again:
        return 0.0
    beat.note(f"run: the baseline again ({again})")
    b = runner.submit(s.baseline, role=rebaseline.ROLE, reference_losses=s.base_losses).result()
    console.print(f"  baseline again ({again}): " + (
        f"{b.metrics.step_time_s:.4g} s/step against the doctor's {s.ref_s:.4g} s (trial {b.id})"
        if b.status is TrialStatus.OK else f"{b.status.value}: {b.reason} (trial {b.id})"))
    return b.cost.device_s


def _next_batch(s: _Search, console: Console) -> tuple[list[Setting], dict[str, Proposal]]:
    """Up to ``par`` settings to run next, each with why, less those skipped on their memory estimate (asked again
    until one is left to launch, the space is spent, or more were skipped than the budget has trials)."""
    while True:
        batch, whys = _asked(s)
        kept = _skip_over_capacity(s, batch, console) if batch else batch
        if kept or not batch or len(s.skipped) > s.budget:
            return kept, whys


def _asked(s: _Search) -> tuple[list[Setting], dict[str, Proposal]]:
    """Up to ``par`` settings to run next, each with why: the settings a Ctrl-C cut short (with the reasons they
    were proposed for) first, then the tuner's."""
    if s.rerun:
        batch, whys = s.rerun[:s.par], {x.key(): why for x, why in s.rerun[:s.par]}
        del s.rerun[:s.par]
        return [x for x, _ in batch], whys
    batch = s.tuner.ask(min(s.par, s.budget - len(s.done)))
    return batch, {x.key(): _proposed(s.tuner, x) for x in batch}


def _proposed(tuner: Tuner, x: Setting) -> Proposal:
    why = tuner.why(x)
    if why is None:  # the tuner records every setting it asks for
        raise RuntimeError(f"the tuner asked for {dict(x)} without recording why")
    return why


def interrupted_settings(finished: list[Trial], done: list[Trial], space: KnobSpace,
                         pending: dict[str, Proposal]) -> list[tuple[Setting, Proposal]]:
    """The settings of search trials a Ctrl-C cancelled and that no later trial measured, in trial order, each with
    why it was proposed (from the pending proposals: a re-run keeps its provenance). They cost no budget and are run again before the search
    asks for anything new."""
    measured = {space.complete(t.setting).key() for t in done}
    out: dict[str, tuple[Setting, Proposal]] = {}
    for t in finished:
        s = space.complete(t.setting)
        if t.status is TrialStatus.CANCELLED and s.key() not in measured and s.key() not in out:
            out[s.key()] = (s, pending.get(s.key(), Proposal(kind="rerun")).model_copy(update={"rerun_of": t.id}))
    return list(out.values())


def _print_trial(console: Console, t: Trial, why: Proposal, baseline: Setting) -> None:
    """One line per finished trial: status, step time, peak, why it was proposed, what differs from the baseline."""
    st = t.status.value
    color = {TrialStatus.OK: "green", TrialStatus.OOM: "red", TrialStatus.PRUNED: "cyan"}.get(t.status, "yellow")
    ms = f"{t.metrics.step_time_s * 1000:.0f} ms" if t.metrics.step_time_s else "-"
    ms = f">={ms}" if t.status is TrialStatus.PRUNED else ms  # a lower bound
    mem = f"{t.metrics.peak_memory_bytes / 2**20:.0f} MiB" if t.metrics.peak_memory_bytes and t.status is TrialStatus.OK else ""
    changed = ", ".join(f"{k}={v}" for k, v in t.setting.items() if baseline.get(k) != v) or "the baseline"
    extra = f" with {' + '.join(why.savers)}" if why.savers else ""
    console.print(f"  trial {t.id:3d} [{color}]{st:8s}[/] {ms:>8s} {mem:>9s}  ({why.kind}{extra}) {changed}")
