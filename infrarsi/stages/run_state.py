"""What the run stage keeps between invocations, so that a rerun is idempotent (records owned by RunDir).

- the stages record: which parts of the run stage finished (``search``, ``verify``), when and why. A
  finished part is not run again: ``infrarsi run`` on a finished run says so; ``--more N`` reopens the
  search on purpose for N more trials (and re-verifies after it).
- each trial's proposal: why the tuner proposed it, written as soon as the trial ends, so a kill loses no
  provenance. The pending proposals hold the reasons of the batch in flight (by setting), so a trial
  resumed after a kill keeps its reason too.
- Verify trials interrupted by a kill are ended (their leftover processes or jobs first) and
  recorded as cancelled: an A/B pair has to run back to back, so the pair is run again (and that is recorded).

Every record here is sealed; one that exists but cannot be read stops the run with its name (it is never
replaced by a fresh one).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..execute.record import RunRecord
from ..trial import Proposal, Trial, TrialStatus
from ..rundir import RunDir, StageDone

Part = str  # "search" | "verify"


# ------------------------------------------------------------------ completion
def done(run_dir: Path, part: Part) -> StageDone | None:
    """The completion entry of ``part`` ("search" | "verify"), or None while it is not finished."""
    return getattr(RunDir(run_dir).stages(), part)


def mark_done(run_dir: Path, part: Part, **info: Any) -> None:
    run = RunDir(run_dir)
    body = run.stages()
    run.write_stages(body.model_copy(update={part: StageDone(finished_at=time.time(), **info)}))


def reopen(run_dir: Path, *parts: Part) -> dict[str, StageDone]:
    """Mark ``parts`` unfinished again (``--more``); returns what they said before, kept as history."""
    from ..rundir.records import Reopened

    run = RunDir(run_dir)
    body = run.stages()
    before = {p: getattr(body, p) for p in parts if getattr(body, p) is not None}
    run.write_stages(body.model_copy(update={**{p: None for p in parts},
                                             "reopened": [*body.reopened, Reopened(at=time.time(), was=before)]}))
    return before


def extend(run_dir: Path, budget: int) -> int:
    """Record the search budget `--more` asked for (kept until the search finishes again)."""
    run = RunDir(run_dir)
    run.write_stages(run.stages().model_copy(update={"search_budget": budget}))
    return budget


def extended_budget(run_dir: Path) -> int | None:
    """The budget of a `--more` whose search has not finished yet (None otherwise)."""
    body = RunDir(run_dir).stages()
    return None if body.search else body.search_budget


def search_seed(run_dir: Path, asked: int | None) -> int:
    """The search's seed: the one this run directory's search started with (kept in the stages record), else
    ``asked`` (default 0), recorded now. A resume that asks for another seed is refused: its proposals would not
    continue the recorded ones."""
    run = RunDir(run_dir)
    body = run.stages()
    kept = body.search_seed
    if kept is not None:
        why = _seed_conflict(kept, asked)
        if why:
            raise ValueError(why)
        return int(kept)
    seed = 0 if asked is None else int(asked)
    run.write_stages(body.model_copy(update={"search_seed": seed}))
    return seed


def seed_conflict(run_dir: Path, asked: int | None) -> str | None:
    """Why ``--seed asked`` may not resume this run directory's search (it started with another seed), or None;
    read only, so the command line checks it before the first stage runs."""
    run = RunDir(run_dir)
    return _seed_conflict(run.stages().search_seed if asked is not None and run.has_lock() else None, asked)


def _seed_conflict(kept: int | None, asked: int | None) -> str | None:
    if kept is None or asked is None or asked == kept:
        return None
    return (f"--seed {asked}: this run directory's search started with seed {kept}; resume with --seed {kept} (or no "
            f"--seed), or use a new --run-dir for another seed")


def finished_line(run_dir: Path) -> str:
    """What `infrarsi run` says about a finished run."""
    search = done(run_dir, "search")
    ver = RunDir(run_dir).verification()
    n_prom = len(ver.promoted()) if ver else 0
    verify = done(run_dir, "verify")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(verify.finished_at if verify else 0))
    stop = f"search stopped ({search.stop_reason}) after {search.trials or '?'} trials; " if search else ""
    return (f"run already finished on {when}: {stop}{n_prom} candidate(s) promoted. Next: `infrarsi report "
            f"--run-dir {run_dir}`, or `infrarsi run --run-dir {run_dir} --more N` to search N more trials")


# ------------------------------------------------------------------ provenance
def write_pending(run_dir: Path, whys: Mapping[str, Proposal]) -> None:
    """Reasons of the batch about to be submitted, by setting key (read back when a trial is resumed)."""
    RunDir(run_dir).write_pending(whys)


def pending(run_dir: Path) -> dict[str, Proposal]:
    return RunDir(run_dir).pending()


def write_proposal(record: RunRecord, trial_id: int, why: Proposal) -> None:
    record.dir.write_proposal(trial_id, why)


def proposals(record: RunRecord, trials: list[Trial]) -> dict[str, Proposal]:
    """Trial id -> why it was proposed, from each trial's proposal record (those that have one)."""
    out = {}
    for t in trials:
        why = record.dir.proposal(t.id)
        if why is not None:
            out[str(t.id)] = why
    return out


