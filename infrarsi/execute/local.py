"""LocalExecutor: one trial = one process group on this machine.

- The process starts in its own session (``start_new_session``), so cancel and time-out kill the
  whole group (a shell and its children), and with it every process carrying the trial's token, which
  reaches what left the group: torchrun starts each rank in a session of its own, so the group alone is
  torchrun, whose SIGKILL leaves its ranks training on.
- Memory cap: ``spec.memory_cap_bytes`` becomes the child's RLIMIT_DATA (per process; inherited by
  workers) and is passed as ``INFRARSI_MEMORY_CAP_BYTES`` so the workload can report it. The limit is
  set by a tiny exec wrapper (``trial_wrapper.py``, then ``os.execvp``) rather than ``preexec_fn``,
  which is not safe while the runner's threads run.
- The trial dies with the runner: the wrapper leaves a watchdog in the trial's process group that
  SIGKILLs the group when the runner process ends (kill -9 included), so no training process is
  left holding cores and memory (see ``trial_wrapper.py``).
- ``python`` as argv[0] means the interpreter running infrarsi (the venv's), everywhere.
- The run directory is read-only to the trial (``sandbox.py``): its processes run in a private mount namespace
  where ``RUN_DIR`` is read-only, their own ``RUN_DIR/trials/<n>`` read-write and the seal key empty, with no
  capabilities left to undo it. Where this machine does not allow mount namespaces (or ``Config.sandbox`` is
  off, ``INFRARSI_SANDBOX=off``), the trial runs without it: the executor logs why once, and the handle says so,
  which the runner records as a warning on every such trial and answers with the post-hoc check of the seal
  chain after the trial.
- The process carries ``INFRARSI_TRIAL_TOKEN`` in its environment; after a restart, leftover
  processes of a trial are found by that token in /proc and ended before the trial is run again.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..contract.seal import key_path
from . import sandbox
from .clock import LineClock
from .executor import STDERR, STDOUT, Handle, LaunchEnd
from .spec import LaunchSpec

TOKEN_ENV = "INFRARSI_TRIAL_TOKEN"
CAP_ENV = "INFRARSI_MEMORY_CAP_BYTES"

# argv: [python, trial_wrapper.py, cap_bytes_or_"none", runner pid, sandbox_json_or_"none", command...]: lowers
# RLIMIT_DATA, starts the watchdog that ends the group when the runner dies, enters the sandbox, then becomes the command.
WRAPPER = str(Path(__file__).with_name("trial_wrapper.py"))
log = logging.getLogger(__name__)


@functools.cache
def sandbox_problem() -> str | None:
    """Why this machine cannot sandbox a trial (one line), or None; probed once per process."""
    return sandbox.probe()


def run_dir_of(trial_dir: Path) -> Path | None:
    """The run directory a trial directory belongs to (``RUN_DIR/trials/<n>``), or None for a bare one."""
    from ..rundir import RunDir

    run = RunDir.of_trial_dir(Path(trial_dir).resolve())
    return run.path if run is not None else None


def resolve_argv(argv: list[str]) -> list[str]:
    """``python`` / ``python3`` at the front means this interpreter (the venv's); a bare ``torchrun``
    not on PATH means the one installed beside it (the same torch); a launch script's ``${PWD}``, kept as the
    user wrote it, is the directory the trial starts in."""
    from ..launch.command import expand_kept

    argv = expand_kept(argv)
    if argv and argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    if argv and argv[0] == "torchrun" and shutil.which("torchrun") is None:
        beside = Path(sys.executable).with_name("torchrun")
        if beside.is_file():
            return [str(beside), *argv[1:]]
    return list(argv)


def resolve_program(prog: str, base: Path | None = None) -> str | None:
    """Where ``prog`` (argv[0]) would be found at launch: this interpreter for python, PATH, beside this
    interpreter (torchrun), or a path (relative to ``base`` or the working directory). None: not installed."""
    first = resolve_argv([prog])[0]
    if "/" in first:
        for p in (Path(first), *(() if base is None else (Path(base) / first,))):
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
        return None
    return shutil.which(first)


def trial_env(spec: LaunchSpec, token: str, trial_dir: Path) -> dict[str, str]:
    """What a trial adds to the inherited environment (also recorded in the trial's env.json)."""
    env = dict(spec.env)
    env.setdefault("PYTHONUNBUFFERED", "1")  # every line reaches the log before a kill
    env[TOKEN_ENV] = token
    env["INFRARSI_TRIAL_DIR"] = str(trial_dir)
    if spec.memory_cap_bytes is not None:
        env[CAP_ENV] = str(spec.memory_cap_bytes)
    return env


class LocalExecutor:
    """Runs each trial as a subprocess (group) on this machine."""

    kind = "local"

    class Config(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")

        kill_grace_s: float = Field(3.0, ge=0)
        """Seconds between SIGTERM and SIGKILL when a trial is cancelled or runs past its limit."""
        sandbox: bool = True
        """Run each trial with its run directory read-only to it (sandbox.py), where this machine allows it;
        elsewhere, or when False, trials run without it and each one's record carries the warning."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or LocalExecutor.Config()
        self._procs: dict[str, subprocess.Popen] = {}  # token -> process
        self._started: dict[str, float] = {}  # token -> monotonic start
        self._why: dict[str, str] = {}  # token -> "timeout" | "cancel"
        self._clocks: dict[str, LineClock] = {}  # token -> the stdout pipe's line clock
        self._warned: set[str] = set()  # sandbox warnings already logged
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ submit
    def command_line(self, spec: LaunchSpec) -> list[str]:
        """The command as a person would run it (recorded in the trial's ``command`` file)."""
        return resolve_argv(spec.argv)

    def sandbox_for(self, trial_dir: Path) -> tuple[dict | None, str]:
        """(the wrapper's sandbox spec, or None; why there is none, "" when there is one) for a trial directory."""
        run_dir = run_dir_of(trial_dir)
        if run_dir is None:
            return None, ""  # a bare trial directory (no run around it): nothing to protect
        if not self.config.sandbox:
            return None, "the trial sandbox is off (LocalExecutor.Config.sandbox = false or INFRARSI_SANDBOX=off)"
        why = sandbox_problem()
        if why is not None:
            return None, f"this machine cannot sandbox trials ({why})"
        key = key_path()
        return {"ro": [str(run_dir)], "rw": [str(Path(trial_dir).resolve())],
                "hide": [str(key.resolve())] if key.is_file() else []}, ""

    def command(self, spec: LaunchSpec, trial_dir: Path | None = None) -> list[str]:
        """The exact argv started (the memory wrapper, then the spec's command)."""
        cap = "none" if spec.memory_cap_bytes is None else str(spec.memory_cap_bytes)
        box = None if trial_dir is None else self.sandbox_for(trial_dir)[0]
        return [sys.executable, WRAPPER, cap, str(os.getpid()), "none" if box is None else json.dumps(box),
                *resolve_argv(spec.argv)]

    def submit(self, spec: LaunchSpec, trial_dir: Path, *, token: str) -> Handle:
        trial_dir = Path(trial_dir)
        trial_dir.mkdir(parents=True, exist_ok=True)
        box, why = self.sandbox_for(trial_dir)
        if why:
            with self._lock:
                if why not in self._warned:
                    self._warned.add(why)
                    log.warning("%s: trials can write their run directory; it is checked against its seals "
                                "after each trial", why)
        env = {**os.environ, **trial_env(spec, token, trial_dir)}
        with open(trial_dir / STDERR, "wb") as err:
            # stdout through a pipe: the harness stamps each line's arrival (clock.py), outside the trial's reach
            proc = subprocess.Popen(self.command(spec, trial_dir), cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        clock = LineClock(proc.stdout, trial_dir / STDOUT, pgid=proc.pid)
        with self._lock:
            self._procs[token] = proc
            self._started[token] = time.monotonic()
            self._clocks[token] = clock
        return Handle(kind=self.kind, trial_dir=str(trial_dir), token=token, job_id=str(proc.pid),
                      submitted_at=time.time(), time_limit_s=spec.time_limit_s, devices=spec.devices,
                      sandboxed=box is not None, unsandboxed_why=why)

    # -------------------------------------------------------------------- poll
    def poll(self, handle: Handle) -> LaunchEnd | None:
        with self._lock:
            proc = self._procs.get(handle.token)
            started = self._started.get(handle.token)
        if proc is None:
            return LaunchEnd(state="lost", lost=True, evidence=[f"no process for token {handle.token} in this executor"])
        rc = proc.poll()
        elapsed = time.monotonic() - started
        if rc is None:
            if elapsed <= handle.time_limit_s:
                return None
            with self._lock:
                self._why.setdefault(handle.token, "timeout")
            rc = self._kill_group(proc, handle.token)
            elapsed = time.monotonic() - started
        else:
            # The leader is gone; end whatever it left, in its group or not (workers of a crashed launcher).
            _signal_group(proc.pid, signal.SIGKILL)
            kill_token(handle.token)
        with self._lock:
            why = self._why.pop(handle.token, None)
            self._procs.pop(handle.token, None)
            self._started.pop(handle.token, None)
            clock = self._clocks.pop(handle.token, None)
        if clock is not None:
            clock.finish(elapsed)
        return _launch_end(rc, elapsed, why, handle.time_limit_s, self.config.kill_grace_s)

    def cancel(self, handle: Handle) -> None:
        with self._lock:
            proc = self._procs.get(handle.token)
            if proc is None:
                return
            self._why.setdefault(handle.token, "cancel")
        self._kill_group(proc, handle.token)

    def adopt(self, handle: Handle) -> Handle | None:
        """A local process cannot be re-attached (it is not our child): end what is left of it and
        return None, so the trial is launched again."""
        kill_token(handle.token)
        return None

    def _kill_group(self, proc: subprocess.Popen, token: str) -> int:
        """SIGTERM the group, SIGKILL it after the grace period, then every process left with the trial's token
        (torchrun's ranks, each in its own session, if torchrun died before it ended them); the leader's
        return code."""
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(timeout=self.config.kill_grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # stragglers that ignored SIGTERM
        kill_token(token)
        return rc


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _launch_end(rc: int, wall_s: float, why: str | None, limit_s: float, grace_s: float | None = None) -> LaunchEnd:
    sig = -rc if rc < 0 else None
    ev: list[str] = []
    if why == "timeout":
        ev.append(f"killed after {wall_s:.1f} s: past its time limit of {limit_s:g} s"
                  + (f" (then up to {grace_s:g} s between SIGTERM and SIGKILL)" if grace_s else ""))
    elif why == "cancel":
        ev.append(f"cancelled after {wall_s:.1f} s")
    if sig is not None:
        ev.append(f"ended by signal {sig} ({_signame(sig)})")
    else:
        ev.append(f"exited with status {rc}")
    return LaunchEnd(state="killed" if why else "exited", returncode=None if sig is not None else rc, signal=sig,
                   timed_out=why == "timeout", cancelled=why == "cancel", wall_s=wall_s, evidence=ev,
                   time_limit_s=limit_s, kill_grace_s=grace_s if why == "timeout" else None)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def processes_with_token(token: str) -> list[int]:
    """Process ids whose environment holds ``INFRARSI_TRIAL_TOKEN=token`` (those we may read)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def kill_token(token: str, *, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process of a launch (found by its token) and wait until they are gone."""
    pids = processes_with_token(token)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and processes_with_token(token):
        time.sleep(0.05)
    return pids
