"""Memory is one pool: each local trial's memory (its processes and the scratch tmpfs pages they write) is bounded by a
memory cgroup, so that the kernel ends a process inside the trial, never the runner.

    <the runner's own memory cgroup>/infrarsi-<runner pid>/      the pool: every trial of this runner together, at
                                                                 most what the machine can give less POOL_RESERVE
                                      <trial token>/             one trial: at most its own limit (the contract's
                                                                 per-process cap x processes + its scratch)

A tmpfs page is charged to the cgroup of the process that wrote it, so a trial that fills its ``/tmp`` or
``/dev/shm`` (memory, not disk) is bounded with its processes; when the cgroup reaches its limit the kernel's OOM
killer ends a process of that cgroup (``oom_kill`` in its counters), which the executor reads after the trial (the
trial is recorded ``oom`` with the limit and the peak). The trial's processes also raise their ``oom_score_adj`` to
1000 (trial_wrapper.py): should the machine itself run out (other users' processes), the kernel picks them first.

Both cgroup versions: v1 (a ``memory`` hierarchy: ``memory.limit_in_bytes``, ``memory.oom_control``'s ``oom_kill``,
``memory.max_usage_in_bytes``) and v2 (``memory.max``, ``memory.events``' ``oom_kill``, ``memory.peak``; the memory
controller must be delegated to the runner's cgroup, which v2 allows only where that cgroup holds no process
itself). :func:`MemoryPool.problem` says why a machine gives none (not root and not delegated, no memory
controller); the trial then runs with its per-process RLIMIT_DATA only and its record says so.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

POOL_RESERVE_BYTES = 1 << 30  # what the machine keeps beyond every trial together: the runner, the kernel, others
POOL_RESERVE_FRACTION = 0.25  # ... or this much of a small machine
STALE_S = 600.0  # a pool this old whose runner is gone and that holds no trial is removed
_TOKEN = re.compile(r"[\w.-]+")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def own_memory_cgroup(proc_cgroup: str | None = None, mountinfo: str | None = None) -> tuple[Path, int] | None:
    """(the folder of this process's memory cgroup, the cgroup version), or None where it has none: a v1 ``memory``
    hierarchy when one is mounted (a hybrid machine keeps memory there), else the v2 tree when its root offers the
    memory controller."""
    proc_cgroup = proc_cgroup if proc_cgroup is not None else (_read(Path("/proc/self/cgroup")) or "")
    mountinfo = mountinfo if mountinfo is not None else (_read(Path("/proc/self/mountinfo")) or "")
    v1_mount = v2_mount = None
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        if rest[0] == "cgroup" and "memory" in rest[2].split(","):
            v1_mount = v1_mount or Path(fields[4])
        elif rest[0] == "cgroup2":
            v2_mount = v2_mount or Path(fields[4])
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        num, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if num == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    if v1_mount is not None and v1_path is not None:
        return v1_mount / v1_path.lstrip("/"), 1
    if v2_mount is not None and v2_path is not None:
        if "memory" in (_read(v2_mount / "cgroup.controllers") or "").split():
            return v2_mount / v2_path.lstrip("/"), 2
    return None


def kill_members(members: Callable[[], list[int]], *, timeout_s: float) -> None:
    """SIGKILL every process ``members()`` lists until it lists none or ``timeout_s`` passed (a cgroup's procs: a
    process forked while the first ones die is listed, and killed, on the next pass)."""
    deadline = time.monotonic() + timeout_s
    while members() and time.monotonic() < deadline:
        for pid in members():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)

class TrialMemory:
    """One trial's memory cgroup (made by :meth:`MemoryPool.trial`)."""

    def __init__(self, path: Path, version: int, limit_bytes: int) -> None:
        self.path, self.version, self.limit_bytes = path, version, limit_bytes

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def members(self) -> list[int]:
        text = _read(self.path / "cgroup.procs") or ""
        return [int(x) for x in text.split()]

    def oom_kills(self) -> int:
        """Processes the kernel ended in this cgroup for reaching its limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (_read(self.path / name) or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def peak_bytes(self) -> int | None:
        text = _read(self.path / ("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"))
        return int(text) if text and text.strip().isdigit() else None

    def evidence(self) -> str | None:
        """One line when the kernel ended processes of the trial at its limit, with the figures; else None."""
        n = self.oom_kills()
        if not n:
            return None
        peak = self.peak_bytes()
        return (f"the kernel ended {n} process(es) of the trial at its memory limit of {self.limit_bytes / 2**20:.0f} "
                f"MiB (its processes and the scratch tmpfs pages they wrote"
                + (f"; peak {peak / 2**20:.0f} MiB)" if peak is not None else ")"))

    def close(self, *, timeout_s: float = 5.0) -> None:
        """SIGKILL what is left in it and remove it (its charges, the tmpfs pages of a box that is gone, go to the
        pool)."""
        kill_members(self.members, timeout_s=timeout_s)
        try:
            self.path.rmdir()
        except OSError:
            pass


class MemoryPool:
    """This runner's pool of trial memory cgroups; ``path`` is None where the machine gives none (``why`` says why)."""

    def __init__(self, limit_bytes: int, *, own: tuple[Path, int] | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.path: Path | None = None
        self.version = 0
        self.why = ""
        where = own if own is not None else own_memory_cgroup()
        if where is None:
            self.why = "this machine mounts no memory cgroup"
            return
        base, self.version = where
        d = base / f"infrarsi-{os.getpid()}"
        try:
            if self.version == 2:
                _enable_memory(base)
            _sweep(base)
            d.mkdir(exist_ok=True)
            if self.version == 2:
                _enable_memory(d)
            else:  # v1: the pool's limit holds its children only with hierarchical accounting (settable while empty)
                try:
                    (d / "memory.use_hierarchy").write_text("1")
                except OSError:
                    pass
            _set_limit(d, self.version, limit_bytes)
        except OSError as e:
            try:
                d.rmdir()
            except OSError:
                pass
            self.why = f"cannot make a memory cgroup under {base} ({e.strerror or e})"
            return
        self.path = d
        atexit.register(self.remove)

    def remove(self) -> None:
        """Remove the pool and its empty trial cgroups (at exit: a pool lives as long as its runner's process)."""
        if self.path is None:
            return
        for t in self.path.iterdir() if self.path.is_dir() else ():
            if t.is_dir() and not (_read(t / "cgroup.procs") or "").strip():
                try:
                    t.rmdir()
                except OSError:
                    pass
        try:
            self.path.rmdir()
        except OSError:
            pass

    def trial(self, token: str, limit_bytes: int) -> TrialMemory | None:
        """A new memory cgroup for one trial, at most ``limit_bytes`` (and the pool's limit), or None."""
        if self.path is None or not _TOKEN.fullmatch(token):
            return None
        d = self.path / token
        limit = min(limit_bytes, self.limit_bytes)
        try:
            d.mkdir(exist_ok=True)
            _set_limit(d, self.version, limit)
        except OSError:
            try:
                d.rmdir()
            except OSError:
                pass
            return None
        return TrialMemory(d, self.version, limit)

    def discard(self, token: str) -> None:
        """End and remove the cgroup a trial of ``token`` left (a runner killed before it could)."""
        if self.path is not None and _TOKEN.fullmatch(token) and (self.path / token).is_dir():
            TrialMemory(self.path / token, self.version, 0).close()


def usable_memory_bytes() -> int:
    """MemAvailable, or the cgroup's memory limit when that is smaller (containers)."""
    avail = None
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    limits = [avail] if avail else []
    for p in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        v = (_read(Path(p)) or "").strip()
        if v.isdigit() and int(v) < 2**60:
            limits.append(int(v))
    return min(limits) if limits else 8 * 2**30


def pool_limit(usable_bytes: int) -> int:
    """What every trial together may hold: the usable memory less POOL_RESERVE (or its fraction of a small machine)."""
    return max(64 << 20, usable_bytes - min(POOL_RESERVE_BYTES, int(usable_bytes * POOL_RESERVE_FRACTION)))


def _set_limit(d: Path, version: int, limit: int) -> None:
    (d / ("memory.limit_in_bytes" if version == 1 else "memory.max")).write_text(str(limit))
    if version == 2:  # no swap beyond the limit either, where the machine has swap
        try:
            (d / "memory.swap.max").write_text("0")
        except OSError:
            pass


def _enable_memory(d: Path) -> None:
    """v2: hand the memory controller to ``d``'s children (EBUSY where ``d`` holds processes itself)."""
    if "memory" not in (_read(d / "cgroup.subtree_control") or "").split():
        (d / "cgroup.subtree_control").write_text("+memory")


def _sweep(base: Path) -> None:
    """Remove pools whose runner died (kill -9) before it could: its trial cgroups once empty, then the pool."""
    now = time.time()
    for d in base.glob("infrarsi-*"):
        pid = d.name.partition("-")[2]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        try:
            if now - d.stat().st_mtime < STALE_S:
                continue
            for t in d.iterdir():
                if t.is_dir() and not (_read(t / "cgroup.procs") or "").strip():
                    t.rmdir()
            d.rmdir()
        except OSError:
            continue
