"""The exec wrapper of a local trial: ``python trial_wrapper.py CAP RUNNER_PID CGROUP_PROCS COMMAND...``.

Runs as the leader of the trial's own process group (the executor starts it in a new session), then:

1. lowers RLIMIT_DATA to CAP bytes ("none": no cap); inherited by every process of the trial;
2. starts a watchdog in the same process group: it waits (pidfd, no polling) for the runner or the
   trial's leader to end. When the runner ends first (SIGTERM or kill -9 included) it SIGKILLs every
   process of the trial, so no training process outlives the runner: first those whose environment holds
   the trial's token (``INFRARSI_TRIAL_TOKEN``), which reaches processes that left the group (torchrun
   starts each rank in its own session, so a SIGKILL of torchrun alone would leave its ranks training
   on), then the whole group; when the leader ends first it just exits. An isolated trial needs none of
   this (bwrap dies with the runner and its PID namespace with it, see ``isolation.py``): the watchdog is
   the second line, and the only one for an unisolated trial;
3. joins the trial's cgroups (writes its pid into each of CGROUP_PROCS, ``cgroup.procs`` files joined by ":";
   "none": no cgroup), so every process the command starts is counted against its ``pids.max`` and its memory
   limit (execute/cgroup.py) and listed there, and raises its ``oom_score_adj`` to 1000: should the machine run
   out of memory, the kernel ends the trial's processes before the runner (raising it needs no privilege);
4. ``execvp`` s the command (for an isolated trial ``bwrap ... -- python trial_wrapper.py --inner ...``): it
   keeps the leader's pid, its exit status and signals.

``python trial_wrapper.py --inner STATUS COMMAND...`` is the first process inside the isolation: bwrap
reports a command killed by signal N as exit status 128 + N, so the inner wrapper runs the command as its
child, writes how it ended (``exit N`` / ``signal N``) to STATUS (``fd:N``: a pipe the runner reads, which the
command does not inherit; else a file) and ends the same way; the executor
believes the file only where it agrees with bwrap's status. It forwards SIGTERM, SIGINT and SIGHUP to the
command rather than die of them (the executor sends a polite signal to every process of the namespace: the command
decides, and this wrapper outlives it to report); one that comes while the command starts is delivered to it once
it has its default dispositions back, never lost.

The watchdog is double-forked, so the command never has a child it did not start (no zombie, no
stray SIGCHLD it must reap). Standalone on purpose: it imports nothing from infrarsi, so a trial
starts in the time of one interpreter start-up. Linux only (pidfd_open: kernel 5.3; older kernels
fall back to checking the runner twice a second).
"""

import os
import resource
import select
import signal
import sys
import time


def _cap(cap: str) -> None:
    if cap == "none":
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    c = int(cap) if hard == resource.RLIM_INFINITY else min(int(cap), hard)
    resource.setrlimit(resource.RLIMIT_DATA, (c, c))


