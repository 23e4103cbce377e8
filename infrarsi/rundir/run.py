"""RunDir: the one owner of a run directory's records.

    run = RunDir(".infrarsi/run")
    run.noise()                      # NoiseProfile | None
    run.write_verification(body)     # validated, sealed into the chain, written atomically
    run.problems()                   # every record that does not match its seal (chain.py)

Every record is a typed model (records.py; the trial and the noise profile are their packages' models). A read
returns None when the record does not exist yet and raises ``RecordError`` naming the file when it exists but
cannot be read (it is never replaced by a fresh one). Every write but the lock's goes through the seal chain:
no module outside this package names a file of the run directory or writes one.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from ..errors import ContractError, unreadable
from ..io import atomic_write
from ..trial.proposal import Proposal
from . import chain, names
from .records import (ClockRecord, LaunchRecord, LockRecord, NoiseProfile, SearchRecord, Stages, Verification,
                      VerificationProgress)

if TYPE_CHECKING:
    from ..trial.record import Trial

M = TypeVar("M", bound=BaseModel)


class RunDir:
    """A run directory (``.infrarsi/<run>``) and every record in it."""

    LOCK = names.LOCK
    SEALS = names.SEALS
    RUNNER_LOCK = names.RUNNER_LOCK
    NOISE = names.NOISE
    SEARCH = names.SEARCH
    PROGRESS = names.PROGRESS
    VERIFICATION = names.VERIFICATION
    STAGES = names.STAGES
    PENDING = names.PENDING
    VERDICTS = names.VERDICTS
    REPORT_MD = names.REPORT_MD
    REPORT_HTML = names.REPORT_HTML
    REPORT_FILES = names.REPORT_FILES

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    @classmethod
    def of_trial_dir(cls, trial_dir: str | Path) -> RunDir | None:
        """The run a trial directory (``RUN/trials/<n>``) belongs to; None for a directory outside any run."""
        d = Path(trial_dir)
        return cls(d.parent.parent) if d.parent.name == names.TRIALS and d.name.isdigit() else None

    # ------------------------------------------------------------------------------------ paths
    def file(self, name: str) -> Path:
        """Where the record ``name`` (one of the class's names) lives."""
        return self.path / name

    @property
    def trials_dir(self) -> Path:
        return self.path / names.TRIALS

    @property
    def llm_dir(self) -> Path:
        """Where LLM exchanges are kept (``llm/<n>.json``)."""
        return self.path / names.LLM

    def trial_dir(self, trial_id: int) -> Path:
        return self.trials_dir / str(trial_id)

    def trial_file(self, trial_id: int, name: str) -> Path:
        return self.trial_dir(trial_id) / name

    def stdout(self, trial_id: int) -> Path:
        return self.trial_file(trial_id, names.STDOUT)

    def trial_ids(self) -> list[int]:
        if not self.trials_dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.trials_dir.iterdir() if p.name.isdigit())

    # ------------------------------------------------------------------------------------ reading
    def _read(self, path: Path, model: type[M]) -> M | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return model.model_validate_json(data)
        except ValueError as e:  # pydantic ValidationError (bad JSON included), bad UTF-8
            raise unreadable(path, e) from None

    @staticmethod
    def _proposal(path: Path, body: Any) -> Proposal:
        try:
            return Proposal.read(body)
        except ValueError as e:  # pydantic's ValidationError: no kind, a field of the wrong type
            raise unreadable(path, e) from None

    def _read_json(self, path: Path) -> dict[str, Any] | None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except UnicodeDecodeError as e:
            raise unreadable(path, e) from None
        try:
            body = json.loads(text)
        except ValueError as e:
            raise unreadable(path, e) from None
        if not isinstance(body, dict):
            from ..errors import RecordError

            raise RecordError(path, f"holds a JSON {type(body).__name__}, not an object")
        return body

    # ------------------------------------------------------------------------------------ writing
    def write(self, path: Path, data: str | bytes | None) -> None:
        """Write (``None``: remove) a record of this run, sealed into its chain (unsealed before the lock). A disk
        that is full (a trial filled it) gives the run's reserve back first (:meth:`hold_reserve`), then the write is
        tried again: a record is never lost for want of room."""
        body = data.encode() if isinstance(data, str) else data
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            chain.write(self.path, path, body)
        except OSError as e:
            if e.errno != errno.ENOSPC or not self.release_reserve():
                raise
            path.parent.mkdir(parents=True, exist_ok=True)
            chain.write(self.path, path, body)

    def hold_reserve(self, size: int) -> bool:
        """Allocate ``size`` bytes of the disk to ``runner.reserve`` (real blocks, not a sparse file), which no trial
        can take and :meth:`write` gives back when the disk is full; False where the disk has no room for it."""
        p = self.file(names.RESERVE)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, size)
            return True
        except OSError:
            os.ftruncate(fd, 0)
            return False
        finally:
            os.close(fd)

    def release_reserve(self) -> int:
        """Give the reserve's blocks back to the disk; the bytes freed (0 when none were held)."""
        p = self.file(names.RESERVE)
        try:
            size = p.lstat().st_blocks * 512
            p.unlink()
        except OSError:
            return 0
        return size

    def _write_model(self, path: Path, body: BaseModel) -> None:
        self.write(path, body.model_dump_json(indent=2, by_alias=True))

    # --------------------------------------------------------------------------------------- lock
    def has_lock(self) -> bool:
        return self.file(names.LOCK).is_file()

    def lock_bytes(self) -> bytes | None:
        try:
            return self.file(names.LOCK).read_bytes()
        except FileNotFoundError:
            return None

    def lock(self) -> LockRecord | None:
        """The lock, typed (None before `infrarsi init`); unchecked: contract.load_locked checks its seal and hashes,
        and refuses one that does not read (ContractError naming it)."""
        if not self.has_lock():
            return None
        return self.read_lock()

    def read_lock(self) -> LockRecord:
        """The lock, typed and unchecked; ContractError (naming the file and the fix) for one that does not read."""
        try:
            return LockRecord.model_validate(self.lock_body())
        except ValueError as e:  # pydantic's ValidationError: a field of the wrong type
            raise ContractError(f"{self.file(names.LOCK)} is not a contract lock ({' '.join(str(e).split())[:160]}); "
                                f"it was left untouched: restore it, or start a new run with `infrarsi init CONTRACT "
                                f"--run-dir NEW_DIR`") from None

    def lock_body(self) -> dict[str, Any]:
        """The lock's JSON body; a lock that is not one (truncated, random bytes) is refused, never rewritten."""
        lock = self.file(names.LOCK)
        try:
            body = json.loads(self.lock_bytes() or b"")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise ContractError(f"{lock} is not a readable contract lock ({type(e).__name__}: "
                                f"{' '.join(str(e).split())[:120]}); it was left untouched: restore it, or start a new "
                                f"run with `infrarsi init CONTRACT --run-dir NEW_DIR`") from None
        if not isinstance(body, dict) or not {"sha256", "contract", "contract_path"} <= set(body):
            raise ContractError(f"{lock} is not a contract lock (it lacks sha256/contract/contract_path); it was left "
                                f"untouched: restore it, or start a new run with `infrarsi init CONTRACT --run-dir "
                                f"NEW_DIR`")
        return body

    def write_lock(self, body: Mapping[str, Any]) -> Path:
        """The lock, sealed by its own HMAC (contract/lock.py builds it); not part of the chain it anchors."""
        self.path.mkdir(parents=True, exist_ok=True)
        p = self.file(names.LOCK)
        atomic_write(p, json.dumps(dict(body), indent=2, sort_keys=True))
        chain.prune_heads()
        return p

    # ------------------------------------------------------------------------------ run records
    def noise(self) -> NoiseProfile | None:
    
        return self._read(self.file(names.NOISE), NoiseProfile)

    def write_noise(self, noise: NoiseProfile) -> None:
        self.write(self.file(names.NOISE), json.dumps(noise.model_dump(mode="json"), indent=2))

    def search(self) -> SearchRecord | None:
        return self._read(self.file(names.SEARCH), SearchRecord)

    def write_search(self, body: SearchRecord | Mapping[str, Any]) -> SearchRecord:
        rec = body if isinstance(body, SearchRecord) else SearchRecord.model_validate(json.loads(json.dumps(body, default=str)))
        self._write_model(self.file(names.SEARCH), rec)
        return rec

    def progress(self) -> VerificationProgress:
        return self._read(self.file(names.PROGRESS), VerificationProgress) or VerificationProgress()

    def write_progress(self, body: VerificationProgress) -> None:
        self._write_model(self.file(names.PROGRESS), body)

    def verification(self) -> Verification | None:
        return self._read(self.file(names.VERIFICATION), Verification)

    def write_verification(self, body: Verification | Mapping[str, Any]) -> Verification:
        rec = body if isinstance(body, Verification) else Verification.model_validate(body)
        self._write_model(self.file(names.VERIFICATION), rec)
        return rec

    def stages(self) -> Stages:
        return self._read(self.file(names.STAGES), Stages) or Stages()

    def write_stages(self, body: Stages) -> None:
        self._write_model(self.file(names.STAGES), body)

    def pending(self) -> dict[str, Proposal]:
        """Why each setting of the batch in flight was proposed, by setting key."""
        path = self.file(names.PENDING)
        return {k: self._proposal(path, v) for k, v in (self._read_json(path) or {}).items()}

    def write_pending(self, whys: Mapping[str, Proposal]) -> None:
        self.write(self.file(names.PENDING), json.dumps({k: v.to_dict() for k, v in whys.items()}, indent=2,
                                                         sort_keys=True, default=str))

    # ------------------------------------------------------------------------ kernel verdicts
    @property
    def verdicts_path(self) -> Path:
        return self.file(names.VERDICTS)

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """Resolved candidate value (PATH or PATH@VARIANT) -> its verdict entry (kernels/verdicts.py owns the entries'
        meaning)."""
        return self._read_json(self.verdicts_path) or {}

    def write_verdicts(self, body: Mapping[str, Any]) -> None:
        self.write(self.verdicts_path, json.dumps(dict(body), indent=1, sort_keys=True))

    def verdict_problem(self) -> str | None:
        """Why the verdict file does not match the run's seals (it, or the chain), or None."""
        try:
            probs = chain.problems(self.path)
        except chain.SealError as e:
            return str(e)
        return next((p for p in probs if p.startswith((names.VERDICTS, names.SEALS))), None)

    # -------------------------------------------------------------------------------- trials
    def trial(self, trial_id: int) -> Trial | None:
        from ..trial.record import Trial

        return self._read(self.trial_file(trial_id, names.TRIAL), Trial)

    def write_trial(self, trial: Trial) -> None:
        self.write(self.trial_file(trial.id, names.TRIAL), trial.model_dump_json(indent=2))

    def launch(self, trial_id: int) -> LaunchRecord | None:
        return self._read(self.trial_file(trial_id, names.LAUNCH), LaunchRecord)

    def write_launch(self, trial_id: int, rec: LaunchRecord) -> None:
        self.write(self.trial_file(trial_id, names.LAUNCH), rec.model_dump_json(indent=2))

    def write_command(self, trial_id: int, argv: list[str]) -> None:
        self.write(self.trial_file(trial_id, names.COMMAND), shlex.join(argv) + "\n")

    def write_env(self, trial_id: int, env: Mapping[str, str]) -> None:
        self.write(self.trial_file(trial_id, names.ENV), json.dumps(dict(env), indent=2, sort_keys=True))

    def proposal(self, trial_id: int) -> Proposal | None:
        """Why the tuner proposed trial ``trial_id`` (trial/proposal.py), None when it was not recorded."""
        path = self.trial_file(trial_id, names.PROPOSAL)
        why = self._read_json(path)
        return None if why is None else self._proposal(path, why)

    def write_proposal(self, trial_id: int, why: Proposal) -> None:
        self.write(self.trial_file(trial_id, names.PROPOSAL),
                   json.dumps(why.to_dict(), indent=2, sort_keys=True, default=str))

    @staticmethod
    def clock_at(trial_dir: str | Path) -> ClockRecord | None:
        """The harness's clock of the trial in ``trial_dir`` (any folder: a bare executor test's too)."""
        p = Path(trial_dir) / names.CLOCK
        try:
            return ClockRecord.model_validate_json(p.read_bytes())
        except (FileNotFoundError, ValueError):
            return None

    @staticmethod
    def write_clock_at(trial_dir: str | Path, body: ClockRecord | Mapping[str, Any]) -> None:
        """Write the clock into ``trial_dir``; sealed into its run's chain when it is a locked run's trial."""
        d = Path(trial_dir)
        rec = body if isinstance(body, ClockRecord) else ClockRecord.model_validate(dict(body))
        run = RunDir.of_trial_dir(d) or RunDir(d.parent.parent)  # a bare folder: no lock there, written unsealed
        run.write(d / names.CLOCK, rec.model_dump_json())

    # -------------------------------------------------------------------------------- seals
    def problems(self) -> list[str]:
        """Every record that does not match its seal, first first ([] when all do)."""
        return chain.problems(self.path)

    def settled_problems(self) -> list[str]:
        return chain.settled_problems(self.path)

    def verify(self) -> None:
        """Raise SealError naming the first record that does not match its seal."""
        chain.verify_run(self.path)
