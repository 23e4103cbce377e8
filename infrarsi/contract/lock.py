"""contract.lock: the normalized contract and its sha256, written by `infrarsi init`.

Every later stage calls :func:`load_locked`, which re-reads the contract file, normalizes it again and
refuses to go on when the hash differs, naming what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..io import atomic_write
from .model import Contract, ContractError, load_contract

LOCK_NAME = "contract.lock"


def normalized(contract: Contract) -> dict[str, Any]:
    return json.loads(json.dumps(contract.model_dump(mode="json"), sort_keys=True))


def contract_hash(contract: Contract) -> str:
    return hashlib.sha256(json.dumps(normalized(contract), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_lock(contract_path: str | Path, run_dir: str | Path) -> tuple[Contract, Path]:
    """Validate the contract and lock it into ``run_dir``. Re-locking the same contract is a no-op;
    locking a different contract into a run directory that already has one is refused."""
    contract = load_contract(contract_path)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    lock = run / LOCK_NAME
    digest = contract_hash(contract)
    if lock.exists():
        old = _read_lock(lock)
        if old["sha256"] != digest:
            raise ContractError(
                f"{run} is already locked to a different contract (sha256 {old['sha256'][:12]}, "
                f"this one {digest[:12]}): {_diff(old['contract'], normalized(contract))}; "
                f"use a new --run-dir for a new contract"
            )
        return contract, lock
    body = {
        "contract_path": str(Path(contract_path).resolve()),
        "sha256": digest,
        "contract": normalized(contract),
        "locked_at": time.time(),
        "infrarsi_version": __version__,
    }
    atomic_write(lock, json.dumps(body, indent=2, sort_keys=True))
    return contract, lock


def load_locked(run_dir: str | Path) -> Contract:
    """The locked contract of a run, after checking that its file still matches the lock."""
    run = Path(run_dir)
    lock = run / LOCK_NAME
    if not lock.exists():
        raise ContractError(f"{run} has no {LOCK_NAME}; run `infrarsi init CONTRACT --run-dir {run}` first")
    body = _read_lock(lock)
    try:
        locked = Contract.model_validate(body["contract"])
    except ValueError as e:
        raise ContractError(f"{lock}: its contract does not validate ({' '.join(str(e).split())[:200]}); it was left "
                            f"untouched: re-create the run with `infrarsi init CONTRACT --run-dir NEW_DIR`") from None
    if contract_hash(locked) != body["sha256"]:
        raise ContractError(f"{lock} was edited by hand (its contract no longer hashes to {body['sha256'][:12]}); "
                            f"re-create the run with `infrarsi init`")
    path = Path(body["contract_path"])
    if path.exists():
        current = load_contract(path)
        digest = contract_hash(current)
        if digest != body["sha256"]:
            raise ContractError(
                f"contract {path} changed since it was locked (sha256 {body['sha256'][:12]} -> {digest[:12]}): "
                f"{_diff(body['contract'], normalized(current))}; restore the file, or start a new run with "
                f"`infrarsi init {path} --run-dir NEW_DIR`"
            )
    return locked


def _read_lock(lock: Path) -> dict[str, Any]:
    """The lock's JSON body; a lock that is not one (truncated, random bytes) is refused, never rewritten."""
    try:
        body = json.loads(lock.read_bytes())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ContractError(f"{lock} is not a readable contract lock ({type(e).__name__}: {' '.join(str(e).split())[:120]}); "
                            f"it was left untouched: restore it, or start a new run with "
                            f"`infrarsi init CONTRACT --run-dir NEW_DIR`") from None
    if not isinstance(body, dict) or not {"sha256", "contract", "contract_path"} <= set(body):
        raise ContractError(f"{lock} is not a contract lock (it lacks sha256/contract/contract_path); it was left "
                            f"untouched: restore it, or start a new run with `infrarsi init CONTRACT --run-dir NEW_DIR`")
    return body


def _diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> str:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            sub = _diff(a, b, f"{prefix}{k}.")
            if sub:
                out.append(sub)
        elif a != b:
            out.append(f"{prefix}{k} {a!r} -> {b!r}")
    return ", ".join(out)