# ------------------------------------------------------------------ interrupted verify trials
def settle_interrupted(record: RunRecord, executor, *, roles: set[str]) -> list[Trial]:
    """End the trials of ``roles`` left running by a dead runner and record them as cancelled: their
    leftover processes (found by token) or Slurm jobs are stopped first, so nothing keeps running."""
    out = []
    for t in record.running():
        if t.role not in roles:
            continue
        info = record.launch_info(t.id)
        handle = record.handle(t.id)
        token = handle.token if handle else (info.token if info else None)
        ended = []
        if handle is not None and handle.kind == "slurm" and handle.job_id:
            if executor.kind == "slurm":
                from ..execute.slurm import SlurmError

                with contextlib.suppress(SlurmError):  # a job Slurm no longer knows has ended already
                    executor.cancel(handle)
                    ended.append(f"slurm job {handle.job_id} cancelled")
        elif token:
            from ..execute.local import kill_token

            pids = kill_token(token)
            if pids:
                ended.append(f"ended leftover processes {pids}")
        out.append(record.finish(t.model_copy(update={
            "status": TrialStatus.CANCELLED, "finished_at": time.time(),
            "reason": "interrupted by a restart of the runner; its A/B pair is run again (pairs run back to back)",
            "evidence": [*t.evidence, "recorded running when the runner was restarted", *ended]})))
    return out


# ------------------------------------------------------------------ records outside the run's space
def outside_space(space, setting: Mapping[str, Any]) -> str | None:
    """Why a recorded setting is not one of this run's (one line: the knob, its value, the domain), or None. A
    kernel candidate that failed this run's verification has left its knob's domain; a record this run never
    proposed (written by hand) may name any value."""
    try:
        full = {**space.complete(setting), **setting}
    except (ValueError, TypeError) as e:
        return str(e).splitlines()[0]
    bad = [v.message for v in space.validate(full) if v.constraint in ("unknown_knob", "domain", "type")]
    return bad[0] if bad else None


def refuse_outside_space(record: RunRecord, space, *, roles: set[str], say) -> list[int]:
    """Trials of ``roles`` whose setting is outside ``space``: an in-flight one is recorded invalid and never
    launched again, a finished one is left as recorded; neither is told to the search. ``say`` gets one line per
    trial. Returns their ids (for the caller to skip)."""
    out = []
    for t in record.trials():
        if t.role not in roles:
            continue
        why = outside_space(space, t.setting)
        if why is None:
            continue
        out.append(t.id)
        if t.status is TrialStatus.RUNNING:
            record.finish(t.model_copy(update={
                "status": TrialStatus.INVALID, "finished_at": time.time(), "reason": f"not resumed: {why}"[:200],
                "evidence": [*t.evidence, f"recorded running with a setting outside this run's space: {why}"]}))
            say(f"trial {t.id} refused, not resumed: {why} (a candidate that failed verification, or a record this "
                f"run did not propose); the run goes on without it")
        else:
            say(f"trial {t.id} skipped: {why}; its result is not told to the search")
    return out
