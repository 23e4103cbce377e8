"""Where a contract's launch is and where it runs: the one rule every stage uses.

- ``workload.launch`` is relative to the contract's folder (``folder``); a path that is not there but is under
  the working directory is taken from there (``infrarsi init`` accepted both).
- ``workload.cwd`` is the launch's working directory, relative to the contract's folder; default: the git work
  tree that holds the contract (people run a launch from the repository root), else the contract's folder. Relative
  paths inside the launch (``CONFIG_FILE=./train/job.toml``, ``$PWD``) resolve against it, as the shell would.

``folder`` None (a contract not read from a file): both are relative to this process's working directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .model import Workload


def repository_root(start: Path | None = None) -> Path:
    """The git work tree that holds ``start`` (default: the working directory), else ``start`` itself."""
    start = Path(start or Path.cwd()).resolve()
    try:
        out = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip()).resolve()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return start


def launch_places(workload: Workload, folder: str | Path | None) -> list[Path]:
    """Where ``workload.launch`` may be, in the order looked at (the contract's folder first)."""
    p = Path(workload.launch).expanduser()
    if p.is_absolute():
        return [p]
    return [Path(folder) / p, Path.cwd() / p] if folder is not None else [Path.cwd() / p]


def launch_path(workload: Workload, folder: str | Path | None) -> Path:
    """The launch file: the first of :func:`launch_places` that exists, else the first (for the error message)."""
    places = launch_places(workload, folder)
    return next((q for q in places if q.exists()), places[0])


_ROOTS: dict[Path, Path] = {}  # folder -> its repository root (one git call per folder and process)


def launch_cwd(workload: Workload, folder: str | Path | None) -> Path:
    """The folder the launch runs from (absolute)."""
    if folder is None:
        return Path(workload.cwd or ".").expanduser().resolve()
    base = Path(folder).resolve()
    if workload.cwd:
        return (base / Path(workload.cwd).expanduser()).resolve()
    if base not in _ROOTS:
        _ROOTS[base] = repository_root(base)
    return _ROOTS[base]
