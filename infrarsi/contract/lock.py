"""The lock: the normalized contract and its sha256, written by `infrarsi init` (RunDir keeps it).

The lock also holds the sha256 of every file that defines the workload besides the contract (see
:func:`workload_files`: the launch script or config, the configs it names, files named in
``[workload.args]``/``[workload.env]``), their combined ``workload_sha256`` (what each sealed record is
made under), and a seal (an HMAC with the key outside the run, :mod:`.seal`).

One rule for the files' paths, the same both ways: the lock names each file relative to the contract's folder
(:func:`workload_files` finds it wherever the launch would read it: the folder the launch runs from, the launch's
own folder, the contract's folder) and :func:`load_locked` reads it back from the contract's folder. A lock
written before that rule (no ``files_relative_to``) named each file as written and is read back the way it was
written (:func:`_old_place`), so a run locked then still resumes.

Every later stage calls :func:`load_locked`, which checks, in this order and naming the culprit: the lock's
own seal (an edited lock is blamed on the lock), the contract file (normalized again, hash compared), every
locked workload file, and the chain of sealed records.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from .model import Contract, ContractError, load_contract
from .place import launch_cwd, launch_path

if TYPE_CHECKING:
    from ..rundir import LockRecord, RunDir


# Fields added after runs were locked, left out of the normalized contract (and so of its hash) while they hold
# their default: a run locked before they existed still resumes, and its contract still hashes the same.
# (its section's path, its key, its default)
LATER_FIELDS = (("workload", "cwd", ""), ("budget", "prune", True), ("budget", "skip_over_capacity", True),
                ("budget", "end_at_last_step", True),
                ("invariants.timing", "startup_allowance_s", 0.0))

# The lock's ``files_relative_to`` when its file names are relative to the contract's folder (every lock written
# now); absent in a lock written before, whose names were relative to wherever each file was found.
FILES_RELATIVE_TO = "contract"


def normalized(contract: Contract) -> dict[str, Any]:
    out = json.loads(json.dumps(contract.model_dump(mode="json"), sort_keys=True))
    for section, key, default in LATER_FIELDS:
        table = out
        for part in section.split("."):
            table = table.get(part, {})
        if key in table and table[key] == default:
            del table[key]
    return out


def contract_hash(contract: Contract) -> str:
    return hashlib.sha256(json.dumps(normalized(contract), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_lock(contract_path: str | Path, run_dir: str | Path) -> tuple[Contract, Path]:
    """Validate the contract and lock it into ``run_dir``. Re-locking the same contract is a no-op;
    locking a different contract into a run directory that already has one is refused."""
    from ..rundir import RunDir
    from ..rundir.chain import seal_lock

    contract = load_contract(contract_path)
    run = RunDir(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    digest = contract_hash(contract)
    if run.has_lock():
        old = _read_lock(run)
        if old["sha256"] != digest:
            raise ContractError(
                f"{run} is already locked to a different contract (sha256 {old['sha256'][:12]}, "
                f"this one {digest[:12]}): {_diff(old['contract'], normalized(contract))}; "
                f"use a new --run-dir for a new contract"
            )
        return contract, run.file(run.LOCK)
    files = {rel: _sha_file(p) for rel, p in workload_files(contract, Path(contract_path).resolve().parent).items()}
    body = {
        "contract_path": str(Path(contract_path).resolve()),
        "sha256": digest,
        "contract": normalized(contract),
        "files": files,
        "files_relative_to": FILES_RELATIVE_TO,
        "workload_sha256": workload_sha256(digest, files),
        "locked_at": time.time(),
        "infrarsi_version": __version__,
    }
    return contract, run.write_lock(seal_lock(body))


# Config files a launch script names (torchtitan's --job.config_file, a YAML, a JSON of settings).
_CONFIG_TOKEN = re.compile(r"[\w./~-]+\.(?:toml|ya?ml|json|sh)\b")
_MAX_CHAIN_FILES = 32  # scripts followed from the launch (a chain is a few files; a loop of names ends here)


def workload_files(contract: Contract, base: Path) -> dict[str, Path]:
    """Every file besides the contract that defines the workload, by its path relative to the contract's folder
    ``base`` (absolute when it was named absolute) -> where it is: ``workload.launch``, the config files and scripts
    it names and, through those scripts, the rest of its chain (each looked for where the launch runs, then in the
    naming script's folder, then in ``base``), and the values of
    ``[workload.args]`` and ``[workload.env]`` that are existing files. Kernel candidates are not here: they are
    proposals, checked by the kernel verifier's hash."""
    out: dict[str, Path] = {}
    base = Path(base).resolve()

    def add(name: str, root: Path) -> Path | None:
        named = Path(name).expanduser()
        p = named if named.is_absolute() else Path(root).resolve() / named
        if not p.is_file():
            return None
        out.setdefault(str(p) if named.is_absolute() else os.path.relpath(p, base), p)
        return p

    w = contract.workload
    if w.launch:
        launch = launch_path(w, base)
        if launch.is_dir():
            raise ContractError(f"workload.launch {w.launch!r} is a directory ({launch}); name the launch script or "
                                f"job file inside it")
        if not launch.is_file():
            raise ContractError(f"workload.launch {w.launch!r} does not exist (looked at {launch}); fix the path, "
                                f"relative to the contract's folder")
        # found in the contract's folder or, failing that, the working directory (place.py)
        add(w.launch if Path(w.launch).expanduser().is_absolute() else os.path.relpath(launch, base), base)
        # The launch and, through it, every script of its chain (an sbatch file's `srun bash train.sh`, a sourced
        # cluster file: launch/chain.py reads them all): each script's own names are looked for where the launch
        # runs, then in that script's folder, then in ``base``.
        todo, seen = [launch.resolve()], set()
        while todo and len(seen) < _MAX_CHAIN_FILES:
            script = todo.pop()
            if script in seen:
                continue
            seen.add(script)
            try:
                text = script.read_text(errors="replace")
            except OSError:
                continue
            for tok in _CONFIG_TOKEN.findall(text):
                found = [add(tok, root) for root in (launch_cwd(w, base), script.parent, base)]  # where it runs first
                if tok.startswith("/") and not any(found):  # "$(dirname "$0")/x.sh", "${DIR}/x.sh": beside the script
                    found.append(add(tok.lstrip("/"), script.parent))
                todo += [f.resolve() for f in found if f is not None and f.suffix == ".sh"]
    for v in [*w.args.values(), *w.env.values()]:
        if isinstance(v, str) and 0 < len(v) < 4096 and "\n" not in v and ("/" in v or "." in v):
            add(v, base)
    return out


def workload_sha256(contract_sha256: str, files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps({"contract": contract_sha256, "files": files}, sort_keys=True).encode()).hexdigest()


def _sha_file(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def load_locked(run_dir: str | Path) -> Contract:
    """The locked contract of a run, after checking that its file still matches the lock."""
    from ..rundir import RunDir
    from ..rundir.chain import lock_seal_ok

    run = RunDir(run_dir)
    lock = run.file(run.LOCK)
    if not run.has_lock():
        raise ContractError(f"{run.path} has no {run.LOCK}; run `infrarsi init CONTRACT --run-dir {run.path}` first")
    body = _read_lock(run)
    try:
        locked = Contract.model_validate(body["contract"])
    except ValueError as e:
        raise ContractError(f"{lock}: its contract does not validate ({' '.join(str(e).split())[:200]}); it was left "
                            f"untouched: re-create the run with `infrarsi init CONTRACT --run-dir NEW_DIR`") from None
    if contract_hash(locked) != body["sha256"]:
        raise ContractError(f"{lock} was edited by hand (its contract no longer hashes to {body['sha256'][:12]}); "
                            f"re-create the run with `infrarsi init`")
    if not lock_seal_ok(body):
        raise ContractError(f"{lock} was edited by hand (its seal does not match: the lock, not the contract, changed "
                            f"since `infrarsi init`); restore it, or start a new run with `infrarsi init CONTRACT "
                            f"--run-dir NEW_DIR`")
    path = Path(body["contract_path"])
    if not path.exists():
        raise ContractError(f"contract {path}, locked into {lock}, is gone; restore it (the lock alone is not a "
                            f"contract), or start a new run with `infrarsi init CONTRACT --run-dir NEW_DIR`")
    current = load_contract(path)
    digest = contract_hash(current)
    if digest != body["sha256"]:
        raise ContractError(
            f"contract {path} changed since it was locked (sha256 {body['sha256'][:12]} -> {digest[:12]}): "
            f"{_diff(body['contract'], normalized(current))}; restore the file, or start a new run with "
            f"`infrarsi init {path} --run-dir NEW_DIR`"
        )
    old = body.get("files_relative_to") != FILES_RELATIVE_TO
    for rel, sha in sorted(body.get("files", {}).items()):
        p = Path(rel).expanduser()
        p = p if p.is_absolute() else path.parent / p
        if old and not p.is_file():
            p = _old_place(rel, locked, path.parent) or p
        now = _sha_file(p) if p.is_file() else None
        if now != sha:
            what = "is gone" if now is None else f"changed since it was locked (sha256 {sha[:12]} -> {now[:12]})"
            older = (f" (this run was locked by an older infrarsi, which named {rel!r} relative to where it found "
                     f"it: looked in the contract's folder, the launch's folder and where the launch runs)"
                     if old and now is None else "")
            raise ContractError(f"workload file {p} {what}{older}: it defines the workload the run was locked to; "
                                f"restore it, or start a new run with `infrarsi init {path} --run-dir NEW_DIR`")
    run.verify()
    return locked


def _old_place(name: str, contract: Contract, folder: Path) -> Path | None:
    """Where a lock written before ``files_relative_to`` found the file it named ``name``: the launch itself, else
    the first that exists of the folder the launch runs from, the launch's folder and the contract's folder (that
    writer's order); None when it is in none of them."""
    w = contract.workload
    if w.launch and name == w.launch:
        return launch_path(w, folder)
    roots = [launch_cwd(w, folder), launch_path(w, folder).parent] if w.launch else []
    return next((r / name for r in [*roots, folder] if (r / name).is_file()), None)


def read_lock(run_dir: str | Path) -> LockRecord:
    """The lock (rundir.LockRecord: hash, contract, files, when it was locked), unchecked: :func:`load_locked`
    checks it."""
    from ..rundir import RunDir

    return RunDir(run_dir).read_lock()


def _read_lock(run: RunDir) -> dict[str, Any]:
    """The lock's JSON body (RunDir.lock_body: a lock that is not one is refused, never rewritten)."""
    return run.lock_body()


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
