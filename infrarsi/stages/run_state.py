"""What the run stage keeps between invocations, so that a rerun is idempotent.

- ``stages.json``: which parts of the run stage finished (``search``, ``verify``), when and why. A
  finished part is not run again: ``infrarsi run`` on a finished run says so; ``--more N`` reopens the
  search on purpose for N more trials (and re-verifies after it).
- ``trials/<n>/proposal.json``: why the tuner proposed trial n, written as soon as the trial ends, so a
  kill loses no provenance. ``proposals.pending.json`` holds the reasons of the batch in flight (by
  setting), so a trial resumed after a kill keeps its reason too.
- Verify trials interrupted by a kill are ended (their leftover processes or jobs first) and
  recorded as cancelled: an A/B pair has to run back to back, so the pair is run again.

Every record here is read with ``read_json_record``: one that exists but cannot be read stops the run
with its name (it is never replaced by a fresh one).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import read_json_record
from ..execute.record import RunRecord
from ..execute.trial import Trial, TrialStatus
from ..io import atomic_write

STAGES_JSON = "stages.json"
PENDING_JSON = "proposals.pending.json"
PROPOSAL_JSON = "proposal.json"


# ------------------------------------------------------------------ completion
def done(run_dir: Path, part: str) -> dict[str, Any] | None:
    """The completion entry of ``part`` ("search" | "verify"), or None while it is not finished.
    A run directory from before stages.json counts verify as finished when verification.json exists."""
    entry = (read_json_record(Path(run_dir) / STAGES_JSON) or {}).get(part)
    if entry:
        return entry
    if part == "verify":
        ver = read_json_record(Path(run_dir) / "verification.json")
        if ver and ver.get("finished_at"):
            return {"finished_at": ver["finished_at"]}
    return None


def mark_done(run_dir: Path, part: str, **info: Any) -> None:
    path = Path(run_dir) / STAGES_JSON
    body = read_json_record(path) or {}
    body[part] = {"finished_at": time.time(), **info}
    atomic_write(path, json.dumps(body, indent=2, sort_keys=True))


def reopen(run_dir: Path, *parts: str) -> dict[str, Any]:
    """Mark ``parts`` unfinished again (``--more``); returns what they said before, kept as history."""
    path = Path(run_dir) / STAGES_JSON
    body = read_json_record(path) or {}
    before = {p: body.pop(p) for p in parts if p in body}
    body.setdefault("reopened", []).append({"at": time.time(), "was": before})
    atomic_write(path, json.dumps(body, indent=2, sort_keys=True))
    return before


def extend(run_dir: Path, budget: int) -> int:
    """Record the search budget `--more` asked for (kept until the search finishes again)."""
    path = Path(run_dir) / STAGES_JSON
    body = read_json_record(path) or {}
    body["search_budget"] = budget
    atomic_write(path, json.dumps(body, indent=2, sort_keys=True))
    return budget


def extended_budget(run_dir: Path) -> int | None:
    """The budget of a `--more` whose search has not finished yet (None otherwise)."""
    body = read_json_record(Path(run_dir) / STAGES_JSON) or {}
    return None if body.get("search") else body.get("search_budget")


def search_seed(run_dir: Path, asked: int | None) -> int:
    """The search's seed: the one this run directory's search started with (kept in stages.json), else ``asked``
    (default 0), recorded now. A resume that asks for another seed is refused: its proposals would not continue
    the recorded ones."""
    path = Path(run_dir) / STAGES_JSON
    body = read_json_record(path) or {}
    kept = body.get("search_seed")
    if kept is not None:
        if asked is not None and asked != kept:
            raise ValueError(f"--seed {asked}: this run directory's search started with seed {kept}; resume with "
                             f"--seed {kept} (or no --seed), or use a new --run-dir for another seed")
        return int(kept)
    body["search_seed"] = seed = 0 if asked is None else int(asked)
    atomic_write(path, json.dumps(body, indent=2, sort_keys=True))
    return seed


def finished_line(run_dir: Path) -> str:
    """What `infrarsi run` says about a finished run."""
    search = done(run_dir, "search") or {}
    ver = read_json_record(Path(run_dir) / "verification.json") or {}
    n_prom = sum(1 for c in ver.get("candidates", []) if c.get("promoted"))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime((done(run_dir, "verify") or {}).get("finished_at", 0)))
    stop = f"search stopped ({search['stop_reason']}) after {search.get('trials', '?')} trials; " if search else ""
    return (f"run already finished on {when}: {stop}{n_prom} candidate(s) promoted. Next: `infrarsi report "
            f"--run-dir {run_dir}`, or `infrarsi run --run-dir {run_dir} --more N` to search N more trials")


# ------------------------------------------------------------------ provenance
def write_pending(run_dir: Path, whys: Mapping[str, dict[str, Any]]) -> None:
    """Reasons of the batch about to be submitted, by setting key (read back when a trial is resumed)."""
    atomic_write(Path(run_dir) / PENDING_JSON, json.dumps(dict(whys), indent=2, sort_keys=True, default=str))


def pending(run_dir: Path) -> dict[str, dict[str, Any]]:
    return read_json_record(Path(run_dir) / PENDING_JSON) or {}


def write_proposal(record: RunRecord, trial_id: int, why: Mapping[str, Any]) -> None:
    atomic_write(record.trial_dir(trial_id) / PROPOSAL_JSON, json.dumps(dict(why), indent=2, sort_keys=True, default=str))


def proposals(record: RunRecord, trials: list[Trial]) -> dict[str, dict[str, Any]]:
    """Trial id -> why it was proposed, from each trial's proposal.json (those that have one)."""
    out = {}
    for t in trials:
        why = read_json_record(record.trial_dir(t.id) / PROPOSAL_JSON)
        if why is not None:
            out[str(t.id)] = why
    return out


# ------------------------------------------------------------------ interrupted verify trials
def settle_interrupted(record: RunRecord, executor, *, roles: set[str]) -> list[Trial]:
    """End the trials of ``roles`` left running by a dead runner and record them as cancelled: their
    leftover processes (found by token) or Slurm jobs are stopped first, so nothing keeps running."""
    from .. import execute

    out = []
    for t in record.running():
        if t.role not in roles:
            continue
        info = record.launch_info(t.id) or {}
        handle = record.handle(t.id)
        token = handle.token if handle else info.get("token")
        ended = []
        if handle is not None and handle.kind == "slurm" and handle.job_id:
            if executor.kind == "slurm":
                with contextlib.suppress(execute.SlurmError):  # a job Slurm no longer knows has ended already
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
