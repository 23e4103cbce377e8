"""Run the baseline ``budget.doctor_repeats`` times and measure its noise.

The baseline is ``contract.baseline`` completed with the adapter's knob defaults. Repeats run one at
a time (parallel trials on a shared machine would be part of the noise we measure), through the
Runner and the run record with role "doctor". A doctor that was killed resumes: its in-flight trial
is adopted or run again, and finished ok baseline runs count toward the repeats. A baseline run that
fails in this invocation stops the doctor: the baseline has to run before anything can be tuned.

A stop on the noise (:class:`DoctorStop`) is a checkpoint, not a verdict: the doctor run again measures the baseline
again. The runs that stopped it stay in the record (and in the noise record of the stop) as evidence; only runs made
after them count toward the new measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..adapters import run_adapter
from ..adapters.base import Adapter
from ..contract.model import Contract
from ..execute import make_executor
from ..execute.classify import loss_drift
from ..execute.executor import Executor
from ..execute.record import RunRecord
from ..execute.runner import Runner
from ..trial import WARMUP_ROLE, Trial, TrialStatus
from ..rundir import RunDir
from ..execute.conditions import cores, load_of
from ..progress import clock
from .noise import NoiseProfile, confirmable, cv, profile, repeats_to_confirm

ROLE = "doctor"


class DoctorError(RuntimeError):
    """The baseline could not be measured; one line saying why and where the evidence is."""


class DoctorStop(DoctorError):
    """The baseline was measured, and its noise means this budget cannot confirm the speedup the contract asks for:
    one plain sentence with the figures and the fix (the run finishes without a promotion, not with an error)."""


class DoctorResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    noise: NoiseProfile
    trials: list[Trial]
    reused: int  # finished baseline runs taken from the record (a resumed doctor)


def load_noise(run_dir: str | Path) -> NoiseProfile | None:
    """The run's noise profile, or None before doctor has run (truncated or edited: RecordError, never
    measured over)."""
    return RunDir(run_dir).noise()


def run_doctor(run_dir: str | Path, contract: Contract, *, adapter: Adapter | None = None,
               executor: Executor | None = None, repeats: int | None = None,
               progress: Callable[[str], None] = lambda s: None) -> DoctorResult:
    adapter = adapter or run_adapter(contract.workload.adapter, run_dir)  # launch files relative to the contract
    n = repeats or contract.budget.doctor_repeats
    record = RunRecord(run_dir)
    runner = Runner(record, executor or make_executor(run_dir=run_dir), adapter, contract, config=Runner.Config(parallel=1))
    with runner:
        baseline = runner.complete(contract.baseline)
        for fut in runner.resume(roles={ROLE}):
            t = fut.result()
            progress(f"resumed baseline trial {t.id}: {_line(t)}")
        stopped = stopped_measurement(contract, RunDir(run_dir).noise())
        after = max(stopped.trial_ids) if stopped else -1  # a measurement that stopped on its noise is not reused
        ok = [t for t in record.matching(baseline, role=ROLE) if t.status is TrialStatus.OK and t.id > after]
        if stopped:
            progress(f"the last measurement stopped on its noise (CV {stopped.cv:.1%}, trials {stopped.trial_ids}): "
                     f"measuring the baseline again; those runs stay in the record as evidence")
        reused = len(ok)
        if reused:
            progress(f"reusing {reused} finished baseline run(s): trials {[t.id for t in ok]}")
        if not ok and not record.matching(baseline, role=WARMUP_ROLE):
            # The first launch on a machine pays for cold file caches (torch's libraries, the workload's
            # imports): it is run once, recorded as warmup, and kept out of the noise estimate. With
            # budget.end_at_last_step the harness ends it after its first step line (execute/tail_stop.py).
            t = runner.submit(baseline, role=WARMUP_ROLE).result()
            progress(f"warm-up run (not measured): {_line(t)}")
            _check_ok(t)
        while True:
            while len(ok) < n:
                t = runner.submit(baseline, role=ROLE).result()
                progress(f"baseline run {len(ok) + 1}/{n}: {_line(t)}")
                _check_ok(t)
                ok.append(t)
            more = _more_repeats(contract, ok[:n] if n < len(ok) else ok)
            if more is None or more <= n:
                break
            progress(f"step time varies {cv([t.metrics.step_time_s for t in ok]):.1%} run to run: {more} baseline runs "
                     f"(budget.doctor_max_repeats {contract.budget.doctor_max_repeats}) let verification confirm a "
                     f"{contract.budget.confirm_speedup:.0%} speedup")
            n = more
    ok = sorted(ok, key=lambda t: t.id)[:n]
    seeds = seed_runs(run_dir, contract, adapter, executor, record, baseline, progress)
    loss = contract.invariants.loss
    ref = ok[0].metrics.losses
    worst, bad = 0.0, []
    for t in ok[1:]:
        w, b = loss_drift(t.metrics.losses, ref, compare_steps=loss.compare_steps, rtol=loss.rtol)
        worst, bad = max(worst, w), bad + [f"trial {t.id}: {x}" for x in b]
    noise = profile([t.metrics.step_time_s for t in ok], trial_ids=[t.id for t in ok],
                    phases=[t.metrics.phases_s for t in ok if t.metrics.phases_s],
                    loss_max_rel_diff=worst, loss_reproduces=not bad, reference_losses=ref, baseline=baseline,
                    numerics=referee(contract, adapter, ok, seeds, baseline))
    RunDir(run_dir).write_noise(noise)
    if bad:
        raise DoctorError(f"the baseline does not reproduce its own loss trace within rtol {loss.rtol} over "
                          f"{loss.compare_steps} steps ({bad[0]}); the workload is not deterministic enough for "
                          f"[invariants.loss] -- fix its seeding or raise rtol in the contract")
    stop = noise_stop(contract, noise, ok, run_dir=Path(run_dir))
    if stop:
        raise DoctorStop(stop)
    return DoctorResult(noise=noise, trials=ok, reused=reused)


def _more_repeats(contract: Contract, ok: list[Trial]) -> int | None:
    """The baseline runs that would let verification confirm ``budget.confirm_speedup`` at the noise measured so far,
    when more than ``ok`` and within ``budget.doctor_max_repeats``; None otherwise."""
    b = contract.budget
    c = cv([t.metrics.step_time_s for t in ok])
    if confirmable(c, len(ok), b.verify_pairs) <= b.confirm_speedup:
        return None
    need = repeats_to_confirm(c, b.confirm_speedup, b.verify_pairs)
    return need if need is not None and len(ok) < need <= b.doctor_max_repeats else None


def stopped_measurement(contract: Contract, noise: NoiseProfile | None) -> NoiseProfile | None:
    """The recorded noise profile when it is one the doctor stopped on (the noise hides ``budget.confirm_speedup``:
    :func:`noise_stop`'s test on the recorded figures); None otherwise, or before any measurement."""
    if noise is None or not noise.loss_reproduces or not noise.trial_ids:
        return None
    b = contract.budget
    return noise if confirmable(noise.cv, noise.repeats, b.verify_pairs) > b.confirm_speedup else None


def noise_stop(contract: Contract, noise: NoiseProfile, ok: list[Trial], *, run_dir: Path | None = None) -> str | None:
    """One plain sentence when the measured noise means this budget cannot confirm ``budget.confirm_speedup``: the
    figures, the machine's load, and what to do, with values a user can set; None when it can.

    The fixes, in order: run the same command again on a quieter machine (the doctor measures again: see the module
    doc); or change the contract (a new run directory: the lock holds this one) to ``budget.confirm_speedup`` = what
    this noise can confirm, rounded up, or, when it is within 4x the runs made, ``budget.doctor_max_repeats`` = the
    runs that would let it confirm the asked speedup, with their cost at this run's pace."""
    b = contract.budget
    can = confirmable(noise.cv, noise.repeats, b.verify_pairs)
    if can <= b.confirm_speedup:
        return None
    la = load_of(t.conditions for t in ok)
    where = f" (load average {la:.1f} on {cores()} cores)" if la is not None else ""
    need = repeats_to_confirm(noise.cv, b.confirm_speedup, b.verify_pairs)
    kept = f" stay in {run_dir} as evidence" if run_dir is not None else " stay in the run directory as evidence"
    settings = []
    if math.isfinite(can):
        settings.append(f"budget.confirm_speedup = {math.ceil(can * 100) / 100:g} (what this noise can confirm)")
    if need is not None and need <= 4 * noise.repeats:
        walls = sorted(t.cost.wall_s for t in ok if t.cost.wall_s > 0)
        each = walls[len(walls) // 2] if walls else None
        cost = f", about {clock((need - noise.repeats) * each)} more at {each:.3g} s a run" if each else ""
        settings.append(f"budget.doctor_max_repeats = {need} ({need - noise.repeats} more baseline runs{cost})")
    change = (f", or set {' or '.join(settings)} in the contract and start a new --run-dir (the lock holds this one)"
              if settings else "")
    return (f"step time varies {noise.cv:.1%} run to run{where}; with {noise.repeats} baseline runs and at most "
            f"{b.verify_pairs} A/B pairs this budget can confirm only a {can:.0%} speedup (the contract asks for "
            f"{b.confirm_speedup:.0%}, budget.confirm_speedup); run the same command again once the machine is quieter "
            f"(the baseline is measured again; these runs{kept}){change}")


SEED_ROLE = "doctor-seed"


def seed_runs(run_dir, contract: Contract, adapter: Adapter, executor, record: RunRecord, baseline,
              progress: Callable[[str], None]) -> list[Trial]:
    """``[invariants.loss] seed_runs`` runs of the baseline with the workload's seed + 1, + 2, ...: the spread
    a new seed gives the loss and gradient norm, which sizes the precision knobs' band. None without a
    ``seed`` workload argument. Resumes like the repeats (finished ones are reused)."""
    k = contract.invariants.loss.seed_runs
    seed = contract.workload.args.get("seed")
    if not k or not isinstance(seed, int) or isinstance(seed, bool):
        return []
    out = []
    for i in range(1, k + 1):
        role = f"{SEED_ROLE}-{i}"
        done = [t for t in record.matching(baseline, role=role) if t.status is TrialStatus.OK]
        if done:
            out.append(done[0])
            continue
        other = contract.model_copy(update={"workload": contract.workload.model_copy(
            update={"args": {**contract.workload.args, "seed": seed + i}})})
        with Runner(record, executor or make_executor(run_dir=run_dir), adapter, other, config=Runner.Config(parallel=1)) as r:
            t = r.submit(baseline, role=role).result()
        progress(f"baseline with seed {seed + i} (sizes the precision band): {_line(t)}")
        _check_ok(t)
        out.append(t)
    return out


def referee(contract: Contract, adapter: Adapter, repeats: list[Trial], seeds: list[Trial], baseline):
    """The calibrated loss referee (see infrarsi.contract.numerics)."""
    from ..contract.numerics import Calibration, calibrate

    loss = contract.invariants.loss
    space = adapter.knob_space(contract)
    cal = Calibration(exact_rtol=loss.exact_rtol, spread_factor=loss.spread_factor,
                      precision_fraction=loss.precision_fraction, rtol=loss.rtol)
    return calibrate([t.metrics for t in repeats], [t.metrics for t in seeds], window=loss.compare_steps, cal=cal,
                     precision_knobs=[k.name for k in space.knobs if k.group == "precision"], baseline=dict(baseline))


def _check_ok(t: Trial) -> None:
    if t.status is not TrialStatus.OK:
        ev = "; ".join(t.evidence[-3:])
        raise DoctorError(f"baseline trial {t.id} ended {t.status.value}: {t.reason} [{ev}] (see {t.path})")


def _line(t: Trial) -> str:
    if t.status is TrialStatus.OK and t.reason:  # a warm-up ended after its first step line (tail_stop.warmed_up)
        return f"{t.reason} (trial {t.id}, {t.cost.wall_s:.1f} s wall)"
    if t.status is TrialStatus.OK:
        return f"{t.metrics.step_time_s:.4g} s/step (trial {t.id}, {t.cost.wall_s:.1f} s wall)"
    return f"{t.status.value}: {t.reason} (trial {t.id})"
