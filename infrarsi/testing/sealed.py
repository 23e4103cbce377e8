"""Edits made by someone who holds the seal key: for tests of the checks that stand behind the seals.

The seal chain (:mod:`infrarsi.rundir.chain`) refuses any edit of a record made without the key. The
audit's own checks (numbers that do not follow from their trials, a verification under another lock)
are a second line; testing them needs a record that is wrong *and* sealed, which only a key holder can
write. These helpers are that key holder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..rundir import chain
from ..rundir import RunDir


def rewrite_sealed(run_dir: str | Path, name: str, text: str) -> None:
    """Replace ``run_dir/name`` with ``text``, sealed into the chain as infrarsi would."""
    RunDir(run_dir).write(Path(run_dir) / name, text)


def reseal_lock(run_dir: str | Path, body: dict[str, Any]) -> None:
    """Write a lock body with a valid seal (the records made under it keep their own lock hashes)."""
    RunDir(run_dir).write_lock(chain.seal_lock({k: v for k, v in body.items() if k != "seal"}))
