"""The Executor protocol: start one LaunchSpec somewhere, watch it, stop it.

An executor knows nothing about frameworks or statuses. It starts a process (or a Slurm job) with
its stdout/stderr in the trial directory, enforces the time limit, and reports a ``LaunchEnd``: how
the process ended (exit code, signal, time-out, cancel, a memory kill it saw itself) and how long it
ran. ``classify.py`` turns a LaunchEnd plus the adapter's parse into a trial status.

Files an executor writes into the trial directory: STDOUT, STDERR (and ``job.sbatch`` for Slurm).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..rundir.names import STDERR, STDOUT  # noqa: F401 - the executors' output files, named where the run's are
from ..trial.launch import Handle, LaunchEnd, LaunchSpec

__all__ = ["Executor", "StepLines", "Handle", "LaunchEnd", "LaunchSpec", "create_new", "fresh_trial_dir", "open_regular", "tail", "wait"]


class StepLines(Protocol):
    """A running trial's step lines as the harness's clock stamped them (clock.py's LineClock)."""

    def step_lines(self) -> list[tuple[str, int, int, float, int]]:
        """(stream, rank, step, arrival seconds since the launch, read number) of every step line so far."""


@runtime_checkable
class Executor(Protocol):
    kind: str

    def submit(self, spec: LaunchSpec, trial_dir: Path, *, token: str) -> Handle:
        """Start the launch; stdout/stderr go to ``trial_dir/stdout`` and ``trial_dir/stderr``."""

    def poll(self, handle: Handle) -> LaunchEnd | None:
        """None while it runs; its LaunchEnd once it has ended. Enforces the handle's time limit."""

    def cancel(self, handle: Handle) -> None:
        """Stop it (the whole process group / job); its next poll reports ``cancelled``."""

    def end(self, handle: Handle) -> None:
        """Stop it as ``cancel`` does, because it has printed every line it is measured by (execute/tail_stop.py):
        its next poll reports ``ended``, not ``cancelled``."""

    def adopt(self, handle: Handle) -> Handle | None:
        """After a restart: the handle to keep watching when the launch is still known (running or
        finished), None when it is gone and must be launched again."""

    def command_line(self, spec: LaunchSpec) -> list[str]:
        """The command as a person would run it (recorded in the trial's ``command`` file)."""

    def isolates(self, trial_dir: Path, spec: LaunchSpec | None = None) -> bool:
        """Whether the trial of ``trial_dir`` (launching ``spec``, when given) runs in the box (it can write nothing
        outside its ``outputs/``); an unisolated trial's repository is compared before and after it."""

    def live_clock(self, handle: Handle) -> StepLines | None:
        """The running trial's step lines as the harness stamps them (execute/prune.py judges them), None where the
        executor has no live clock (a Slurm job writes its own output) or the trial has ended."""


def wait(executor: Executor, handle: Handle, *, timeout_s: float | None = None, interval_s: float = 0.05,
         max_interval_s: float = 0.5) -> LaunchEnd:
    """Poll until the launch ends (backing off from ``interval_s`` to ``max_interval_s``).
    ``timeout_s`` bounds this wait only (TimeoutError); the trial's own limit is the executor's job."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = interval_s
    while True:
        out = executor.poll(handle)
        if out is not None:
            return out
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"trial in {handle.trial_dir} still running after waiting {timeout_s} s")
        time.sleep(pause)
        pause = min(max_interval_s, pause * 1.5)


def open_regular(path: Path) -> int | None:
    """A read-only descriptor of ``path`` when it is a regular file, else None: never follows a link, never waits
    on a FIFO or a device a trial may have put in its place (O_NOFOLLOW | O_NONBLOCK, then fstat)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def tail(path: Path, max_bytes: int = 64_000) -> str:
    """The last ``max_bytes`` of a regular text file ("" when missing or anything else: :func:`open_regular`),
    decoded leniently."""
    fd = open_regular(path)
    if fd is None:
        return ""
    try:
        with open(fd, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes).decode("utf-8", errors="replace")
    except OSError:
        return ""


def fresh_trial_dir(trial_dir: Path, names: tuple[str, ...], outputs: str) -> None:
    """Make ``trial_dir`` ready for a launch attempt: the runner's files of an earlier attempt (``names``) removed
    (the entries themselves: a link or FIFO put there is not followed), and ``outputs`` a new, empty folder; an
    earlier attempt's outputs move to ``<outputs>.<k>`` (renamed, not followed)."""
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        try:
            os.unlink(trial_dir / name)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            os.rename(trial_dir / name, trial_dir / f"{name}.{time.time_ns()}")
    out = trial_dir / outputs
    if os.path.lexists(out):
        k = 1
        while os.path.lexists(trial_dir / f"{outputs}.{k}"):
            k += 1
        os.rename(out, trial_dir / f"{outputs}.{k}")
    out.mkdir()


def create_new(path: Path) -> int:
    """A write descriptor of a new file at ``path`` (O_EXCL | O_NOFOLLOW: nothing a trial put there is followed)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
