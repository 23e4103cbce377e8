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
- A trial of a run is isolated (``isolation.py``: bubblewrap, an allowlist): it reads the machine, the repository
  and its data read-only, writes its own ``RUN_DIR/trials/<n>/outputs`` (new for each attempt) and size-limited
  scratch only, and sees no run directory, bank, cache, seal key, ``.git``, home folder or host network; the rest
  of its directory (stdout, stderr, records) is the runner's, made anew for each attempt and read without
  following links; a PID namespace ends every process it started when it ends (checked after each
  trial, with the trial's cgroup). Where this machine cannot isolate (no bwrap, ``Config.isolation`` off,
  ``INFRARSI_ISOLATION=off``), the trial runs without it: the executor logs why once, and the handle says so,
  which the runner records as a warning on every such trial (promotion on such evidence needs the contract's
  ``invariants.isolation.allow_unisolated``) and answers with the post-hoc checks of the repository and the
  seal chain after the trial. A bare trial directory (no run around it) is not isolated: nothing to protect.
- The process carries ``INFRARSI_TRIAL_TOKEN`` in its environment; after a restart, leftover
  processes of a trial are found by that token in /proc and ended before the trial is run again.
"""

from __future__ import annotations

import functools
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

from ..contract.scope import repository_root
from . import bytecode
from . import cgroup as memcg
from . import isolation
from .left_behind import PIDS_MAX, PidsCgroup, leftovers, namespace_of, signal_namespace
from .clock import LineClock
from .executor import STDERR, STDOUT, Handle, LaunchEnd, create_new, fresh_trial_dir
from ..trial import OUTPUTS, LaunchSpec

TOKEN_ENV = "INFRARSI_TRIAL_TOKEN"
CAP_ENV = "INFRARSI_MEMORY_CAP_BYTES"

# argv: [python, trial_wrapper.py, cap_bytes_or_"none", runner pid, cgroup.procs files (":"-joined) or "none",
# command...]: lowers RLIMIT_DATA, starts the watchdog that ends the group when the runner dies, joins the trial's
# cgroups (pids, memory), raises its oom_score_adj, then becomes the command (an isolated one: bwrap ... -- python
# trial_wrapper.py --inner STATUS command...).
WRAPPER = str(Path(__file__).with_name("trial_wrapper.py"))
EXIT_STATUS = "exit.status"  # a Slurm trial's inner wrapper writes how the command ended (bwrap says 128+N)
# A trial's directory belongs to the runner (stdout, stderr, its records): an isolated trial writes only OUTPUTS;
# the local inner wrapper reports how the command ended through a pipe (``fd:N``), not a file.
RUNNER_FILES = (STDOUT, STDERR, EXIT_STATUS)
log = logging.getLogger(__name__)


def isolation_problem() -> str | None:
    """Why this machine cannot isolate a trial (one line), or None; probed once per process."""
    return isolation.problem()


def run_dir_of(trial_dir: Path) -> Path | None:
    """The run directory a trial directory belongs to (``RUN_DIR/trials/<n>``), or None for a bare one."""
    from ..rundir import RunDir

    run = RunDir.of_trial_dir(Path(trial_dir).resolve())
    return run.path if run is not None else None


@functools.lru_cache(maxsize=64)
def _repository(cwd: Path) -> Path:
    """The git work tree of a trial's working directory (asked of git once per folder: a process start per trial
    is a tenth of the box's cost on a loaded machine)."""
    return repository_root(cwd)


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
    """What a trial adds to the inherited environment (also recorded in the trial's env.json). wandb writes
    into the trial's directory, offline (the trial sees no home folder, so no login either); the adapters point
    the frameworks' own output flags there too (``spec.TRIAL_DIR``)."""
    env = dict(spec.env)
    env.setdefault("PYTHONUNBUFFERED", "1")  # every line reaches the log before a kill
    env[TOKEN_ENV] = token
    env["INFRARSI_TRIAL_DIR"] = str(trial_dir)
    out = str(Path(trial_dir) / OUTPUTS)
    for k in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        env.setdefault(k, f"{out}/wandb")
    if env.get("WANDB_MODE") != "disabled":
        env["WANDB_MODE"] = "offline"
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
        isolation: bool = True
        """Isolate each trial of a run (isolation.py), where this machine allows it; elsewhere, or when False,
        trials run without it and each one's record carries the warning."""
        readable: list[str] = []
        """More paths an isolated trial may read (data outside the repository and outside what its command
        names); also ``INFRARSI_READABLE``."""
        pids_max: int = Field(PIDS_MAX, ge=16)
        """Processes and threads one isolated trial may have at once (its cgroup's ``pids.max``, where the
        machine lets infrarsi make one)."""
        memory_max_bytes: int | None = Field(None, ge=16 << 20)
        """The memory one trial may hold, its processes and the scratch tmpfs pages they write (its memory cgroup,
        cgroup.py). Default: the launch's per-process cap x its processes + one scratch tmpfs' size, or the pool's
        limit without a cap."""
        precompile: bool = True
        """Before the first isolated trial, compile the missing bytecode of what trials import (bytecode.py): the
        box shows it read-only, so Python in a trial could only compile it anew in every process."""
        memory_pool_bytes: int | None = Field(None, ge=16 << 20)
        """The memory every trial of this executor may hold together. Default: the usable memory less
        cgroup.POOL_RESERVE_BYTES, so that the kernel ends a trial's process, never the runner."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or LocalExecutor.Config()
        self._procs: dict[str, subprocess.Popen] = {}  # token -> process
        self._started: dict[str, float] = {}  # token -> monotonic start
        self._why: dict[str, str] = {}  # token -> "timeout" | "cancel"
        self._clocks: dict[str, LineClock] = {}  # token -> the stdout pipe's line clock
        self._boxes: dict[str, _Isolated] = {}  # token -> what an isolated trial's end needs
        self._mems: dict[str, memcg.TrialMemory] = {}  # token -> the trial's memory cgroup
        self._pool: memcg.MemoryPool | None = None  # made at the first trial
        self._warned: set[str] = set()  # isolation warnings already logged
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ submit
    def command_line(self, spec: LaunchSpec) -> list[str]:
        """The command as a person would run it (recorded in the trial's ``command`` file)."""
        return resolve_argv(spec.argv)

    def isolation_why(self, trial_dir: Path) -> str | None:
        """None when a trial in ``trial_dir`` will be isolated; else why not ("" for a bare trial directory)."""
        if run_dir_of(trial_dir) is None:
            return ""  # a bare trial directory (no run around it): nothing to protect
        if not self.config.isolation:
            return "trial isolation is off (LocalExecutor.Config.isolation = false or INFRARSI_ISOLATION=off)"
        why = isolation_problem()
        return None if why is None else f"this machine cannot isolate trials ({why})"

    def isolates(self, trial_dir: Path, spec: LaunchSpec | None = None) -> bool:
        return self.isolation_why(trial_dir) is None

    def box(self, spec: LaunchSpec, trial_dir: Path, env: dict[str, str] | None = None) -> isolation.Box:
        """What an isolated trial of ``spec`` in ``trial_dir`` may read and write (``env``: its whole environment)."""
        cwd = Path(spec.cwd or Path.cwd()).resolve()
        env = env if env is not None else {**isolation.clean_environment(os.environ, pass_env=spec.pass_env),
                                           **spec.env}
        return isolation.trial_box(Path(trial_dir), run_dir_of(trial_dir), argv=resolve_argv(spec.argv),
                                   env=spec.env, inherited=env, cwd=cwd, repository=_repository(cwd),
                                   readable=[Path(p) for p in self.config.readable],
                                   scratch_bytes=spec.scratch_bytes or isolation.SCRATCH_BYTES)

    def command(self, spec: LaunchSpec, trial_dir: Path | None = None, *, info_fd: int | None = None,
                cgroup: PidsCgroup | None = None, status_fd: int | None = None,
                seccomp_fd: int | None = None, env: dict[str, str] | None = None,
                memory: memcg.TrialMemory | None = None) -> list[str]:
        """The exact argv started (the wrapper, bwrap and the inner wrapper when isolated, then the spec's command)."""
        cap = "none" if spec.memory_cap_bytes is None else str(spec.memory_cap_bytes)
        files = [f for f in (cgroup.procs_file if cgroup is not None else "none",
                             memory.procs_file if memory is not None else "none") if f != "none"]
        procs = ":".join(files) or "none"
        argv = resolve_argv(spec.argv)
        if trial_dir is None or not self.isolates(trial_dir):
            return [sys.executable, WRAPPER, cap, str(os.getpid()), procs, *argv]
        status = f"fd:{status_fd}" if status_fd is not None else "/dev/null"
        inner = [sys.executable, "-I", "-S", WRAPPER, "--inner", status, *argv]
        return [sys.executable, WRAPPER, cap, str(os.getpid()), procs,
                *self.box(spec, trial_dir, env).argv(inner, info_fd=info_fd, seccomp_fd=seccomp_fd)]

    def submit(self, spec: LaunchSpec, trial_dir: Path, *, token: str) -> Handle:
        trial_dir = Path(trial_dir)
        fresh_trial_dir(trial_dir, RUNNER_FILES, OUTPUTS)  # every attempt: new runner files, a new outputs/
        spec = spec.for_trial(trial_dir)
        why = self.isolation_why(trial_dir)
        if why:
            with self._lock:
                if why not in self._warned:
                    self._warned.add(why)
                    log.warning("%s: trials can read and write outside their directory; the repository and the "
                                "run's seals are checked after each trial", why)
        isolated = why is None
        env = {**(isolation.clean_environment(os.environ, pass_env=spec.pass_env) if isolated else os.environ),
               **trial_env(spec, token, trial_dir)}
        info_r = info_w = status_r = status_w = sec = None
        cgroup = None
        if isolated and self.config.precompile:
            cwd = Path(spec.cwd or Path.cwd()).resolve()
            repository = _repository(cwd)
            done = bytecode.ensure(bytecode.import_roots(env, repository=repository, cwd=cwd),
                                   own=(repository, cwd))
            if done is not None and (done.written or done.seconds > 5):
                log.info("%s", done.line())
        if isolated:
            info_r, info_w = os.pipe()
            status_r, status_w = os.pipe()
            sec = isolation.seccomp_fd()
            cgroup = PidsCgroup(token, pids_max=self.config.pids_max)
        memory = self._memory(spec, token)
        passed = tuple(fd for fd in (info_w, status_w, sec) if fd is not None)
        try:
            # stdout and stderr through pipes: the harness stamps each line's arrival (clock.py), outside the
            # trial's reach, on both streams the parsers read; the clock creates both files (O_EXCL | O_NOFOLLOW)
            argv = self.command(spec, trial_dir, info_fd=info_w, cgroup=cgroup, status_fd=status_w,
                                seccomp_fd=sec, env=env, memory=memory)
            proc = subprocess.Popen(argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, pass_fds=passed)
        except BaseException:
            for fd in (info_r, status_r, *passed):
                if fd is not None:
                    os.close(fd)
            if cgroup is not None:
                cgroup.close()
            if memory is not None:
                memory.close()
            raise
        for fd in passed:
            os.close(fd)
        members = cgroup.members if cgroup is not None and cgroup.path is not None else None
        clock = LineClock(proc.stdout, trial_dir / STDOUT, pgid=proc.pid, members=members, err_pipe=proc.stderr,
                          err_path=trial_dir / STDERR)
        with self._lock:
            self._procs[token] = proc
            self._started[token] = time.monotonic()
            self._clocks[token] = clock
            if memory is not None:
                self._mems[token] = memory
            if isolated:
                self._boxes[token] = _Isolated(info_r, cgroup, trial_dir, status_r)
        missing = isolation.seccomp_problem() if isolated else None
        return Handle(kind=self.kind, trial_dir=str(trial_dir), token=token, job_id=str(proc.pid),
                      submitted_at=time.time(), time_limit_s=spec.time_limit_s, devices=spec.devices,
                      sandboxed=isolated, unsandboxed_why=why or "", network="own" if isolated else "",
                      unisolated=[f"the kernel keyring ({missing})"] if missing else [])

    # -------------------------------------------------------------------- poll
    def poll(self, handle: Handle) -> LaunchEnd | None:
        with self._lock:
            proc = self._procs.get(handle.token)
            started = self._started.get(handle.token)
            clock = self._clocks.get(handle.token)
        if proc is None:
            return LaunchEnd(state="lost", lost=True, evidence=[f"no process for token {handle.token} in this executor"])
        rc = proc.poll()
        elapsed = time.monotonic() - started
        if rc is None:
            dropped = clock.dropped() if clock is not None else ""
            if elapsed <= handle.time_limit_s and not dropped:
                return None
            with self._lock:  # past its time, or its output past what the runner keeps (the clock drops the rest)
                self._why.setdefault(handle.token, "dropped" if dropped else "timeout")
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
            box = self._boxes.pop(handle.token, None)
            memory = self._mems.pop(handle.token, None)
        left: list[str] = []
        if box is not None:
            rc, left = box.after(rc, stopped=why is not None)
        oom = None
        if memory is not None:
            oom = memory.evidence()
            memory.close()
        if clock is not None:
            clock.finish(elapsed)
        end = _launch_end(rc, elapsed, why, handle.time_limit_s, self.config.kill_grace_s)
        if left:
            end = end.model_copy(update={"leftovers": len(left), "evidence": end.evidence + left})
        if oom:
            end = end.model_copy(update=dict(oom=True, evidence=end.evidence + [oom]))  # the field, not a status
        return end

    def live_clock(self, handle: Handle) -> LineClock | None:
        """The running trial's line clock (None once it ended): its step lines so far (execute/prune.py)."""
        with self._lock:
            return self._clocks.get(handle.token)

    def cancel(self, handle: Handle, *, why: str = "cancel", sig: int = signal.SIGTERM) -> None:
        with self._lock:
            proc = self._procs.get(handle.token)
            if proc is None:
                return
            self._why.setdefault(handle.token, why)
        self._kill_group(proc, handle.token, sig=sig)

    def end(self, handle: Handle) -> None:
        """Stop it as ``cancel`` does (the group, then its token's processes), with SIGKILL at once: it has printed all
        it is measured by, and nothing a polite signal would let it do (torchrun's wait for its ranks, a handler's
        save) is read."""
        self.cancel(handle, why="ended", sig=signal.SIGKILL)

    def adopt(self, handle: Handle) -> Handle | None:
        """A local process cannot be re-attached (it is not our child): end what is left of it and
        return None, so the trial is launched again."""
        kill_token(handle.token)
        PidsCgroup.discard(handle.token)  # the cgroup the dead runner could not remove
        return None

    def _memory(self, spec: LaunchSpec, token: str) -> memcg.TrialMemory | None:
        """The trial's memory cgroup (cgroup.py), or None where the machine gives none (logged once: the trial is
        then bounded by its per-process RLIMIT_DATA only)."""
        with self._lock:
            if self._pool is None:
                pool = self.config.memory_pool_bytes or memcg.pool_limit(memcg.usable_memory_bytes())
                self._pool = memcg.MemoryPool(pool)
                if self._pool.why:
                    log.warning("%s: each trial's memory is bounded per process only (RLIMIT_DATA)", self._pool.why)
            pool = self._pool
        limit = self.config.memory_max_bytes
        if limit is None and spec.memory_cap_bytes is not None:
            limit = spec.memory_cap_bytes * max(1, spec.processes) + (spec.scratch_bytes or isolation.SCRATCH_BYTES)
        group = pool.trial(token, limit or pool.limit_bytes)
        if group is not None and ":" in group.procs_file:  # the wrapper's list of cgroup files is ":"-joined
            group.close()
            return None
        return group

    def _kill_group(self, proc: subprocess.Popen, token: str, *, sig: int = signal.SIGTERM) -> int:
        """SIGTERM the group (an isolated trial: every process of its PID namespace but bwrap's init, so that bwrap
        outlives the command and reports how it ended), SIGKILL the group after the grace period, then every process
        left with the trial's token (torchrun's ranks, each in its own session, if torchrun died before it ended
        them); the leader's return code."""
        with self._lock:
            box = self._boxes.get(token)
        ns = box.namespace() if box is not None else None
        # unisolated, or nothing started in the namespace yet: the whole group (bwrap too, which takes all with it)
        if ns is None or signal_namespace(ns, sig) == 0:
            _signal_group(proc.pid, sig)
        try:
            rc = proc.wait(timeout=self.config.kill_grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # stragglers that ignored SIGTERM
        kill_token(token)
        return rc


SETTLE_S = 5.0  # seconds an ended isolated trial's processes get to be gone before they count as left behind


class _Isolated:
    """An isolated trial's ends: bwrap's info pipe (its PID namespace), its cgroup, its directory, the pipe the inner
    wrapper says how the command ended through."""

    def __init__(self, info_r: int, cgroup: PidsCgroup, trial_dir: Path, status_r: int) -> None:
        self.info_r, self.cgroup, self.trial_dir, self.status_r = info_r, cgroup, trial_dir, status_r
        self.info = ""
        os.set_blocking(info_r, False)
        os.set_blocking(status_r, False)

    def namespace(self) -> int | None:
        """The trial's PID namespace (bwrap writes it to the pipe once it is made), or None before that."""
        if self.info_r >= 0 and namespace_of(self.info) is None:
            try:
                while chunk := os.read(self.info_r, 65536):
                    self.info += chunk.decode(errors="replace")
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                pass
        return namespace_of(self.info)

    def after(self, rc: int, *, stopped: bool = False) -> tuple[int, list[str]]:
        """(the trial's return code, read through the inner wrapper's status file; evidence lines for processes
        still alive in its PID namespace or cgroup, which are SIGKILLed). bwrap reports a command ended by signal N
        as exit 128 + N; the file is believed only where it agrees (so a trial can make neither side look like the
        other), or where this executor ``stopped`` the trial and its SIGKILL after the grace reached bwrap when the
        command had already ended (by the polite signal, as the file says)."""
        ns = self.namespace()
        os.close(self.info_r)
        self.info_r = -1
        # what a SIGKILL of the group (a time-out's grace ran out) hit may take a moment to be gone on a loaded
        # machine; what is still there after SETTLE_S was not dying
        deadline = time.monotonic() + SETTLE_S
        while (leftovers(ns) or self.cgroup.members()) and time.monotonic() < deadline:
            time.sleep(0.02)
        in_ns = leftovers(ns)
        for pid in in_ns:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        in_group = self.cgroup.close()
        left = sorted(set(in_ns) | set(in_group))
        lines = [f"{len(left)} process(es) of the trial were still running after it ended "
                 f"({', '.join(map(str, left[:8]))}): killed"] if left else []
        try:
            said = os.read(self.status_r, 64).decode(errors="replace").strip()  # "exit N" / "signal N"
        except OSError:
            said = ""
        os.close(self.status_r)
        if rc > 128 and said in ("", f"signal {rc - 128}"):
            rc = -(rc - 128)
        elif stopped and rc == -signal.SIGKILL and said in (f"signal {s}" for s in (signal.SIGTERM, signal.SIGINT)):
            rc = -int(said.split()[1])
        return rc, lines


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
    elif why == "ended":
        ev.append(f"stopped by the harness after {wall_s:.1f} s: every line it is measured by had come")
    elif why == "dropped":
        ev.append(f"stopped after {wall_s:.1f} s: its output was more than the runner keeps (clock.MAX_BYTES, "
                  f"clock.MAX_LINES) or the disk could not hold it")
    if sig is not None:
        ev.append(f"ended by signal {sig} ({_signame(sig)})")
    else:
        ev.append(f"exited with status {rc}")
    return LaunchEnd(state="killed" if why else "exited", returncode=None if sig is not None else rc, signal=sig,
                   timed_out=why == "timeout", cancelled=why == "cancel", ended=why == "ended", wall_s=wall_s, evidence=ev,
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
