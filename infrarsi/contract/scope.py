"""The editable scope, enforced from ``init`` on: which files a patch may name, where apply may write,
and what a trial may touch.

- :func:`scope_problems` (``init``): every kernel candidate the contract names (``scope.knobs.kernel_<op>``
  and ``baseline.kernel_<op>``) is a relative path without ``..`` that a ``scope.files`` glob takes, exists,
  and still lies inside the repository and the scope once every symlink is resolved; a ``PATH@VARIANT`` value
  (infrarsi/candidate.py) is held to that by its path, and its variant must be one the file declares.
- ``apply`` holds its destinations to the scope and to the work tree itself (no link followed): apply/transaction.py.
- :class:`TreeGuard` (trials and kernel verification that run *without* isolation, see execute/isolation.py:
  an isolated one cannot write the repository at all): a snapshot of the repository (path, size, mtime) before
  and after; anything created, changed or deleted outside the allowed folders fails the trial, except the files
  the runner itself holds open for writing (its own ``> tune.log``). Caches Python writes by itself
  (``__pycache__``) and the tool's folders (``.git``, ``.infrarsi``, virtualenvs) are not watched. This sees
  writes into the repository only; that is why trials run isolated wherever the machine allows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from ..candidate import CandidateError, parse_candidate, split_spec
from ..knobs.knob import value_problem
from .model import Contract
from .place import repository_root  # noqa: F401 -- its old home, still imported from here by execute/ and stages/

KERNEL_PREFIX = "kernel_"
REFERENCE = "reference"
# Folders never watched: version control, run directories, environments, bytecode caches.
UNWATCHED = frozenset({".git", ".hg", ".infrarsi", ".venv", "venv", "__pycache__", "node_modules", ".pytest_cache",
                       ".mypy_cache", ".ruff_cache"})


def glob_of(rel: str, globs: Sequence[str]) -> str | None:
    """The first glob that takes a normalized relative path (None for absolute or ``..`` paths)."""
    p = PurePosixPath(rel.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return next((g for g in globs if fnmatchcase(p.as_posix(), g)), None)


def glob_within(narrow: str, wide: str) -> bool:
    """Whether every path ``narrow`` takes is one ``wide`` takes too (conservative: False when it cannot tell).
    Sound for a ``wide`` made of literal text and ``*`` only: ``wide`` then matches ``narrow``'s own text exactly
    when each wildcard of ``narrow`` falls inside one of ``wide``'s ``*`` (which takes any text, ``/`` included)."""
    if narrow == wide:
        return True
    if any(c in wide for c in "?[]"):
        return False
    return fnmatchcase(narrow, wide)


def named_kernels(contract: Contract) -> list[tuple[str, str]]:
    """(where, value) for every kernel candidate the contract names (``PATH`` or ``PATH@VARIANT``)."""
    out = []
    for k, dom in contract.scope.knobs.items():
        if k.startswith(KERNEL_PREFIX):
            out += [(f"scope.knobs.{k}", v) for v in dom if v != REFERENCE]
    for k, v in contract.baseline.items():
        if k.startswith(KERNEL_PREFIX) and v != REFERENCE:
            out.append((f"baseline.{k}", v))
    return out


def scope_problems(contract: Contract, roots: Iterable[Path]) -> list[str]:
    """Why the kernel files a contract names leave its scope ([] when none does). ``roots``: where relative
    paths are looked up (the repository first); the root a file is found in is the one it must stay in."""
    roots = [Path(r).resolve() for r in roots]
    globs = contract.scope.files
    out = []
    for where, value in named_kernels(contract):
        if not isinstance(value, str):
            out.append(f"{where} names {value!r}; a kernel candidate is a path (text) relative to the repository")
            continue
        unsafe = value_problem(where, "categorical", value)
        if unsafe:
            out.append(unsafe)
            continue
        rel, variant = split_spec(value)  # the scope takes the file; its variants share it
        if glob_of(rel, globs) is None:
            out.append(f"{where} names {rel!r}, which scope.files {globs} does not take (or it is absolute or has "
                       f"'..'); add a glob for it to [scope] files, or move the file inside the scope")
            continue
        root = next((r for r in roots if (r / rel).is_file()), None)
        if root is None:
            out.append(f"{where} names {rel!r}, which does not exist under {roots[0]}; fix the path (relative to the "
                       f"repository root)")
            continue
        real = (root / rel).resolve()
        try:
            real_rel = real.relative_to(root).as_posix()
        except ValueError:
            out.append(f"{where} names {rel!r}, a symlink that leaves the repository ({real}); name the real file")
            continue
        if glob_of(real_rel, globs) is None:
            out.append(f"{where} names {rel!r}, which resolves to {real_rel!r} outside scope.files {globs}; "
                       f"name the real file, inside the scope")
            continue
        if variant is not None:
            try:
                parse_candidate(value, root=root)
            except CandidateError as e:
                out.append(f"{where}: {e}")
    return out


class TreeGuard:
    """Snapshots of a folder tree (path -> (size, mtime_ns, inode)); ``changes`` lists what differs outside
    the ``allowed`` folders."""

    def __init__(self, root: Path, *, allowed: Iterable[Path] = ()) -> None:
        self.root = Path(root).resolve()
        self.allowed = [Path(a).resolve() for a in allowed]

    MAX_FILES = 50_000  # a tree bigger than this (a home folder, not a repository) is not watched

    def snapshot(self) -> dict[str, tuple[int, int, int]]:
        out: dict[str, tuple[int, int, int]] = {}
        allowed = {str(a) for a in self.allowed}
        stack = [self.root]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if e.name in UNWATCHED or e.path in allowed:
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
                        continue
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.endswith((".pyc", ".pyo")):
                    continue
                out[os.path.relpath(e.path, self.root)] = (st.st_size, st.st_mtime_ns, st.st_ino)
                if len(out) > self.MAX_FILES:
                    return {}
        return out

    def changes(self, before: dict[str, tuple[int, int, int]], after: dict[str, Any] | None = None, *,
                ignore: Iterable[str] = ()) -> list[str]:
        """Lines naming what was created, changed or deleted between two snapshots (sorted); ``ignore``: relative
        paths that may change (:func:`open_for_writing`)."""
        after = self.snapshot() if after is None else after
        skip = set(ignore)
        out = []
        for rel in sorted(set(before) | set(after)):
            a, b = before.get(rel), after.get(rel)
            if a == b or rel in skip:
                continue
            what = "created" if a is None else "deleted" if b is None else "changed"
            out.append(f"{what} {rel}")
        return out


def open_for_writing(root: Path) -> set[str]:
    """Files under ``root`` (relative) that this process holds open for writing: its own output, such as
    ``infrarsi tune ... > tune.log`` in the repository. They change while a trial runs, by this process's hand."""
    root = Path(root).resolve()
    out = set()
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = int(next(ln for ln in f if ln.startswith("flags:")).split()[1], 8)
        except (OSError, StopIteration, ValueError):
            continue
        if not flags & (os.O_WRONLY | os.O_RDWR) or not target.startswith("/"):
            continue
        try:
            out.add(Path(target).relative_to(root).as_posix())
        except ValueError:
            continue
    return out
