"""One process at a time per run directory: its runner lock (``RunDir.RUNNER_LOCK``).

``hold(run_dir, command)`` takes an exclusive ``flock`` on the file and writes who holds it
(pid, host, start time, command). A second ``doctor``/``run``/``tune`` on the same directory gets
``RunDirBusy`` naming the holder. The kernel drops the flock when its process dies (kill -9
included), so a lock left by a dead process is free: the next holder takes it over and says whose
it was. Holding is re-entrant within one process (``tune`` runs doctor and run under one hold).

flock works across processes on one host and on NFSv4 (Linux maps it to a POSIX lock); the holder's
host is recorded so a refusal from another machine says where the run is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import RunDirBusy  # one of the known failures (errors.py), still named here
from .rundir.names import RUNNER_LOCK as LOCK_FILE

_held: dict[str, tuple[int, int]] = {}  # resolved run dir -> (fd, depth) held by this process
_guard = threading.Lock()


def holder(run_dir: str | Path) -> dict | None:
    """Who holds (or last held) the run directory's lock, as written by that process; None if unknown."""
    try:
        body = json.loads((Path(run_dir) / LOCK_FILE).read_text() or "null")
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def describe(info: dict | None) -> str:
    if not info:
        return "another process (it wrote no holder record)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started_at", 0)))
    return f"pid {info.get('pid')} on {info.get('host')} since {when} (`infrarsi {info.get('command', '?')}`)"


@contextlib.contextmanager
def hold(run_dir: str | Path, command: str, *, on_takeover=lambda msg: None) -> Iterator[None]:
    """Hold the run directory's runner lock for the block; RunDirBusy when another process holds it. A directory
    that does not exist yet is not locked (the stage itself refuses it). ``on_takeover(line)`` is
    told when a lock left by a dead process was taken over."""
    run = Path(run_dir)
    if not run.is_dir():
        yield
        return
    key = str(run.resolve())
    with _guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _guard:
                fd, depth = _held[key]
                _held[key] = (fd, depth - 1)
        return
    path = run / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunDirBusy(f"{run} is in use by {describe(holder(run))}; wait for it to finish, or stop it "
                         f"(`kill {(holder(run) or {}).get('pid', 'PID')}`) and rerun; a killed run resumes") from None
    try:
        previous = holder(run)
        if previous and previous.get("pid") != os.getpid() and not previous.get("released_at"):
            on_takeover(f"took over the lock of {run} left by {describe(previous)}, which ended without releasing it")
        try:
            _write(fd, {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(), "command": command})
        except OSError as e:  # a full disk: name the file
            raise OSError(e.errno, e.strerror, str(path)) from e
        with _guard:
            _held[key] = (fd, 1)
        try:
            yield
        finally:
            with _guard:
                _held.pop(key, None)
            with contextlib.suppress(OSError):  # a full disk must not hide the block's own error
                info = holder(run) or {}
                _write(fd, {**info, "released_at": time.time()})
    finally:
        os.close(fd)  # drops the flock


def _write(fd: int, body: dict) -> None:
    """Rewrite the lock file's holder record in place (the flock lives on the open file, not the name)."""
    data = json.dumps(body, sort_keys=True).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, data)
    os.fsync(fd)
