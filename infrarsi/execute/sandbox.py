"""The trial sandbox: a local trial sees its run directory read-only, its own trial directory read-write and
the seal key as an empty file, and it cannot undo that.

Entered by the trial's exec wrapper (``trial_wrapper.py``) just before it becomes the command, through the
system calls themselves (ctypes; no util-linux needed):

1. a private mount namespace: ``unshare(CLONE_NEWNS)`` as root, else ``unshare(CLONE_NEWUSER | CLONE_NEWNS)``
   with the user and group mapped to themselves (unprivileged user namespaces);
2. every mount made private, so nothing below propagates back to the machine's own mounts;
3. ``RUN_DIR`` bound onto itself and remounted read-only (records, the seal chain, ``noise.json``,
   ``verification.json``, sibling trials: a write fails with EROFS); ``TRIAL_DIR`` bound onto itself
   read-write; ``/dev/null`` bound over the seal key (it reads as empty);
4. every capability dropped (bounding, ambient, inheritable, permitted, effective) and ``no_new_privs`` set.
   Without CAP_SYS_ADMIN the command cannot unmount or remount what step 3 did; a user namespace it makes
   for itself gets those mounts locked by the kernel; ``/proc/<runner>/root`` needs ptrace rights over a
   process with more capabilities than it has; ``open_by_handle_at`` needs CAP_DAC_READ_SEARCH.

A trial that runs as root keeps uid 0 but no capabilities: it reads and writes what root owns outside the
run directory (its caches in ``$HOME``, ``/tmp``), as before. The repository around the run directory stays
writable; writes there are caught after the trial (``contract/scope.py``'s TreeGuard).

Standalone (stdlib only): the wrapper imports it as a sibling file, the executor as
``infrarsi.execute.sandbox``. ``probe()`` tells the executor whether this machine allows it.
"""

import ctypes
import errno
import json
import os
import subprocess
import sys
import tempfile

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs f_flag bit -> the mount flag a remount must keep (a user namespace may not clear them)
_KEEP = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
         os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class SandboxError(OSError):
    pass


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise SandboxError(e, f"{what}: {os.strerror(e)}")


def _mount(src, target, flags: int, what: str) -> None:
    enc = (lambda s: None if s is None else os.fsencode(s))
    _check(_libc.mount(enc(src), enc(target), None, ctypes.c_ulong(flags), None), what)


def _remount(target: str, *, readonly: bool) -> None:
    keep = 0
    f = os.statvfs(target).f_flag
    for st, ms in _KEEP.items():
        if f & st:
            keep |= ms
    _mount(None, target, MS_REMOUNT | MS_BIND | keep | (MS_RDONLY if readonly else 0),
           f"remount {target} {'read-only' if readonly else 'read-write'}")


def _unshare() -> None:
    if os.geteuid() == 0:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        return
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
    for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _drop_capabilities() -> None:
    prctl = _libc.prctl
    ul = ctypes.c_ulong
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if prctl(PR_CAPBSET_DROP, ul(cap), ul(0), ul(0), ul(0)) != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"drop capability {cap} from the bounding set")
    prctl(PR_CAP_AMBIENT, ul(PR_CAP_AMBIENT_CLEAR_ALL), ul(0), ul(0), ul(0))  # EINVAL before Linux 4.3: none to clear

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    # two 32-bit words per set (version 3), all zero: no capability left in any set
    _check(_libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset(0)")
    _check(prctl(PR_SET_NO_NEW_PRIVS, ul(1), ul(0), ul(0), ul(0)), "prctl(PR_SET_NO_NEW_PRIVS)")


def enter(spec: dict) -> None:
    """In the (single-threaded) process about to exec the trial: ``spec`` = {"ro": [dirs], "rw": [dirs],
    "hide": [files]}, absolute paths; each rw dir lies inside a ro dir (or nowhere near one)."""
    _unshare()
    _mount(None, "/", MS_REC | MS_PRIVATE, "make every mount private")
    for d in spec.get("ro", []):
        _mount(d, d, MS_BIND | MS_REC, f"bind {d}")
        _remount(d, readonly=True)
    for d in spec.get("rw", []):
        _mount(d, d, MS_BIND | MS_REC, f"bind {d}")
        _remount(d, readonly=False)
    for p in spec.get("hide", []):
        if os.path.isfile(p):
            _mount("/dev/null", p, MS_BIND, f"hide {p}")
    _drop_capabilities()


def probe() -> str | None:
    """Why the sandbox cannot be used on this machine (one line), or None when it works: a fresh process
    enters it on scratch folders and checks that the read-only one refuses a write and the read-write one
    takes it (``unshare`` of a user namespace needs a single-threaded process, so never this one)."""
    if not sys.platform.startswith("linux"):
        return f"no mount namespaces on {sys.platform}"
    with tempfile.TemporaryDirectory(prefix="infrarsi-sandbox-") as tmp:
        from ..rundir import RunDir

        scratch = RunDir(os.path.join(tmp, "run"))
        run, trial = str(scratch.path), str(scratch.trial_dir(0))
        os.makedirs(trial)
        spec = json.dumps({"ro": [run], "rw": [trial], "hide": []})
        try:
            out = subprocess.run([sys.executable, __file__, "--probe", spec], capture_output=True, text=True,
                                 timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"the sandbox probe did not run: {e}"
        if out.returncode != 0:
            lines = (out.stderr or out.stdout).strip().splitlines()
            return lines[-1] if lines else f"the sandbox probe exited with status {out.returncode}"
        if os.path.exists(os.path.join(run, "x")) or not os.path.exists(os.path.join(trial, "y")):
            return "the sandbox probe's writes did not land where expected"
    return None


def _probe_child(spec: dict) -> None:
    enter(spec)
    run, trial = spec["ro"][0], spec["rw"][0]
    try:
        open(os.path.join(run, "x"), "w").close()
    except OSError as e:
        if e.errno != errno.EROFS:
            raise
    else:
        sys.exit("the run directory stayed writable inside the sandbox")
    open(os.path.join(trial, "y"), "w").close()
    try:
        _mount(None, run, MS_REMOUNT | MS_BIND, "remount")
    except SandboxError:
        return
    sys.exit("the sandbox could be remounted read-write from inside")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        try:
            _probe_child(json.loads(sys.argv[2]))
        except OSError as e:
            sys.exit(f"{e.strerror or e}")
