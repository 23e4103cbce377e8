"""Everything a finished run left on disk, read once through RunDir: the lock, noise, trials, search and
verification (typed records, see rundir/records.py).

Nothing here computes a number the report prints; it only reads. Missing later-stage records are
``None`` / empty (a report of a run stopped after doctor still renders what there is).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..contract import Contract, ContractError, load_locked, read_lock
from ..doctor.noise import NoiseProfile
from ..execute.record import RunRecord
from ..trial import Trial
from ..rundir import RunDir, SearchRecord, Verification


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
    search: SearchRecord  # empty before `infrarsi run`
    verification: Verification | None  # None before re-verification

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


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory. Raises ContractError (the contract changed since the lock, a record does not
    match its seal), RunDataError, or RecordError (a record that cannot be read)."""
    run = RunDir(run_dir)
    if not run.path.is_dir():
        raise RunDataError(f"run directory {run.path} does not exist; pass --run-dir (see `infrarsi init`)")
    contract = load_locked(run.path)  # raises ContractError naming what changed
    lock = read_lock(run.path)
    return RunData(
        run_dir=run.path,
        contract=contract,
        contract_sha256=lock.sha256,
        contract_path=Path(lock.contract_path),
        locked_at=lock.locked_at,
        noise=run.noise(),
        trials=RunRecord(run.path).trials(),
        search=run.search() or SearchRecord(),
        verification=run.verification(),
    )


__all__ = ["ContractError", "RunData", "RunDataError", "load_run"]
