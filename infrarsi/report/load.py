"""Everything a finished run left on disk, read once: the lock, noise, trials, search and verification.

Nothing here computes a number the report prints; it only reads. Missing later-stage files are
``None`` / ``{}`` (a report of a run stopped after doctor still renders what there is).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import LOCK_NAME, Contract, ContractError, load_locked
from ..doctor.baseline import load_noise
from ..doctor.noise import NoiseProfile
from ..execute.record import RunRecord
from ..execute.trial import Trial

SEARCH_JSON = "search.json"
VERIFICATION_JSON = "verification.json"


class RunDataError(ValueError):
    """A run directory that cannot be reported or applied; the message names the file and the fix."""


@dataclass(frozen=True)
class RunData:
    run_dir: Path
    contract: Contract
    contract_sha256: str  # the lock's hash (load_locked checked the contract file still matches it)
    contract_path: Path
    locked_at: float  # unix seconds
    noise: NoiseProfile | None
    trials: list[Trial]  # every recorded trial, sorted by id
    search: dict[str, Any]  # search.json, {} before `infrarsi run`
    verification: dict[str, Any] | None  # verification.json, None before re-verification

    @property
    def by_id(self) -> dict[int, Trial]:
        return {t.id: t for t in self.trials}

    def source_roots(self) -> list[Path]:
        """Where relative kernel paths are looked up: the contract's folder, its parent (a contract in
        ``contracts/`` names files relative to the repository root), then the working directory."""
        c = self.contract_path.resolve().parent
        return list(dict.fromkeys([c, c.parent, Path.cwd().resolve()]))

    def resolve_source(self, rel: str) -> Path | None:
        """The file a setting's relative path names, or None when no root holds it."""
        p = Path(rel)
        if p.is_absolute():
            return p if p.is_file() else None
        for root in self.source_roots():
            if (root / p).is_file():
                return root / p
        return None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise RunDataError(f"{path}: not valid JSON ({e}); the stage that writes it was interrupted -- rerun it") from None


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory. Raises ContractError (the contract changed since the lock) or RunDataError."""
    run = Path(run_dir)
    if not run.is_dir():
        raise RunDataError(f"run directory {run} does not exist; pass --run-dir (see `infrarsi init`)")
    contract = load_locked(run)  # raises ContractError naming what changed
    lock = json.loads((run / LOCK_NAME).read_text())
    return RunData(
        run_dir=run,
        contract=contract,
        contract_sha256=lock["sha256"],
        contract_path=Path(lock.get("contract_path", run / LOCK_NAME)),
        locked_at=float(lock.get("locked_at", 0.0)),
        noise=load_noise(run),
        trials=RunRecord(run).trials(),
        search=_json(run / SEARCH_JSON) or {},
        verification=_json(run / VERIFICATION_JSON),
    )


__all__ = ["ContractError", "RunData", "RunDataError", "load_run"]
