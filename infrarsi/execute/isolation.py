"""The isolation every trial and every kernel verification runs in: bubblewrap (``bwrap``), plus a cgroup v1
``pids`` limit where the machine lets us make one.

What the isolated process sees (:func:`bwrap_argv` builds the command line, in this order)::

    /                      the machine, read-only (system, the Python environment, the workload's code and data)
    /proc, /dev            its own: a PID namespace (it sees its own processes only), a minimal /dev (+ GPUs)
    /tmp, $HOME, /root     fresh, empty and writable (tmpfs): nothing of the user's home, caches or keys
    readable paths         back on top, read-only: the repository, the working directory, the Python
                           environment and sys.path, the files the command names, INFRARSI_READABLE
    hidden paths           then covered again (an empty read-only tmpfs; over a file, /dev/null on a nodev mount,
                           which cannot be opened): every run directory
                           (the trial's own run, its siblings, ``.infrarsi``), the experience bank, the
                           verifier's cache, the seal key, every ``.git``
    writable paths         the trial's own directory, read-write (kernel verification: none)

A read-only mount refuses every write (EROFS): nothing in the repository, ``.git`` (hooks), ``__pycache__`` or a
sibling run needs checking afterwards. The process has no capabilities and ``no_new_privs``, so it cannot
remount, unmount or gain them back; bwrap's own init is PID 1 of the namespace, and when it ends (the command
ended, or bwrap was killed, or bwrap's parent -- the runner -- died: ``--die-with-parent``) the kernel kills
every process left in the namespace, ``setsid`` and an empty environment included. :func:`leftovers` checks
that none is left, by the namespace's inode, after each trial; a trial's processes also sit in a cgroup of
their own (:class:`PidsCgroup`, ``pids.max``: a fork bomb stops there), whose member list is checked too.

The network is shared (torchrun's rendezvous, NCCL and Slurm need it); so is the machine's view of other
users' files outside the hidden paths, read-only. The environment a trial inherits loses the runner's
secrets (:func:`clean_environment`): API keys, tokens, passwords; the contract's ``workload.env`` can set what
a workload needs. ``problem()`` says why this machine cannot isolate (no bwrap, a kernel without user or PID
namespaces, ...); callers then run unisolated and say so on every record (see ``runner.py``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..rundir import names

BWRAP_ENV = "INFRARSI_BWRAP"  # the bwrap binary (default: bwrap on PATH)
READABLE_ENV = "INFRARSI_READABLE"  # more paths a trial may read (os.pathsep-separated): data outside the repository
# A run directory: what makes a folder one (its lock, its seal chain).
RUN_MARKERS = (names.LOCK, names.SEALS)
TMPFS_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
# Device nodes a training process needs beside /dev's minimal set (GPUs, RDMA); bound only where present.
DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd", "/dev/infiniband", "/dev/accel*")
# Variables of the runner's environment a trial does not inherit: they hold secrets (the LLM's key, a cloud's).
_SECRET = re.compile(r"(^|_)(API_?KEY|SECRET|SECRET_ACCESS_KEY|PASSWORD|PASSWD|TOKEN|CREDENTIALS?)$", re.I)
KEEP_ENV = frozenset({"INFRARSI_TRIAL_TOKEN"})
PIDS_MAX = 4096  # processes + threads of one trial (torch starts a few dozen threads per process)


def bwrap() -> str | None:
    b = os.environ.get(BWRAP_ENV) or "bwrap"
    return b if "/" in b and os.access(b, os.X_OK) else shutil.which(b)


@functools.cache
def problem() -> str | None:
    """Why this machine cannot isolate a process (one line), or None when it can: a real bwrap is started with
    the options a trial gets, and must find its root read-only and its PID namespace its own."""
    if not sys.platform.startswith("linux"):
        return f"no Linux namespaces on {sys.platform}"
    b = bwrap()
    if b is None:
        return "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = "import os; open('/infrarsi-isolation-probe', 'w')"
    try:
        out = subprocess.run([b, *base_options(), "--", sys.executable, "-I", "-S", "-c",
                              f"import os, sys\ntry:\n    {probe}\nexcept OSError as e:\n    print(e.errno, os.getpid())"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not run: {e}"
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return f"bwrap cannot isolate here: {tail}"
    words = out.stdout.split()
    if len(words) != 2 or words[0] != "30" or int(words[1]) > 10:  # EROFS, and a low pid of its own namespace
        return f"bwrap ran but did not isolate as expected (probe said {out.stdout.strip()!r})"
    return None


def base_options(*, shared: bool = False) -> list[str]:
    """bwrap's options before the file system layers. ``shared``: keep the node's PID and IPC namespaces (the tasks
    of one Slurm job step, each in a bwrap of its own, must see each other: NCCL's shared memory and CUDA IPC)."""
    ns = [] if shared else ["--unshare-pid", "--unshare-ipc"]
    return ["--die-with-parent", *ns, "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]


NODE_DEVICES = "@INFRARSI_NODE_DEVICES@"  # in a Slurm job's bwrap line: the node's own GPU and RDMA devices


def node_devices_shell() -> str:
    """Bash that collects the node's device binds into the array ``infrarsi_dev`` (the job's node, not the host that
    wrote the script, decides which devices there are)."""
    pats = " ".join(DEVICES)
    return ('infrarsi_dev=(); for d in ' + pats + '; do [ -e "$d" ] && infrarsi_dev+=(--dev-bind "$d" "$d"); done')


# ---------------------------------------------------------------------------------------------- what is visible
def home_folders() -> list[Path]:
    """The user's home folder (and root's): hidden, with what a trial needs in it put back read-only."""
    out = []
    for h in (os.environ.get("HOME"), str(Path.home()), "/root"):
        if h and Path(h).is_dir() and Path(h).resolve() != Path("/"):
            out.append(Path(h).resolve())
    return list(dict.fromkeys(out))


def python_paths() -> list[Path]:
    """The interpreter, its environment and everything on sys.path (the venv, PYTHONPATH entries, this package)."""
    here = Path(__file__).resolve().parents[2]  # the folder holding the infrarsi package (and kernels/, launchers/)
    out = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.executable).parent.parent, here]
    out += [Path(p) for p in sys.path if p and Path(p).exists()]
    out += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).exists()]
    return out


