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
