"""The run record: every trial on disk, crash-safe.

Per trial (``run_dir`` is ``.infrarsi/<run>``; the files are named and written by :class:`~infrarsi.rundir.RunDir`,
see rundir/names.py): the Trial (status, metrics, cost, evidence; "running" while in flight), the launch
record (executor kind, job id / pid, per-launch token, attempt, the LaunchSpec), the exact command line
started, what the trial added to the environment, and its stdout and stderr (job.sbatch for Slurm).

Every record is written atomically and sealed (rundir/chain.py): a crash or a full disk leaves the previous
version or the new one, never half of one, and never touches another trial's files. Trial ids are allocated
by ``mkdir`` (atomic), so two processes sharing a run directory never get the same id.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..rundir import LaunchRecord, RunDir
from .executor import Handle
from ..trial import LaunchSpec
from ..trial import Trial, TrialStatus


class RunRecord:
    """All trials of one run. Thread-safe within a process; id allocation is safe across processes."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.dir = RunDir(self.run_dir)
        self.trials_dir = self.dir.trials_dir
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- reading
    def trial_dir(self, trial_id: int) -> Path:
        return self.dir.trial_dir(trial_id)

    def get(self, trial_id: int) -> Trial | None:
        """The trial's latest record, or None when it has none (yet). A record that exists but cannot be
        read raises RecordError naming it (it is never replaced by a guess)."""
        return self.dir.trial(trial_id)

    def trials(self) -> list[Trial]:
        """Every recorded trial (finished and running), sorted by id."""
        out = []
        for tid in self._ids():
            t = self.get(tid)
            if t is not None:
                out.append(t)
        return out

    def finished(self) -> list[Trial]:
        return [t for t in self.trials() if t.status.is_finished()]

    def running(self) -> list[Trial]:
        """Trials recorded as in flight: after a crash, the ones to adopt or run again."""
        return [t for t in self.trials() if t.status is TrialStatus.RUNNING]

    def matching(self, setting: Mapping[str, Any], *, role: str | None = None,
                 finished_only: bool = True) -> list[Trial]:
        """Trials of exactly this setting (and role when given)."""
        s = dict(setting)
        pool = self.finished() if finished_only else self.trials()
        return [t for t in pool if t.setting == s and (role is None or t.role == role)]

    def launch_info(self, trial_id: int) -> LaunchRecord | None:
        return self.dir.launch(trial_id)

    def handle(self, trial_id: int) -> Handle | None:
        """The executor handle of the trial's last launch (None before it was launched)."""
        info = self.launch_info(trial_id)
        return info.handle if info else None

    def next_id(self) -> int:
        ids = self._ids()
        return (max(ids) + 1) if ids else 0

    def _ids(self) -> list[int]:
        return self.dir.trial_ids()

    # ----------------------------------------------------------------- writing
    def start(self, setting: Mapping[str, Any], role: str = "search") -> Trial:
        """A new trial, recorded as running (its id is final; its directory exists)."""
        self.trials_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            tid = self.next_id()
            while True:
                try:
                    self.trial_dir(tid).mkdir()  # atomic: another process got this id if it exists
                    break
                except FileExistsError:
                    tid += 1
        trial = Trial(id=tid, setting=dict(setting), status=TrialStatus.RUNNING,
                      role=role, path=str(self.trial_dir(tid)))
        self._write_trial(trial)
        return trial

    def launched(self, trial: Trial, spec: LaunchSpec, handle: Handle, *, command: list[str],
                 env: Mapping[str, str], attempt: int = 0) -> Trial:
        """Record the launch: command, env, spec, the handle (job id / pid + token). Returns the trial
        with its job id and start time."""
        self.dir.write_command(trial.id, list(command))
        self.dir.write_env(trial.id, env)
        self.write_launch(trial.id, handle=handle, spec=spec, attempt=attempt)
        t = trial.model_copy(update={"job_id": handle.job_id, "started_at": handle.submitted_at})
        self._write_trial(t)
        return t

    def write_launch(self, trial_id: int, *, handle: Handle | None, spec: LaunchSpec, attempt: int,
                     token: str | None = None) -> None:
        """The launch record: written with the token *before* submitting (so a crash between sbatch and the
        record can still be adopted by token) and again with the handle after."""
        self.dir.write_launch(trial_id, LaunchRecord(attempt=attempt, spec=spec, written_at=time.time(),
                                                     token=handle.token if handle else token, handle=handle))

    def finish(self, trial: Trial) -> Trial:
        """Record a finished trial (its status must not be running)."""
        if not trial.status.is_finished():
            raise ValueError(f"trial {trial.id}: finish() needs a final status, got {trial.status.value}")
        t = trial.model_copy(update={"path": str(self.trial_dir(trial.id)),
                                     "finished_at": trial.finished_at or time.time()})
        self._write_trial(t)
        return t

    def _write_trial(self, trial: Trial) -> None:
        self.dir.write_trial(trial)  # chained to the run's lock (a bare record is written unsealed)

    # -------------------------------------------------------------------- cost
    def cost_by_status(self) -> dict[str, float]:
        return cost_by_status(self.finished())


def cost_by_status(trials: list[Trial]) -> dict[str, float]:
    """Device-seconds (wall seconds x devices) spent, summed per final status, plus "total"."""
    out: dict[str, float] = {}
    for t in trials:
        out[t.status.value] = out.get(t.status.value, 0.0) + t.cost.device_s
    out["total"] = sum(v for k, v in out.items())
    return out