def secret_paths() -> list[Path]:
    """Files and folders no isolated process may read: the seal key, the verifier's cache (its HMAC secret and
    verdicts), the experience bank (with SQLite's side files)."""
    from ..bank.path import bank_path
    from ..contract.seal import key_path

    cache = Path(os.environ.get("INFRARSI_CACHE") or Path.home() / ".cache" / "infrarsi")
    bank = bank_path()
    out = [key_path(), cache, bank, *(bank.with_name(bank.name + s) for s in ("-wal", "-shm", "-journal"))]
    return [p.expanduser() for p in out]


def is_run_dir(p: Path) -> bool:
    return any((p / m).is_file() for m in RUN_MARKERS)


def run_dirs_near(bases: Iterable[Path]) -> list[Path]:
    """Run directories a process working in ``bases`` would find: ``.infrarsi`` folders, and every child of a
    base that is a run directory (``--run-dir run`` beside the contract), and each base that is one itself."""
    out: list[Path] = []
    for base in bases:
        base = Path(base)
        if not base.is_dir():
            continue
        if is_run_dir(base):
            out.append(base)
        try:
            children = list(base.iterdir())
        except OSError:
            continue
        for c in children:
            try:
                if c.name == ".infrarsi" or (c.is_dir() and not c.is_symlink() and is_run_dir(c)):
                    out.append(c)
            except OSError:
                continue
    return out


def git_dirs(repos: Iterable[Path]) -> list[Path]:
    """``.git`` of each repository (a folder, or the file a worktree has), and the folder a ``.git`` file names."""
    out = []
    for r in repos:
        g = Path(r) / ".git"
        if g.is_dir():
            out.append(g)
        elif g.is_file():
            out.append(g)
            m = re.match(r"gitdir:\s*(.+)", g.read_text(errors="replace").strip())
            if m:
                target = (Path(r) / m.group(1).strip()).resolve()
                out.append(target)
                common = target / "commondir"  # a linked worktree: the main repository's .git holds the objects
                if common.is_file():
                    out.append((target / common.read_text().strip()).resolve())
    return out


