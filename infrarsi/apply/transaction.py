"""apply's one transaction: check every destination, build the commit from the audited bytes, write, move HEAD.

    probs = problems(plan, repo, scope_files)   # [] or one line per destination that may not be written
    sha, written = commit(plan, repo)           # the new commit, or GitError / ApplyRefused with nothing changed

Checked before anything is written (:func:`problems`): every destination is a plain relative path inside the
work tree, outside ``.git``; no part of it is a symlink (apply follows no link: a link in the tree could point
anywhere); it is not a hard link (the other names would change too); git does not ignore it (an ignored file is
the user's and could not be committed); a kernel file lands inside ``scope.files``; and no stale
``index.lock`` stands in the way.

Then (:func:`commit`): the tree is built first with git's plumbing, from the exact bytes the audit lists
(``hash-object --no-filters``, a temporary index, ``write-tree``): no clean filter rewrites a file, and the new tree
is compared with the audit (each path's blob and mode, and no other path changed) before any file is touched. Then
each file is written atomically in its own folder (temp file + rename through folder descriptors opened without
following links) and the index gets the new entries. The repository's hooks then run as ``git commit`` runs them
(``pre-commit``, ``prepare-commit-msg``, ``commit-msg``, through ``git hook run``; ``hooks=False`` is
``--no-verify``): a hook that fails stops the commit with its output, and one that changes a file (a formatter) stops
it too, since the commit must hold the audited bytes; a hook may add to the message (a sign-off, a Change-Id). The
commit is made (``commit-tree``) and HEAD moves last, only if it still is the commit the plan was made on;
``post-commit`` runs after it, as git's does (its failure is reported, the commit stays). Every other git call runs
with hooks off. Any failure undoes what was done, in reverse: each replaced file back (the very file: it kept a second name
until the commit was made), new files and new folders removed, the index back to its bytes. HEAD then never moved. Objects already written to ``.git/objects`` stay
unreferenced (``git gc`` drops them); nothing else of the repository differs.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..gitops import GitError
from .writer import OUT_ROOT, ApplyPlan, ApplyRefused, FileChange

# Every git call of the transaction: none of the user's hooks, no file-system monitor program.
HARDENED = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
ZERO = "0" * 40


def _git(repo: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    e = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    r = subprocess.run(["git", *HARDENED, "-C", str(repo), *args], capture_output=True, env=e, input=stdin)
    if check and r.returncode != 0:
        lines = (r.stderr or r.stdout).decode(errors="replace").strip().splitlines()
        said = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[-1] if lines else "")
        raise GitError(f"`git {' '.join(args[:3])}` failed in {repo}: {said or f'exit {r.returncode}'}")
    return r


def _out(r: subprocess.CompletedProcess) -> str:
    return r.stdout.decode().strip()


# ------------------------------------------------------------------------------------------ checks
def problems(plan: ApplyPlan, repo: Path, scope_files: Sequence[str], *, git: bool = True,
             lock: bool = True) -> list[str]:
    """Why a destination of the plan may not be written (one line each; [] when every one may). ``git``: the
    repository is a git work tree (a dry run into a plain folder checks the paths only); ``lock``: a stale
    ``index.lock`` counts too (not for a dry run, which writes nothing)."""
    from ..contract.scope import glob_of

    root = Path(repo)
    out = []
    for f in plan.files:
        why = path_problem(root, f.path)
        if why is None and f.kind == "kernel" and glob_of(f.path, list(scope_files)) is None:
            why = f"{f.path} is outside the locked scope {list(scope_files)}"
        if why is not None:
            out.append(why)
    if git and not out:
        ignored = _ignored(root, [f.path for f in plan.files])
        out += [f"{p} is ignored by git here (.gitignore, info/exclude): it is yours and would not be committed; "
                f"un-ignore it or move it, then rerun" for p in ignored]
        held = index_lock(root)
        if lock and held.exists():
            out.append(f"{held} exists: another git process is running in {root}, or one was killed and left it; "
                       f"if none is running, remove it (`rm {held}`), then rerun")
    return out


def path_problem(root: Path, rel: str) -> str | None:
    """Why ``rel`` may not be written under ``root`` without following a link or changing another name, or None."""
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or ".." in p.parts or "." in p.parts or ".git" in p.parts:
        return f"{rel} is not a path inside the work tree (absolute, '..' or inside .git)"
    here = Path(root)
    for i, part in enumerate(p.parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None  # the rest is created by apply itself
        last = i == len(p.parts) - 1
        if stat.S_ISLNK(st.st_mode):
            target = os.path.realpath(here)
            where = "" if Path(target).is_relative_to(Path(root).resolve()) else ", outside the repository"
            return (f"{PurePosixPath(*p.parts[:i + 1])} is a symlink (to {target}{where}): apply writes no file "
                    f"through a link; remove the symlink")
        if not last and not stat.S_ISDIR(st.st_mode):
            return f"{PurePosixPath(*p.parts[:i + 1])} is a file, where {rel} needs a folder"
        if last and not stat.S_ISREG(st.st_mode):
            return f"{rel} exists and is not a plain file"
        if last and st.st_nlink > 1:
            return (f"{rel} is a hard link ({st.st_nlink} names for one file): writing it would change the others "
                    f"too; replace it with a copy (`cp --remove-destination`), then rerun")
    return None


def _ignored(root: Path, paths: list[str]) -> list[str]:
    r = _git(root, "check-ignore", "-z", "--stdin", stdin="\0".join(paths).encode() + b"\0", check=False)
    if r.returncode not in (0, 1):
        raise GitError(f"`git check-ignore` failed in {root}: {r.stderr.decode(errors='replace').strip()}")
    return [p for p in r.stdout.decode().split("\0") if p]


def index_lock(root: Path) -> Path:
    p = Path(_out(_git(root, "rev-parse", "--git-path", "index.lock")))
    return p if p.is_absolute() else Path(root) / p


def _index(root: Path) -> Path:
    p = Path(_out(_git(root, "rev-parse", "--git-path", "index")))
    return p if p.is_absolute() else Path(root) / p


# ------------------------------------------------------------------------------------- the commit
@dataclass
class _Undo:
    """What to put back, newest last."""

    files: list[tuple[str, str | None]] = field(default_factory=list)  # (path, the old file's second name or None)
    dirs: list[str] = field(default_factory=list)  # folders apply created, in creation order
    index: bytes | None = None  # the index's bytes before apply changed it (None: it did not)


def changed_files(plan: ApplyPlan, root: Path) -> list[FileChange]:
    """The plan's files whose bytes or executable bit differ from the work tree's."""
    out = []
    for f in plan.files:
        got = _read(root, f.path)
        if got is None or got[0] != f.content or bool(got[1] & 0o111) != f.executable:
            out.append(f)
    return out


HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit")  # those `git commit` runs, in its order


def commit(plan: ApplyPlan, repo: Path, *, hooks: bool = True,
           say: Callable[[str], None] = lambda line: None) -> tuple[str | None, list[str]]:
    """Write the plan into ``repo`` as one commit; (its sha, the paths written), or (None, []) when the tree
    already holds it. Raises ApplyRefused / GitError with the repository as it was. ``hooks``: run the repository's
    hooks (module doc); ``say`` gets what ``post-commit`` printed."""
    root = Path(repo)
    files = changed_files(plan, root)
    if not files:
        return None, []
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    old = _out(head) if head.returncode == 0 else None
    tree, blobs = _tree(root, old, files)
    message = plan.message
    undo = _Undo()
    try:
        for f in files:
            _write(root, f, undo)
        index = _index(root)
        undo.index = index.read_bytes() if index.exists() else b""
        stage_index(root, files, blobs)
        if hooks:
            message = _pre_commit_hooks(root, plan, tree, message)
        sha = _out(_git(root, "commit-tree", tree, *(["-p", old] if old else []), stdin=message.encode()))
        _git(root, "update-ref", "-m", f"infrarsi apply: {message.splitlines()[0]}", "HEAD", sha, old or ZERO)
    except BaseException:
        _rollback(root, undo)
        raise
    _settle(root, undo)
    if hooks:
        r = _hook(root, "post-commit")
        if r.returncode != 0 or r.stdout.strip():
            say(f"post-commit hook (exit {r.returncode}, the commit stays): {_tail(r.stdout)}")
    return sha, [f.path for f in files]


def hooks_present(repo: Path) -> list[str]:
    """The hooks of :data:`HOOKS` the repository has (``--git-path hooks`` honours core.hooksPath), for the line
    apply prints."""
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-path", "hooks"], capture_output=True, text=True)
    if r.returncode != 0:
        return []
    d = Path(r.stdout.strip())
    d = d if d.is_absolute() else Path(repo) / d  # (not _git: its hooksPath is /dev/null)
    return [h for h in HOOKS if (d / h).is_file() and os.access(d / h, os.X_OK)]


def _hook(root: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """One of the repository's hooks, as git runs it (``git hook run``: core.hooksPath honoured; none: exit 0),
    in the work tree's root, its stdout and stderr together."""
    env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": ":"}
    return subprocess.run(["git", "-c", "core.fsmonitor=false", "-C", str(root), "hook", "run", "--ignore-missing",
                           name, *(["--", *args] if args else [])], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", env=env)


def _tail(text: str, lines: int = 12) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


def _pre_commit_hooks(root: Path, plan: ApplyPlan, tree: str, message: str) -> str:
    """pre-commit, prepare-commit-msg and commit-msg on the staged change; the message as they left it. A hook that
    fails, or one that changes what is staged or written, refuses the commit (ApplyRefused: the caller rolls back)."""
    r = _hook(root, "pre-commit")
    if r.returncode != 0:
        raise ApplyRefused(f"the repository's pre-commit hook refused the commit (exit {r.returncode}): "
                           f"{_tail(r.stdout)}; fix what it says, or skip the hooks with --no-verify")
    moved = [f.path for f in changed_files(plan, root)]
    staged = _out(_git(root, "write-tree"))
    if moved or staged != tree:
        what = f"rewrote {', '.join(moved[:3])}" if moved else "changed what is staged"
        raise ApplyRefused(f"the repository's pre-commit hook {what}: the commit must hold exactly the audited bytes "
                           f"(audit.json lists them); skip the hooks with --no-verify, or exclude "
                           f"{OUT_ROOT}/ from the hook")
    path = Path(_out(_git(root, "rev-parse", "--git-path", "COMMIT_EDITMSG")))
    path = path if path.is_absolute() else root / path
    path.write_text(message)
    for name, args in (("prepare-commit-msg", (str(path), "message")), ("commit-msg", (str(path),))):
        r = _hook(root, name, *args)
        if r.returncode != 0:
            raise ApplyRefused(f"the repository's {name} hook refused the commit (exit {r.returncode}): "
                               f"{_tail(r.stdout)}; fix what it says, or skip the hooks with --no-verify")
    said = path.read_text()
    return said if said.strip() else message


def _tree(root: Path, old: str | None, files: list[FileChange]) -> tuple[str, dict[str, str]]:
    """The new commit's tree, built in a temporary index from the audited bytes, and each path's blob; refused
    when it differs from the plan anywhere (a path's blob or mode, or a path the plan does not name)."""
    blobs = {}
    with tempfile.TemporaryDirectory(prefix="infrarsi-apply-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
        if old:
            _git(root, "read-tree", old, env=env)
        for f in files:
            blobs[f.path] = _out(_git(root, "hash-object", "-w", "--no-filters", "--stdin", stdin=f.content))
            _git(root, "update-index", "--add", "--cacheinfo", f"{_mode(f)},{blobs[f.path]},{f.path}", env=env)
        tree = _out(_git(root, "write-tree", env=env))
    entries = {}
    listed = _git(root, "ls-tree", "-r", "-z", tree, "--", *blobs, env={"GIT_LITERAL_PATHSPECS": "1"})
    for line in listed.stdout.decode().split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, _, blob = meta.split()
            entries[path] = (mode, blob)
    want = {f.path: (_mode(f), blobs[f.path]) for f in files}
    moved = set(_git(root, "diff-tree", "-r", "-z", "--name-only", "--no-renames", old or _empty_tree(root),
                     tree).stdout.decode().split("\0")) - {""}
    if entries != want or moved != set(want):
        raise ApplyRefused(f"the commit git built differs from the audit (paths {sorted(moved ^ set(want))}, entries "
                           f"{sorted(set(entries.items()) ^ set(want.items()))}); nothing was written")
    return tree, blobs


def _empty_tree(root: Path) -> str:
    return _out(_git(root, "hash-object", "-t", "tree", "--stdin", stdin=b""))


def _mode(f: FileChange) -> str:
    return "100755" if f.executable else "100644"


def stage_index(root: Path, files: list[FileChange], blobs: dict[str, str]) -> None:
    """The work tree's index gets the new entries (the blobs the commit holds), as `git add` would have left it."""
    _git(root, "update-index", "--add", *(a for f in files for a in ("--cacheinfo", f"{_mode(f)},{blobs[f.path]},{f.path}")))


# -------------------------------------------------------------------------------- files, no links
def _open_dir(root: Path, parts: Sequence[str], undo: _Undo | None) -> int:
    """A descriptor of ``root/parts`` opened one folder at a time without following a link (created when
    ``undo`` is given and a folder is missing)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, name in enumerate(parts):
            try:
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if undo is None:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                undo.dirs.append("/".join(parts[:i + 1]))
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except OSError as e:
        os.close(fd)
        if isinstance(e, FileNotFoundError):
            raise
        raise ApplyRefused(f"{'/'.join(parts)}: cannot be opened without following a link ({e.strerror}); nothing "
                           f"was kept") from None
    return fd


def _read(root: Path, rel: str) -> tuple[bytes, int] | None:
    """(bytes, mode) of a plain file, never through a link; None when it does not exist."""
    parts = PurePosixPath(rel).parts
    try:
        dfd = _open_dir(root, parts[:-1], None)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symlink
        raise ApplyRefused(f"{rel}: cannot be read without following a link ({e.strerror})") from None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(), os.fstat(fh.fileno()).st_mode


def _put(dfd: int, name: str, data: bytes, mode: int) -> None:
    """Replace ``name`` in the folder ``dfd`` with ``data`` (temp file + fsync + rename + fsync of the folder)."""
    tmp = f".{name}.infrarsi-apply.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    os.fsync(dfd)


def _write(root: Path, f: FileChange, undo: _Undo) -> None:
    """Replace (or create) one file; the file it replaces keeps a second name beside it until the commit is made,
    so an undo puts back the very file (its inode, bytes, mode and times), not a copy."""
    parts = PurePosixPath(f.path).parts
    dfd = _open_dir(root, parts[:-1], undo)
    try:
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1):
            raise ApplyRefused(f"{f.path} changed while apply ran (now a link or not a plain file); nothing was kept")
        perm = stat.S_IMODE(st.st_mode) if st is not None else 0o644
        perm = perm | 0o111 & ((perm & 0o444) >> 2) if f.executable else perm & ~0o111
        keep = None
        if st is not None:
            keep = f".{parts[-1]}.infrarsi-apply.{os.getpid()}.orig"
            os.link(parts[-1], keep, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        undo.files.append((f.path, keep))
        _put(dfd, parts[-1], f.content, perm)
    finally:
        os.close(dfd)


def _each(root: Path, undo: _Undo, fn) -> None:
    """``fn(folder descriptor, name, kept name or None)`` for each file apply wrote, newest first."""
    for rel, keep in reversed(undo.files):
        parts = PurePosixPath(rel).parts
        with contextlib.suppress(OSError, ApplyRefused):
            dfd = _open_dir(root, parts[:-1], None)
            try:
                fn(dfd, parts[-1], keep)
            finally:
                os.close(dfd)


def _settle(root: Path, undo: _Undo) -> None:
    """The commit is made: drop the second names of the files it replaced."""
    _each(root, undo, lambda dfd, name, keep: keep and os.unlink(keep, dir_fd=dfd))


def _rollback(root: Path, undo: _Undo) -> None:
    """Put back what :func:`commit` changed: the index's bytes, then each file, then the folders it made."""
    if undo.index is not None:
        with contextlib.suppress(OSError, GitError):
            _restore_index(root, undo.index)

    def back(dfd: int, name: str, keep: str | None) -> None:
        if keep is None:
            os.unlink(name, dir_fd=dfd)
        else:
            os.replace(keep, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)

    _each(root, undo, back)
    for rel in reversed(undo.dirs):
        with contextlib.suppress(OSError):
            os.rmdir(Path(root) / rel)


def _restore_index(root: Path, data: bytes) -> None:
    """The index back to ``data``, under git's own lock protocol (index.lock taken, written, renamed)."""
    index, lock = _index(root), index_lock(root)
    if index.exists() and index.read_bytes() == data:
        return
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # someone else holds it: leave it to them
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if data:
            os.replace(lock, index)
        else:  # there was no index before
            os.unlink(lock)
            index.unlink(missing_ok=True)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        raise