def _pidfd(pid: int):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _watch(runner: int, leader: int) -> None:
    """In the watchdog (same group as the trial): kill the group when the runner dies first."""
    group = os.getpgid(0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    fr, fl = _pidfd(runner), _pidfd(leader)
    if fr is None and _alive(runner) or fl is None and _alive(leader):  # no pidfd: poll
        while _alive(runner) and _alive(leader):
            time.sleep(0.5)
        runner_gone = not _alive(runner)
    elif fr is None:  # the runner was gone before we looked
        runner_gone = True
    elif fl is None:
        runner_gone = False
    else:
        ready, _, _ = select.select([fr, fl], [], [])
        runner_gone = fr in ready
    if runner_gone:
        _kill_token(os.environ.get(TOKEN_ENV, ""))
        try:
            os.killpg(group, signal.SIGKILL)  # the trial and this watchdog with it
        except OSError:
            pass
    os._exit(0)


TOKEN_ENV = "INFRARSI_TRIAL_TOKEN"  # local.TOKEN_ENV (this file imports nothing from infrarsi)


def _with_token(token: str) -> list:
    """Pids other than this one whose environment holds ``TOKEN_ENV=token`` (local.processes_with_token)."""
    needle, me, out = f"{TOKEN_ENV}={token}".encode(), os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(int(name))
        except OSError:
            continue
    return out


def _kill_token(token: str, rounds: int = 5) -> None:
    """SIGKILL the trial's processes found by its token; again until a scan finds none (a rank that torchrun
    started while the previous scan ran), at most ``rounds`` scans."""
    if not token:
        return
    for _ in range(rounds):
        pids = _with_token(token)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


POLITE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def inner(status_file: str, command: list) -> None:
    """The first process inside the isolation: run the command, record how it ended, end the same way.
    ``status_file``: a path, or ``fd:N`` (a pipe the runner reads; the command does not inherit it)."""
    state = {"child": 0, "pending": []}
    status_fd = int(status_file[3:]) if status_file.startswith("fd:") else None
    if status_fd is not None:
        os.set_inheritable(status_fd, False)

    def forward(sig, frame):  # a polite signal is the command's to act on; this wrapper outlives it to report
        if state["child"]:
            try:
                os.kill(state["child"], sig)
            except OSError:
                pass
        else:
            state["pending"].append(sig)

    for sig in POLITE:
        signal.signal(sig, forward)
    try:
        child = os.fork()
    except OSError as e:
        sys.stderr.write(f"infrarsi: cannot start the trial: {e}\n")
        os._exit(126)
    if child == 0:
        # what the command gets is what a shell would give it: default dispositions (Python ignores SIGPIPE); a
        # polite signal that came while it started is raised again, and delivered once it is unblocked
        signal.pthread_sigmask(signal.SIG_BLOCK, POLITE)
        for sig in (*POLITE, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        for sig in state["pending"]:
            os.kill(os.getpid(), sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, POLITE)
        _first_to_go()
        try:
            os.execvp(command[0], command)
        except OSError as e:
            sys.stderr.write(f"infrarsi: cannot run {command[0]!r}: {type(e).__name__}: {e}\n")
            os._exit(127)
    state["child"] = child
    for sig in state["pending"]:  # came before the child was there to get it
        forward(sig, None)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
    try:
        if status_fd is not None:
            os.write(status_fd, (how + "\n").encode())
        else:
            with open(status_file, "w") as f:
                f.write(how + "\n")
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset (EINVAL)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status))


def _first_to_go() -> None:
    """The kernel's OOM killer picks this process (and what it starts) before any other: the command, not the
    runner, nor bwrap or the inner wrapper (left at their score, so the one that reports how it ended lives)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _join(procs_files: str) -> None:
    if procs_files == "none":
        return
    for procs_file in procs_files.split(":"):
        try:
            with open(procs_file, "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            sys.stderr.write(f"infrarsi: could not join the trial's cgroup ({procs_file}): {e.strerror or e}\n")
            os._exit(126)


def main(argv: list) -> None:
    if argv[1:2] == ["--inner"]:
        inner(argv[2], argv[3:])
    cap, runner, procs, command = argv[1], int(argv[2]), argv[3], argv[4:]
    _cap(cap)
    leader = os.getpid()
    if os.getppid() != runner:  # the runner died before we started: nothing to run for
        os._exit(128 + signal.SIGKILL)
    mid = os.fork()
    if mid == 0:
        if os.fork() == 0:
            os.closerange(3, 1 << 16)
            _watch(runner, leader)
        os._exit(0)
    os.waitpid(mid, 0)
    _join(procs)
    if "--inner" not in command:  # unisolated: the command itself (isolated: the inner wrapper's child)
        _first_to_go()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        sys.stderr.write(f"infrarsi: cannot run {command[0]!r}: {type(e).__name__}: {e}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
