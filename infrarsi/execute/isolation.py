"""The isolation every trial and every kernel verification runs in: bubblewrap (``bwrap``), plus a cgroup v1
``pids`` limit where the machine lets us make one. What a process sees is an allowlist: bwrap starts from an empty
root and :func:`bwrap_argv` adds, in this order::

    /usr /bin /lib* /sys   the machine, read-only (MACHINE); of /etc only what the frameworks read (ETC_SHOWN,
                           traced); of /opt only what the environment names (opt_paths) or Python lives in
    /proc, /dev            its own: a PID namespace (it sees its own processes only), a minimal /dev (+ GPUs)
    /tmp /var/tmp /dev/shm /run, $HOME   fresh, empty and writable (tmpfs), each at most ``scratch_bytes``
    readable paths         read-only: the repository, the working directory, the Python environment and
                           sys.path, the files and folders the command names, INFRARSI_READABLE, the Hugging
                           Face hub cache (hub/: not the token files beside it); each normalised ('..' folded)
                           and never a home folder, a parent of one, or what holds keys (SECRET_BEARING)
    hidden paths           then covered again (an empty read-only tmpfs; over a file, /dev/null): every run
                           directory under what it can read, at any depth (found by its marker files,
                           RUN_MARKERS) and what holds keys, the experience bank, the verifier's cache, the seal
                           key, every ``.git``
    writable paths         the trial's ``outputs/`` (kernel verification: none); cache folders the launch names
                           (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR: CACHE_ENV) and the datasets cache (the
                           Hugging Face home's datasets/, HF_DATASETS_CACHE) an empty tmpfs of their own

Nothing else of the machine exists inside: no /home, /srv, /mnt, /var, nor the sockets under /run (Slurm's munge,
a desktop bus). A read-only mount refuses every write (EROFS), the root included. The process has no capabilities
and ``no_new_privs``, so it cannot remount, unmount or gain them back; it runs in a session of its own
(``--new-session``: no terminal to push input into, TIOCSTI), in a network namespace of its own (``--unshare-net``:
only its own loopback, which torchrun's rendezvous uses; no abstract unix socket or service of the host), and
under a seccomp filter (built by libseccomp, :func:`seccomp_fd`) that refuses the kernel keyring's calls
(DENIED_SYSCALLS), which would otherwise carry data from one trial to the next. bwrap's own init is PID 1 of the
namespace, and when it ends (the command ended, or bwrap was killed, or bwrap's parent -- the runner -- died:
``--die-with-parent``) the kernel kills every process left in the namespace, ``setsid`` and an empty environment
included. :func:`.left_behind.leftovers` checks that none is left, by the namespace's inode, after each trial; a trial's
processes also sit in a cgroup of their own (:class:`.left_behind.PidsCgroup`, ``pids.max``: a fork bomb stops there), whose
member list is checked too.

The environment is an allowlist too (:func:`clean_environment`): what the frameworks need (ENV_NAMES,
ENV_PREFIXES: PATH, CUDA_*, NCCL_*, OMP_*, TORCH*, TRITON*, HF_*, SLURM_*, ...; under HF_/PYTHON/... only the
documented names, ENV_DOCUMENTED), less any name that says it holds a secret and any value that carries a
credential (a URL's userinfo or query, a Bearer/Basic token, a high-entropy word under a name not documented),
plus the names the contract's ``workload.pass_env`` lists, as they are; the
contract's ``workload.env`` is set on top. Slurm jobs of several tasks or nodes keep the node's network, PID and IPC
namespaces (``shared``), and their records say so. ``problem()`` says why this machine cannot isolate (no bwrap, a
kernel without user or PID namespaces, ...); callers then run unisolated and say so on every record (see
``runner.py``).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..candidate import split_spec  # PATH@VARIANT -> PATH
from ..rundir import names
from ..trial import OUTPUTS
from .environment import ENV_NAMES, ENV_PREFIXES, clean_environment  # noqa: F401  (the box's environment)
from .machine import ETC_SHOWN, MACHINE, etc_shown, machine_options, opt_paths  # noqa: F401  (the machine's folders)

BWRAP_ENV = "INFRARSI_BWRAP"  # the bwrap binary (default: bwrap on PATH)
READABLE_ENV = "INFRARSI_READABLE"  # more paths a trial may read (os.pathsep-separated): data outside the repository
# A run directory: what makes a folder one (its lock, its seal chain).
RUN_MARKERS = (names.LOCK, names.SEALS)
TMPFS_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run")  # a fresh tmpfs each (scratch; /run: no host socket)
# Files of the machine that hold its secrets (a trial runs as its runner's user: root owns /etc/shadow)
MACHINE_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh", "/etc/munge",
                   "/etc/ssl/private", "/etc/sudoers", "/etc/sudoers.d", "/etc/slurm/jwt_hs256.key")
SCRATCH_BYTES = 4 * 2**30  # each tmpfs of a box (scratch_gib in the contract's invariants.isolation)
# Caches of the frameworks in the home folder: shown read-only (a tokenizer or model read offline). Only the
# cache folders of the Hugging Face home: its token files (token, stored_tokens) beside them stay out of the box.
HF_HOME_DEFAULT = ".cache/huggingface"  # relative to the home folder; HF_HOME names another
HF_CACHES = ("hub",)  # in the Hugging Face home, read-only; HF_HUB_CACHE names another
# The datasets cache (the Hugging Face home's datasets/, HF_DATASETS_CACHE) is written by every load_dataset (a
# .lock beside each prepared dataset, the arrow files it prepares, even from local files): shown read-only, it
# crashed every torchtitan trial once a run by hand had made it. Each trial gets an empty, writable tmpfs there
# instead (datasets_caches): it prepares its data anew from the files it reads (the hub cache, the repository).
HF_DATASETS = "datasets"
# What holds a user's keys, wherever it sits (by name): never shown, and covered inside any folder a trial is shown.
SECRET_BEARING = frozenset({".ssh", ".aws", ".netrc", ".gnupg", ".git-credentials", ".pypirc", ".docker", ".kube",
                            ".azure", "gcloud", ".huggingface", ".vault-token", ".terraform.d", ".pgpass", ".my.cnf"})
HF_TOKEN_FILES = ("token", "stored_tokens")  # in a Hugging Face home (beside hub/, or in a folder named huggingface)
# A cache folder the launch names: an empty, writable tmpfs of its own in every trial (no trial reaches another's).
CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "CUDA_CACHE_PATH")
# The kernel keyring's calls: refused (EPERM) by the seccomp filter; the keyring would carry data between trials.
DENIED_SYSCALLS = ("keyctl", "add_key", "request_key")
# Device nodes a training process needs beside /dev's minimal set (GPUs, RDMA); bound only where present.
DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd", "/dev/infiniband", "/dev/accel*")


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
        code = f"import os, sys\ntry:\n    {probe}\nexcept OSError as e:\n    print(e.errno, os.getpid())"
        argv = bwrap_argv(Box(readable=python_paths()), [sys.executable, "-I", "-S", "-c", code], bwrap_path=b)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not run: {e}"
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return f"bwrap cannot isolate here: {tail}"
    words = out.stdout.split()
    if len(words) != 2 or words[0] != "30" or int(words[1]) > 10:  # EROFS, and a low pid of its own namespace
        return f"bwrap ran but did not isolate as expected (probe said {out.stdout.strip()!r})"
    return None


def base_options(*, shared: bool = False, network: bool = False) -> list[str]:
    """bwrap's options before the file system layers. ``shared``: keep the node's PID and IPC namespaces (the tasks
    of one Slurm job step, each in a bwrap of its own, must see each other: NCCL's shared memory and CUDA IPC).
    ``network``: keep the node's network (a job of several nodes); otherwise a network namespace of its own, whose
    loopback bwrap brings up (torchrun's rendezvous on 127.0.0.1 works, nothing of the host is reachable)."""
    ns = [] if shared else ["--unshare-pid", "--unshare-ipc"]
    net = [] if network or shared else ["--unshare-net"]
    return ["--die-with-parent", "--new-session", *ns, *net, "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev"]




@functools.cache
def _seccomp_program() -> bytes | None:
    """The seccomp filter (BPF, built by libseccomp) that refuses DENIED_SYSCALLS with EPERM; None where pyseccomp
    (or libseccomp) is missing."""
    try:
        import pyseccomp
    except (ImportError, OSError):
        return None
    f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        f.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    fd = os.memfd_create("infrarsi-seccomp")
    try:
        with open(fd, "wb", closefd=False) as out:
            f.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def seccomp_problem() -> str | None:
    """Why no seccomp filter can be made here (one line), or None."""
    return None if _seccomp_program() is not None else \
        "no seccomp filter: pyseccomp (pip install pyseccomp) or libseccomp (apt-get install libseccomp2) is missing"


def seccomp_fd() -> int | None:
    """A fresh file descriptor holding the filter, for bwrap's ``--seccomp FD`` (one per bwrap: it reads it to the
    end); the caller passes it to the child and closes it. None where no filter can be made."""
    prog = _seccomp_program()
    if prog is None:
        return None
    fd = os.memfd_create("infrarsi-seccomp", 0)  # not close-on-exec: bwrap inherits it
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def write_seccomp(path: Path) -> bool:
    """The filter written to ``path`` (a Slurm job's bwrap reads it through ``--seccomp 9 9<path``); False where no
    filter can be made."""
    prog = _seccomp_program()
    if prog is None:
        return False
    Path(path).write_bytes(prog)
    return True


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
    from ..rundir.chain import key_path

    cache = Path(os.environ.get("INFRARSI_CACHE") or Path.home() / ".cache" / "infrarsi")
    bank = bank_path()
    out = [key_path(), cache, bank, *(bank.with_name(bank.name + s) for s in ("-wal", "-shm", "-journal"))]
    return [p.expanduser() for p in out]


def is_run_dir(p: Path) -> bool:
    return any((p / m).is_file() for m in RUN_MARKERS)


SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules"})  # never hold a run directory worth a walk
MAX_WALK = 100_000  # folders one walk reads at most (a dataset of many folders ends the walk there)


def run_dirs_within(roots: Iterable[Path], *, max_dirs: int = MAX_WALK, secrets: list[Path] | None = None) -> list[Path]:
    """Every run directory under ``roots``, at any depth (a folder holding a RUN_MARKERS file; a ``.infrarsi``
    folder whole), each root included. Links are not followed (what a link points to outside the box's paths is
    not in the box); Python environments (``pyvenv.cfg``), ``.git`` and ``__pycache__`` are not walked.
    ``secrets``: the same walk appends what holds keys there (SECRET_BEARING, a Hugging Face home's token files)."""
    out: list[Path] = []
    seen: set[Path] = set()
    stack = [Path(r) for r in dict.fromkeys(roots)]
    walked = 0
    while stack and walked < max_dirs:
        d = stack.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        walked += 1
        names = {e.name for e in entries}
        if secrets is not None:
            hf_home = d.name == "huggingface" or "hub" in names
            secrets += [Path(e.path) for e in entries
                        if e.name in SECRET_BEARING or (hf_home and e.name in HF_TOKEN_FILES)]
        if any(m in names for m in RUN_MARKERS) and is_run_dir(d):
            out.append(d)
            continue
        if "pyvenv.cfg" in names:
            continue
        for e in entries:
            try:
                if e.name == ".infrarsi" and e.is_dir(follow_symlinks=False):
                    out.append(Path(e.path))
                elif e.name not in SKIP_DIRS and e.name not in SECRET_BEARING and e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
            except OSError:
                continue
    return out


def run_dirs_near(bases: Iterable[Path]) -> list[Path]:
    """Run directories a process working in ``bases`` would find, at any depth (:func:`run_dirs_within`)."""
    return run_dirs_within(Path(b) for b in bases if Path(b).is_dir())


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
    existing file a prefix names; the string values of a JSON object, as ``INFRARSI_PATCHES`` is; a kernel
    candidate's file, ``PATH@VARIANT``): data, scripts and candidates outside the repository stay readable."""
    out: list[Path] = []
    words = [*argv, *env.values()]
    for w in words:
        for part in (w, w.split("=", 1)[-1], *_json_strings(w)):
            if "/" not in part or "\n" in part or len(part) > 4096:
                continue
            for item in part.split(os.pathsep) if os.pathsep in part else [part]:
                item = split_spec(item)[0]  # a candidate's file without its variant (any other path: as written)
                p = Path(item) if Path(item).is_absolute() else cwd / item
                try:
                    if p.exists():
                        out += [p] if _file_or_folder(p) else []
                    elif p.parent.is_dir() and p.parent != Path("/") and p.name:
                        out += [q for q in p.parent.glob(_glob_escape(p.name) + "*") if _file_or_folder(q)][:64]
                except OSError:
                    continue
    return out


def _file_or_folder(p: Path) -> bool:
    """A named path is shown only as a file or a folder: a socket (munge's, a bus, a database's) or a FIFO the launch
    happens to name would be a host service reached from the box, a device is not the trial's."""
    try:
        mode = p.stat().st_mode
    except OSError:  # a dangling link among a prefix's matches: not shown, its siblings still are
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _json_strings(word: str) -> list[str]:
    """The string values of ``word`` when it is a JSON object (``{"rmsnorm": "/k/f.py@rows16"}``), else none."""
    if not word.startswith("{"):
        return []
    try:
        obj = json.loads(word)
    except ValueError:
        return []
    return [v for v in obj.values() if isinstance(v, str)] if isinstance(obj, dict) else []


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


# ------------------------------------------------------------------------------------------------- the box
class Box:
    """What one isolated process may read and write (absolute paths), and where it starts. ``network``: keep the
    host's network (a Slurm job of several nodes); ``scratch_bytes``: the size of each of its tmpfs folders;
    ``caches``: folders that are an empty, writable tmpfs of their own."""

    def __init__(self, *, readable: Iterable[Path] = (), hidden: Iterable[Path] = (), writable: Iterable[Path] = (),
                 named: Iterable[Path] = (), cwd: Path | None = None, shared: bool = False,
                 node_devices: bool = False, network: bool = False, scratch_bytes: int = SCRATCH_BYTES,
                 caches: Iterable[Path] = ()) -> None:
        self.shared = shared  # base_options(shared=...): the tasks of one job step see each other
        self.node_devices = node_devices  # devices named on the node by the job script (NODE_DEVICES)
        self.network = network or shared
        self.scratch_bytes = int(scratch_bytes)
        self.readable = _existing(readable)
        self.hidden = _existing(hidden)
        self.writable = _existing(writable)
        self.named = _existing(named)
        self.caches = list(dict.fromkeys(Path(os.path.abspath(c)) for c in caches if Path(c).is_absolute()))
        self.cwd = Path(cwd).resolve() if cwd is not None else None

    def argv(self, command: Sequence[str], *, info_fd: int | None = None, seccomp_fd: int | None = None,
             bwrap_path: str | None = None) -> list[str]:
        return bwrap_argv(self, command, info_fd=info_fd, seccomp_fd=seccomp_fd, bwrap_path=bwrap_path)


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
    """``p`` is one of ``roots`` or inside one (absolute paths; by their text: pathlib's parents are slow)."""
    s = str(p)
    return any(s == r or s.startswith(r if r.endswith("/") else r + "/") for r in map(str, roots))


def bwrap_argv(box: Box, command: Sequence[str], *, info_fd: int | None = None, seccomp_fd: int | None = None,
               bwrap_path: str | None = None) -> list[str]:
    """The bwrap command line that runs ``command`` in ``box`` (see the module docstring for the layers)."""
    out = [bwrap_path or bwrap() or "bwrap", *base_options(shared=box.shared, network=box.network),
           *machine_options()]
    if box.node_devices:
        out.append(NODE_DEVICES)
    else:
        for pattern in DEVICES:
            for dev in sorted(Path("/").glob(pattern.lstrip("/"))):
                out += ["--dev-bind", str(dev), str(dev)]
    if box.shared:
        out += ["--dev-bind", "/dev/shm", "/dev/shm"]  # one node's tasks share their NCCL segments
    tmpfs = [Path(t) for t in TMPFS_ROOTS if not (box.shared and t == "/dev/shm")]
    tmpfs += home_folders()
    tmpfs = [t for t in dict.fromkeys(tmpfs)]
    for t in sorted(tmpfs, key=lambda p: len(p.parts)):
        out += ["--size", str(box.scratch_bytes), "--tmpfs", str(t)]
    machine = [*map(Path, MACHINE), *etc_shown()]
    specials = [Path("/"), Path("/proc"), Path("/dev")]  # never bound over
    secret = [Path(os.path.abspath(p)) for p in box.hidden]
    caches = [c for c in box.caches if not _under(c, secret) and c not in specials]

    def shown(p: Path) -> bool:  # what the box shows of the machine without binding it
        return _under(p, machine) and not _under(p, tmpfs)

    back = [p for p in box.readable if not shown(p) and not _under(p, secret) and not _under(p, caches)
            and p not in specials and not _under(p, specials[1:])]
    targets = [p.resolve() for p in back if p.is_symlink()]  # a link bound on its own needs its target too
    back += [t for t in targets if not shown(t) and not _under(t, secret) and t not in specials]
    bound: list[Path] = []
    for p in sorted(dict.fromkeys(back), key=lambda p: len(p.parts)):
        if _under(p.parent, bound):
            # shown by a folder bound before. Binding it again would change nothing, and fails where it is a
            # symlink with an absolute target (a venv's bin/python -> ~/.pyenv/...: bwrap resolves the link
            # against its own empty root while it builds the mounts)
            continue
        bound.append(p)
        out += ["--ro-bind", str(p), str(p)]
    visible = [*bound, *(m for m in machine if not _under(m, tmpfs))]

    emptied = []  # hidden folders: an empty tmpfs each, made read-only once the mount points in it exist
    hidden_dirs = [h for h in box.hidden if h.is_dir()]
    for p in sorted(box.hidden, key=lambda p: len(p.parts)):
        if not _under(p, visible) or _under(p.parent, hidden_dirs):
            continue  # not in the box, or under an empty tmpfs already
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
    for c in sorted(caches, key=lambda p: len(p.parts)):
        out += ["--size", str(box.scratch_bytes), "--tmpfs", str(c)]
    for p in sorted(box.writable, key=lambda p: len(p.parts)):
        out += ["--bind", str(p), str(p)]
    for p in emptied:  # a write there fails (EROFS) instead of vanishing with the tmpfs
        out += ["--remount-ro", str(p)]
    out += ["--remount-ro", "/"]  # the root's own folders (mount points) refuse writes too
    if box.cwd is not None:
        out += ["--chdir", str(box.cwd)]
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    return [*out, "--", *command]


def hf_homes(env: Mapping[str, str]) -> list[Path]:
    """The Hugging Face home folders (HF_HOME, or the default under each home folder): only their caches are shown."""
    named = env.get("HF_HOME", "")
    return [Path(named)] if named.startswith("/") else [h / HF_HOME_DEFAULT for h in home_folders()]


def home_caches(env: Mapping[str, str]) -> list[Path]:
    """The frameworks' caches, shown read-only: the Hugging Face home's ``hub`` (not its token files),
    HF_HUB_CACHE."""
    out = [h / c for h in hf_homes(env) for c in HF_CACHES]
    out += [Path(env[k]) for k in ("HF_HUB_CACHE",) if env.get(k, "").startswith("/")]
    return [p for p in out if p.is_dir()]


def datasets_caches(env: Mapping[str, str]) -> list[Path]:
    """The datasets caches (HF_DATASETS): HF_DATASETS_CACHE, the named Hugging Face home's ``datasets``, and a home
    folder's where it exists (elsewhere the home folder's own tmpfs is writable): each an empty tmpfs of its own."""
    out = [Path(env["HF_DATASETS_CACHE"])] if env.get("HF_DATASETS_CACHE", "").startswith("/") else []
    named = env.get("HF_HOME", "").startswith("/")
    return out + [h / HF_DATASETS for h in hf_homes(env) if named or (h / HF_DATASETS).is_dir()]




def cache_folders(env: Mapping[str, str]) -> list[Path]:
    """Cache folders the launch names (CACHE_ENV): each an empty, writable tmpfs of its own inside the box."""
    return [Path(env[k]) for k in CACHE_ENV if env.get(k, "").startswith("/")]


def trial_box(trial_dir: Path, run_dir: Path, *, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
              repository: Path, readable: Iterable[Path] = (), shared: bool = False, node_devices: bool = False,
              network: bool = False, scratch_bytes: int = SCRATCH_BYTES, inherited: Mapping[str, str] = {}) -> Box:
    """A trial of a run: its ``outputs/`` read-write; the repository, the working directory, the Python
    environment, the frameworks' caches and what the command names read-only; every run directory under them (its
    own included), the bank, the caches, the key and ``.git`` hidden. ``env``: what the launch sets (its values
    name paths to show); ``inherited``: what the trial inherits besides (HF_HOME, TRITON_CACHE_DIR, ... there
    count too)."""
    cwd, repository, run_dir = Path(cwd).resolve(), Path(repository).resolve(), Path(run_dir).resolve()
    extra = [Path(p) for p in os.environ.get(READABLE_ENV, "").split(os.pathsep) if p]
    not_a_root = _not_a_root  # a path that would bring a whole home folder, /tmp or a user's keys back: not shown

    whole = {**inherited, **env}
    caches = [*cache_folders(whole), *map(_norm, datasets_caches(whole))]
    homes = [_norm(h) for h in hf_homes(whole)]  # named by HF_HOME: its caches are shown below, its tokens are not
    named = [p for p in not_a_root(named_paths(argv, env, cwd)) if not _under(p, caches) and p not in homes]
    machine = [Path(m) for m in MACHINE]
    hf = not_a_root(home_caches(whole))
    pythons = not_a_root(python_paths())
    shown = [repository, cwd, *not_a_root([*extra, *readable]), *(p for p in named if p.is_dir()), *hf]
    shown = [p for p in shown if not _under(p, machine)]  # walked for run directories (not the machine's folders)
    keys: list[Path] = []  # what holds keys inside what is shown (a named ~/.cache's huggingface/token): covered
    runs = run_dirs_within([run_dir.parent, *shown], secrets=keys)
    # sys.path entries are not walked (an interpreter's install is thousands of folders): what holds keys right in
    # one under a home folder (a PYTHONPATH of ~/work beside ~/work/.netrc) is covered
    keys += [p / n for p in pythons if _under(p, home_folders()) for n in SECRET_BEARING if os.path.lexists(p / n)]
    read = [repository, cwd, *pythons, *not_a_root([*extra, *readable]), *named, *hf, *opt_paths(whole)]
    hidden = [run_dir, *runs, *keys, *git_dirs({repository, cwd}), *secret_paths(), *map(Path, MACHINE_SECRETS)]
    return Box(readable=read, hidden=hidden, writable=[Path(trial_dir).resolve() / OUTPUTS], named=named, cwd=cwd,
               shared=shared, node_devices=node_devices, network=network, scratch_bytes=scratch_bytes,
               caches=caches)


def _norm(p: Path) -> Path:
    """``p`` absolute with ``.`` and ``..`` folded by text (``/home/u/repo/..`` is ``/home/u``), before any decision."""
    return Path(os.path.abspath(p))


def _not_a_root(paths: Iterable[Path]) -> list[Path]:
    """``paths`` normalised (:func:`_norm`), less any that is ``/``, a scratch root or a home folder or holds one
    (``..`` climbing to the home folder, a link to it), or that is or sits in what holds keys (SECRET_BEARING, a
    Hugging Face home's token files): the named thing is shown, never its parent with the user's keys."""
    roots = [Path("/"), *(Path(t) for t in TMPFS_ROOTS), *home_folders()]
    out = []
    for p in paths:
        if not Path(p).is_absolute():
            continue
        q = _norm(p)
        try:
            real = Path(os.path.realpath(q))
        except OSError:
            continue
        if any(x == r or x in r.parents for x in (q, real) for r in roots):
            continue
        if any(_holds_keys(x) for x in (q, real)):
            continue
        out.append(q)
    return list(dict.fromkeys(out))


def _holds_keys(p: Path) -> bool:
    if any(part in SECRET_BEARING for part in p.parts):
        return True
    return p.name in HF_TOKEN_FILES and (p.parent.name == "huggingface" or (p.parent / "hub").is_dir())


def verification_box(files: Iterable[Path], *, cwd: Path | None = None) -> Box:
    """Kernel verification: the candidate and reference files and the Python environment read-only, nothing
    writable but the empty tmpfs folders; every run directory under the working directory and the repository,
    the bank, the caches, the key and ``.git`` hidden."""
    from ..contract.scope import repository_root

    cwd = Path(cwd or Path.cwd()).resolve()
    repo = repository_root(cwd)
    files = [Path(f).resolve() for f in files]
    keys: list[Path] = []
    hidden = [*run_dirs_within([cwd, repo, *(f.parent for f in files)], secrets=keys), *keys, *git_dirs({repo, cwd}),
              *secret_paths(), *map(Path, MACHINE_SECRETS)]
    return Box(readable=[repo, cwd, *_not_a_root(python_paths()), *files, *opt_paths(os.environ)], hidden=hidden,
               cwd=cwd)
