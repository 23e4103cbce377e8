"""None left behind: after each trial, no process of it may be alive. bwrap's PID namespace ends every process in it
when its init ends; :func:`leftovers` checks by the namespace's inode that none is left, :func:`signal_namespace`
signals them, and each trial's processes also sit in a cgroup v1 ``pids`` group of their own (:class:`PidsCgroup`,
``pids.max``: a fork bomb stops there), whose member list is checked too (isolation.py says what the box is)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

PIDS_MAX = 4096  # processes + threads of one trial (torch starts a few dozen threads per process)


def namespace_of(info: str) -> int | None:
    """The PID namespace's inode from bwrap's ``--info-fd`` JSON, or None."""
    m = re.search(r'"pid-namespace"\s*:\s*(\d+)', info or "")
    return int(m.group(1)) if m else None


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an ended process its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def leftovers(pid_namespace: int | None) -> list[int]:
    """Processes (host pids) still running in the PID namespace ``pid_namespace``."""
    if pid_namespace is None:
        return []
    want = f"pid:[{pid_namespace}]"
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") == want and _running(int(name)):
                out.append(int(name))
        except OSError:
            continue
    return out


def signal_namespace(pid_namespace: int, sig: int) -> int:
    """Send ``sig`` to every process of the namespace but its init (bwrap's PID 1, which ends the namespace when it
    ends: it must outlive the command to report how the command ended); how many got it."""
    n = 0
    for pid in leftovers(pid_namespace):
        try:
            with open(f"/proc/{pid}/status") as f:
                nspid = next((ln.split()[-1] for ln in f if ln.startswith("NSpid:")), "")
            if nspid != "1":
                os.kill(pid, sig)
                n += 1
        except OSError:
            continue
    return n


PIDS_ROOT = Path("/sys/fs/cgroup/pids")


STALE_S = 600.0  # an empty trial cgroup this old was left by a runner that died (kill -9): removed


def _sweep(base: Path) -> None:
    """Remove empty trial cgroups left by runners that died before they could (older than STALE_S: a fresh one may
    be waiting for its trial to join)."""
    now = time.time()
    try:
        for d in base.iterdir():
            try:
                if d.is_dir() and now - d.stat().st_mtime > STALE_S and not (d / "cgroup.procs").read_text().strip():
                    d.rmdir()
            except OSError:
                continue
    except OSError:
        pass


class PidsCgroup:
    """One trial's cgroup v1 ``pids`` group (``/sys/fs/cgroup/pids/infrarsi/<token>``): a limit on its processes
    and threads, and a member list that outlives any session or namespace trick. ``path`` is None where the
    machine has no writable pids hierarchy (not root, cgroup v2 only): the PID namespace still holds."""

    def __init__(self, token: str, *, pids_max: int = PIDS_MAX) -> None:
        self.path: Path | None = None
        if not re.fullmatch(r"[\w.-]+", token):
            return
        try:
            base = PIDS_ROOT / "infrarsi"
            base.mkdir(exist_ok=True)
            _sweep(base)
            d = base / token
            d.mkdir(exist_ok=True)
            (d / "pids.max").write_text(str(pids_max))
            self.path = d
        except OSError:
            self.path = None

    @staticmethod
    def discard(token: str) -> list[int]:
        """End and remove the cgroup a trial of ``token`` left (its runner was killed); the pids that were in it."""
        group = PidsCgroup.__new__(PidsCgroup)
        d = PIDS_ROOT / "infrarsi" / token
        group.path = d if re.fullmatch(r"[\w.-]+", token) and d.is_dir() else None
        return group.close()

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs") if self.path else "none"

    def members(self) -> list[int]:
        if self.path is None:
            return []
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split() if _running(int(x))]
        except OSError:
            return []

    def close(self, *, timeout_s: float = 5.0) -> list[int]:
        """SIGKILL whatever is still in the group, remove it; the pids that were left."""
        from .cgroup import kill_members

        left = self.members()
        kill_members(self.members, timeout_s=timeout_s)
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass
        return left
