"""Bytecode for what an isolated trial imports, compiled once by the harness, before the trial.

A trial sees the Python environment and the repository read-only (isolation.py), so Python inside it can never
write the ``__pycache__/*.pyc`` it looks for: a module whose bytecode is missing or stale is compiled from source
in every process of every trial. Measured here (scripts/bench_prune.py startup; docs/isolation.md): ``import
torch, datasets, torchtitan.train`` in the box took 6-13 s with the environment's bytecode and 32-33 s without.
Environments come without it: ``uv pip install`` (no ``--compile-bytecode``), ``pip install --no-compile``, an
image built with PYTHONDONTWRITEBYTECODE, a fresh checkout of Megatron-LM or torchtitan used from its source.

So before its first isolated trial the executor compiles, as Python would on an import outside the box, the
missing or stale bytecode of every Python source under the folders a trial imports from (the interpreter's
environment and sys.path, PYTHONPATH, the repository): in place, next to the source (``__pycache__``), for the
runner's interpreter (the one ``python`` and ``torchrun`` mean in a launch). Only the harness writes it, from the
sources the trial reads, before the trial; the trial reads it as it reads the sources (read-only). In a git work
tree only where git ignores ``__pycache__`` (the tree stays as clean as ``git status`` and ``apply`` see it);
in the user's own folders (the repository and the working directory) only there: a project that is not a git work
tree is left as the user left it; nowhere the runner cannot write. A file that does not compile is left to fail in the trial as it would anyway.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import py_compile
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Folders never walked: what no training process imports from (test suites: the standard library's own is ~800
# files), or what a trial is not shown (run directories: isolation.py)
SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".infrarsi", "node_modules", ".pytest_cache", ".mypy_cache",
                       "test", "tests"})
MAX_FILES = 200_000  # sources looked at per call at most (a tree of generated files ends the walk there)
HEADER = 16  # a .pyc's header: magic (4), flags (4), source mtime (4), source size (4); importlib's layout


@dataclass(frozen=True, kw_only=True)
class Compiled:
    """What :func:`precompile` did: sources seen, bytecode written, skipped (unwritable, or not ignored by git),
    failed to compile, and its seconds."""
    sources: int
    written: int
    skipped: int
    failed: int
    seconds: float

    def line(self) -> str:
        return (f"bytecode: {self.sources} sources, {self.written} compiled, {self.skipped} left (not writable or "
                f"not ignored by git), {self.failed} not compilable, in {self.seconds:.1f} s")


def fresh(source: Path) -> bool:
    """True when ``source`` has bytecode Python would use as it is: its .pyc for this interpreter exists and, when
    checked by timestamp (flags 0), records the source's mtime and size (hash-based bytecode counts as present)."""
    cached = importlib.util.cache_from_source(str(source))
    try:
        with open(cached, "rb") as f:
            head = f.read(HEADER)
        st = os.stat(source)
    except OSError:
        return False
    if len(head) < HEADER or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") != 0:
        return True
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)


def sources(roots: Iterable[Path], *, max_files: int = MAX_FILES) -> list[Path]:
    """The ``.py`` files under ``roots`` (each a folder or a file), links not followed, SKIP_DIRS and run
    directories not walked (nor a root inside one: what a trial wrote is never read here); each once."""
    from .isolation import RUN_MARKERS, is_run_dir

    out: dict[str, None] = {}
    roots = [Path(r) for r in dict.fromkeys(roots)]
    stack = [str(r) for r in roots if not any(is_run_dir(a) or a.name in SKIP_DIRS for a in (r, *r.parents))]
    seen: set[str] = set()
    while stack and len(out) < max_files:
        d = stack.pop()
        if d in seen:
            continue
        seen.add(d)
        if d.endswith(".py") and os.path.isfile(d):
            out[d] = None
            continue
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        if any(e.name in RUN_MARKERS for e in entries):
            continue
        for e in entries:
            try:
                if e.name.endswith(".py") and e.is_file(follow_symlinks=False):
                    out[e.path] = None
                elif e.name not in SKIP_DIRS and e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
            except OSError:
                continue
    return [Path(p) for p in list(out)[:max_files]]


@functools.lru_cache(maxsize=4096)
def _work_tree(folder: str) -> str | None:
    """The git work tree ``folder`` sits in (its nearest folder holding a ``.git``), or None."""
    if os.path.lexists(os.path.join(folder, ".git")):
        return folder
    parent = os.path.dirname(folder)
    return None if parent == folder else _work_tree(parent)


def _ignored(tree: str, paths: list[str]) -> set[str]:
    """Of ``paths`` (in the work tree ``tree``), those git ignores (``git check-ignore --stdin``)."""
    try:
        out = subprocess.run(["git", "-C", tree, "check-ignore", "--no-index", "--stdin", "-z"],
                             input="\0".join(paths) + "\0", capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {p for p in out.stdout.split("\0") if p}


def import_roots(env: Mapping[str, str], *, repository: Path, cwd: Path) -> list[Path]:
    """Where a trial's Python imports from: this interpreter's sys.path (its environment, what .pth files add),
    the launch's PYTHONPATH, the repository and the working directory."""
    paths = [*sys.path, *env.get("PYTHONPATH", "").split(os.pathsep), str(repository), str(cwd)]
    return [Path(p) for p in dict.fromkeys(paths) if p and os.path.isabs(p)]


def _under(path: Path, folders: tuple[Path, ...]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def precompile(roots: Iterable[Path], *, own: Iterable[Path] = (), max_files: int = MAX_FILES) -> Compiled:
    """Compile the missing or stale bytecode of every source under ``roots`` (see the module docstring). Under
    ``own`` (the user's repository and working directory) only where a git work tree ignores it."""
    t0 = time.perf_counter()
    own = tuple(Path(os.path.abspath(f)) for f in own)
    found = sources(roots, max_files=max_files)
    stale = [s for s in found if not fresh(s)]
    by_tree: dict[str | None, list[str]] = {}
    for s in stale:
        by_tree.setdefault(_work_tree(str(s.parent)), []).append(importlib.util.cache_from_source(str(s)))
    allowed = {c for c in by_tree.pop(None, []) if not _under(Path(c), own)}
    for tree, cached in by_tree.items():
        allowed |= _ignored(tree, cached)
    written = skipped = failed = 0
    for s in stale:
        cached = importlib.util.cache_from_source(str(s))
        parent = os.path.dirname(cached)
        if cached not in allowed or not os.access(os.path.dirname(parent), os.W_OK) or \
                (os.path.isdir(parent) and not os.access(parent, os.W_OK)):
            skipped += 1
            continue
        try:
            with warnings.catch_warnings():  # a source's SyntaxWarnings are its trial's to print, not the runner's
                warnings.simplefilter("ignore")
                py_compile.compile(str(s), cfile=cached, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            written += 1
        except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):
            failed += 1
    return Compiled(sources=len(found), written=written, skipped=skipped, failed=failed,
                    seconds=time.perf_counter() - t0)


_done: set[Path] = set()  # roots compiled by this process: each once (a long run's sources do not change)
_lock = threading.Lock()


def ensure(roots: Iterable[Path], *, own: Iterable[Path] = ()) -> Compiled | None:
    """:func:`precompile` of the ``roots`` this process has not compiled yet (None: none left); one at a time."""
    with _lock:
        todo = [Path(os.path.abspath(r)) for r in dict.fromkeys(roots) if Path(r).is_absolute()]
        todo = [r for r in todo if r not in _done and r.exists()]
        if not todo:
            return None
        out = precompile(todo, own=own)
        _done.update(todo)
        return out