def named_paths(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> list[Path]:
    """Paths the command line or the launch's environment names (``--data-path /d/x_text_document`` too: every
    existing file a prefix names): data and scripts outside the repository stay readable."""
    out: list[Path] = []
    words = [*argv, *env.values()]
    for w in words:
        for part in (w, w.split("=", 1)[-1]):
            if "/" not in part or "\n" in part or len(part) > 4096:
                continue
            for item in part.split(os.pathsep) if os.pathsep in part else [part]:
                p = Path(item) if Path(item).is_absolute() else cwd / item
                try:
                    if p.exists():
                        out.append(p)
                    elif p.parent.is_dir() and p.parent != Path("/") and p.name:
                        out += [q for q in p.parent.glob(_glob_escape(p.name) + "*")][:64]
                except OSError:
                    continue
    return out


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


# ------------------------------------------------------------------------------------------------- the box
class Box:
    """What one isolated process may read and write (absolute paths), and where it starts."""

    def __init__(self, *, readable: Iterable[Path] = (), hidden: Iterable[Path] = (), writable: Iterable[Path] = (),
                 named: Iterable[Path] = (), cwd: Path | None = None, shared: bool = False,
                 node_devices: bool = False) -> None:
        self.shared = shared  # base_options(shared=...): the tasks of one job step see each other
        self.node_devices = node_devices  # devices named on the node by the job script (NODE_DEVICES)
        self.readable = _existing(readable)
        self.hidden = _existing(hidden)
        self.writable = _existing(writable)
        self.named = _existing(named)
        self.cwd = Path(cwd).resolve() if cwd is not None else None

    def argv(self, command: Sequence[str], *, info_fd: int | None = None, bwrap_path: str | None = None) -> list[str]:
        return bwrap_argv(self, command, info_fd=info_fd, bwrap_path=bwrap_path)


def _existing(paths: Iterable[Path]) -> list[Path]:
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_absolute():
            continue
        try:
            if p.exists() or p.is_symlink():
                out.append(Path(os.path.abspath(p)))
                real = p.resolve()
                if real != Path(os.path.abspath(p)) and real.exists():
                    out.append(real)
        except OSError:
            continue
    return list(dict.fromkeys(out))


def _under(p: Path, roots: Iterable[Path]) -> bool:
    return any(p == r or r in p.parents for r in roots)


def bwrap_argv(box: Box, command: Sequence[str], *, info_fd: int | None = None,
               bwrap_path: str | None = None) -> list[str]:
    """The bwrap command line that runs ``command`` in ``box`` (see the module docstring for the layers)."""
    out = [bwrap_path or bwrap() or "bwrap", *base_options(shared=box.shared)]
    if box.node_devices:
        out.append(NODE_DEVICES)
    else:
        for pattern in DEVICES:
            for dev in sorted(Path("/").glob(pattern.lstrip("/"))):
                out += ["--dev-bind", str(dev), str(dev)]
    if box.shared:
        out += ["--dev-bind", "/dev/shm", "/dev/shm"]  # one node's tasks share their NCCL segments
    tmpfs = [Path(t) for t in TMPFS_ROOTS if Path(t).is_dir() and not (box.shared and t == "/dev/shm")]
    tmpfs += home_folders()
    tmpfs = [t for t in dict.fromkeys(tmpfs)]
    for t in sorted(tmpfs, key=lambda p: len(p.parts)):
        out += ["--tmpfs", str(t)]
    secret = [Path(os.path.abspath(p)) for p in box.hidden]
    back = [p for p in box.readable if _under(p, tmpfs) and not _under(p, secret)]
    targets = [p.resolve() for p in back if p.is_symlink()]  # a link bound on its own needs its target too
    back += [t for t in targets if _under(t, tmpfs) and not _under(t, secret)]
    bound: list[Path] = []
    for p in sorted(dict.fromkeys(back), key=lambda p: len(p.parts)):
        if any(a in p.parents for a in bound):
            # shown by a folder bound before. Binding it again would change nothing, and fails where it is a
            # symlink with an absolute target (a venv's bin/python -> ~/.pyenv/...: bwrap resolves the link
            # against its own empty root while it builds the mounts)
            continue
        bound.append(p)
        out += ["--ro-bind", str(p), str(p)]
    visible = [p for p in box.readable]

    def shown(p: Path) -> bool:
        return not _under(p, tmpfs) or _under(p, visible)

    emptied = []  # hidden folders: an empty tmpfs each, made read-only once the mount points in it exist
    for p in sorted(box.hidden, key=lambda p: len(p.parts)):
        if not shown(p) or any(h in p.parents for h in box.hidden if h.is_dir()):
            continue  # under an empty tmpfs already
        if p.is_dir() and not p.is_symlink():
            out += ["--tmpfs", str(p)]
            emptied.append(p)
        elif p.is_file():
            out += ["--ro-bind", "/dev/null", str(p)]
    # files the command names inside a hidden folder that is no run directory's (a derived job file under
    # .infrarsi/jobs): put back, file by file
    secrets = [Path(os.path.abspath(s)) for s in secret_paths()]
    for p in sorted(box.named, key=lambda p: len(p.parts)):
        if (p.is_file() and _under(p, secret) and not _under(p, secrets)
                and not any(is_run_dir(a) or a.name == ".git" for a in p.parents)):
            out += ["--ro-bind", str(p), str(p)]
    for p in sorted(box.writable, key=lambda p: len(p.parts)):
        out += ["--bind", str(p), str(p)]
    for p in emptied:  # a write there fails (EROFS) instead of vanishing with the tmpfs
        out += ["--remount-ro", str(p)]
    if box.cwd is not None:
        out += ["--chdir", str(box.cwd)]
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    return [*out, "--", *command]


def trial_box(trial_dir: Path, run_dir: Path, *, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
              repository: Path, readable: Iterable[Path] = (), shared: bool = False, node_devices: bool = False) -> Box:
    """A trial of a run: its own directory read-write; the repository, the working directory, the Python
    environment and what the command names read-only; every run directory, the bank, the caches, the key and
    ``.git`` hidden."""
    cwd, repository, run_dir = Path(cwd).resolve(), Path(repository).resolve(), Path(run_dir).resolve()
    extra = [Path(p) for p in os.environ.get(READABLE_ENV, "").split(os.pathsep) if p]
    roots = [Path("/"), *(Path(t) for t in TMPFS_ROOTS), *home_folders()]

    def not_a_root(paths):  # a path that would bring a whole home folder or /tmp back
        return [p for p in paths if not any(Path(p) == r or Path(p) in r.parents for r in roots)]

    named = not_a_root(named_paths(argv, env, cwd))
    read = [repository, cwd, *not_a_root([*python_paths(), *extra, *readable]), *named]
    hidden = [run_dir, *run_dirs_near([run_dir.parent, cwd, repository]), *git_dirs({repository, cwd}),
              *secret_paths()]
    return Box(readable=read, hidden=hidden, writable=[Path(trial_dir).resolve()], named=named, cwd=cwd,
               shared=shared, node_devices=node_devices)


def verification_box(files: Iterable[Path], *, cwd: Path | None = None) -> Box:
    """Kernel verification: the candidate and reference files and the Python environment read-only, nothing
    writable but the empty tmpfs folders; every run directory near the working directory, the bank, the caches,
    the key and ``.git`` hidden."""
    from ..contract.scope import repository_root

    cwd = Path(cwd or Path.cwd()).resolve()
    repo = repository_root(cwd)
    files = [Path(f).resolve() for f in files]
    hidden = [*run_dirs_near([cwd, repo, *(f.parent for f in files)]), *git_dirs({repo, cwd}), *secret_paths()]
    return Box(readable=[repo, cwd, *python_paths(), *files], hidden=hidden, cwd=cwd)


def clean_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that hold secrets (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``,
    ``HF_TOKEN``, ...)."""
    return {k: v for k, v in env.items() if k in KEEP_ENV or not _SECRET.search(k)}


# ------------------------------------------------------------------------------------------ none left behind
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
        left = self.members()
        deadline = time.monotonic() + timeout_s
        while self.members() and time.monotonic() < deadline:
            for pid in self.members():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass
        return left
