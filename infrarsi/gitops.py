"""The few git operations ``infrarsi apply`` needs, run with the user's git in the user's tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class GitError(RuntimeError):
    """A git command failed; the message holds the command and git's own words."""


def git(repo: Path, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, input=stdin)
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise GitError(f"`git {' '.join(args[:3])}` failed in {repo}: {msg[-1] if msg else f'exit {r.returncode}'}")
    return r


def toplevel(repo: Path) -> Path | None:
    """The work tree's root, or None when ``repo`` is not inside a git work tree."""
    if not Path(repo).is_dir():
        return None
    r = git(repo, "rev-parse", "--show-toplevel", check=False)
    return Path(r.stdout.strip()) if r.returncode == 0 else None


def dirty(repo: Path) -> list[str]:
    """``git status --porcelain`` lines: modified, staged and untracked files (empty = clean)."""
    return [ln for ln in git(repo, "status", "--porcelain", "--untracked-files=all").stdout.splitlines() if ln.strip()]


def commit(repo: Path, paths: list[str], message: str) -> str:
    """Stage exactly ``paths`` and commit them with ``message``; returns the new commit's sha."""
    git(repo, "add", "--", *paths)
    git(repo, "commit", "--quiet", "--file", "-", stdin=message)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def exclude(path: Path) -> tuple[Path, str] | None:
    """Keep ``path`` (the run directory) out of ``git status`` of the work tree it sits in: one line ``/rel/path/``
    in that repository's ``info/exclude`` (local to the clone, never committed, unlike .gitignore). Returns (the
    exclude file, the line) when it added the line; None when ``path`` is in no work tree or is listed already."""
    path = Path(path).resolve()
    if not path.is_dir():
        return None
    root = toplevel(path)
    if root is None:
        return None
    rel = path.relative_to(root.resolve()).as_posix()
    if rel == ".":
        return None  # the run directory is the repository's root: nothing to leave out
    line = f"/{rel}/"
    r = git(root, "rev-parse", "--git-path", "info/exclude", check=False)
    if r.returncode != 0:
        return None
    target = Path(r.stdout.strip())
    target = target if target.is_absolute() else root / target
    have = target.read_text().splitlines() if target.exists() else []
    if line in have:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "a") as f:
        f.write(("\n" if have and have[-1] else "") + "# the InfraRSI run directory: its records are not a change\n"
                + line + "\n")
    return target, line
