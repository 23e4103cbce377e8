"""Sealed records: every record a run keeps is chained to its lock with an HMAC whose key lives outside it.

A record that decides a number (``trials/<n>/trial.json``, ``noise.json``, ``search.json``,
``verification.json``, ``verification.progress.json``, ``kernels/verdicts.json``) is written through :func:`sealed_write`, which
first appends one entry to the run's chain, ``RUN_DIR/seals.jsonl``, then writes the file atomically::

    {"n": 7, "path": "trials/3/trial.json", "sha256": <of the new bytes>, "lock": <the lock's workload hash>,
     "prev": <the previous entry's mac; the lock's workload hash for the first>, "mac": HMAC-SHA256(key, the rest)}

``verify_run`` walks the chain and refuses, naming the first record that does not match: an entry whose
mac is wrong (the chain was edited), an entry made under another lock (the contract and its lock were
re-sealed after the records were made), a file whose bytes are not its last sealed version (edited), a
record on disk the chain never sealed (forged), or a sealed record that is gone (deleted).

The key is 32 random bytes in ``~/.infrarsi/seal.key`` (mode 0600), or the file ``$INFRARSI_SEAL_KEY``
names; it is created on first use. Without it nobody can make an edit the chain accepts; whoever can
read it can. That is the limit of the seal: **any process of the same Unix user can read the key** (mode
0600 keeps out other users only). Trials and kernel verification run isolated (``execute/isolation.py``),
where neither the key nor the run directory is visible; a trial that runs without isolation (a machine without
bubblewrap, ``INFRARSI_ISOLATION=off``, a Slurm node without it) can read the key and re-seal what it edits, and only
the post-hoc check of the chain after it stands in the way of cruder edits (its record says it ran unisolated,
and promotion on its evidence needs the contract's ``invariants.isolation.allow_unisolated``). ``$INFRARSI_SEAL_KEY`` may name a
file outside the home folder (another disk, a file provisioned by an administrator); that helps only
where the trials run as a user who cannot read it.

Where the key is needed: only in the processes of the stages (``init``, ``doctor``, ``run``, ``report``,
``apply``), which seal and check the records. Trials need none, on this machine or on a Slurm node: the
one check a training process makes, that a kernel candidate passed at run start, is carried by its
launch (``INFRARSI_KERNEL_PINS``, see kernels/verdicts.py: the stage checks the verdict file's seal, the
job script exports the pins with the rest of the environment). The key is deliberately not handed to
jobs: a job that can read it can re-seal what it edits. To run a stage itself on a cluster node (e.g.
``infrarsi run`` inside an allocation), that node needs the same key: a shared home folder gives it, or
``$INFRARSI_SEAL_KEY`` naming a file on a shared disk (mode 0600). A process that finds no key creates
a new one, under which every earlier record reads as "sealed with another key".

A write interrupted by a crash (entry appended, file not yet replaced) leaves the file at its previous
sealed version (or absent, for a new file): such a file is accepted when its entry is among the chain's
last ``INTERRUPTED_TAIL`` entries, so a killed run resumes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..io import atomic_write
from .model import ContractError

KEY_ENV = "INFRARSI_SEAL_KEY"
DEFAULT_KEY = Path("~/.infrarsi/seal.key")
SEAL_LOG = "seals.jsonl"
LOCK_FILE = "contract.lock"
# Files of a run directory that must be sealed (relative, posix); trial records by pattern.
SEALED_NAMES = ("noise.json", "search.json", "verification.json", "verification.progress.json", "kernels/verdicts.json")
TRIAL_RECORD = "trial.json"
INTERRUPTED_TAIL = 16  # a crash cuts at most one write per writing thread (parallel trials + the stage)

_lock = threading.Lock()


class SealError(ContractError):
    """A run's records do not match their seals; the message names the first one and what to do."""


# ------------------------------------------------------------------------------------------ the key
def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or DEFAULT_KEY).expanduser()


def key() -> bytes:
    """The HMAC key (created with mode 0600 on first use, never inside a run directory).

    Mode 0600 keeps other users out, not this one: every process of the user that runs infrarsi can read
    it, an unsandboxed trial included (see the module's docstring)."""
    p = key_path()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            data = p.read_bytes()
        else:
            data = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    if len(data) < 16:
        raise SealError(f"seal key {p} is {len(data)} bytes (expected 32); restore it, or point {KEY_ENV} at the right file")
    return data


def mac(fields: dict[str, Any]) -> str:
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hmac.new(key(), body, hashlib.sha256).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ the lock
def lock_fields(body: dict[str, Any]) -> dict[str, Any]:
    """What the lock's seal covers: everything but its seal and the contract's path (a moved run keeps its seal;
    the path only says where to re-check the contract, and the check compares hashes)."""
    return {k: v for k, v in body.items() if k not in ("seal", "contract_path")}


def seal_lock(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "seal": mac({"kind": "lock", **lock_fields(body)})}


def lock_seal_ok(body: dict[str, Any]) -> bool:
    s = body.get("seal")
    return isinstance(s, str) and hmac.compare_digest(s, mac({"kind": "lock", **lock_fields(body)}))


def _lock_body(run_dir: Path) -> dict[str, Any] | None:
    """The run's lock, None when it has none (a bare record); a lock that is not JSON is refused, never taken
    for no lock (that would write records unsealed and check nothing)."""
    try:
        body = json.loads((run_dir / LOCK_FILE).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SealError(f"{run_dir / LOCK_FILE} is not a lock (not a JSON object): it was edited; the records cannot "
                        f"be trusted: rerun into a new --run-dir")
    return body


# ----------------------------------------------------------------------------------------- writing
@contextlib.contextmanager
def _chain_locked(run_dir: Path) -> Iterator[Path]:
    """The chain file, held exclusively (threads of this process and other processes)."""
    log = run_dir / SEAL_LOG
    with _lock, open(log, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield log
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _entries(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1:  # a last line cut by a crash: the write it announced never happened
                break
            raise SealError(f"{log}: line {i + 1} is not a seal entry; the chain was edited -- the records cannot be "
                            f"trusted: rerun into a new --run-dir") from None
    return out


def sealed_write(run_dir: str | Path, path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` (inside ``run_dir``) atomically, sealed into the run's chain first.
    A run directory without a lock (a bare record, e.g. in a test of the executor) is written unsealed."""
    run = Path(run_dir)
    target = Path(path)
    lock = _lock_body(run)
    if lock is None:
        atomic_write(target, text)
        return
    # The folder resolved, not the file: a record a trial replaced with a symlink (trials/<n>/clock.json ->
    # ../../noise.json) is sealed and replaced under its own name, never under the file it points at.
    rel = (target.parent.resolve() / target.name).relative_to(run.resolve()).as_posix()
    with _chain_locked(run) as log:
        raw = log.read_bytes()
        if raw and not raw.endswith(b"\n"):  # a line cut by a crash: its write never happened; drop it
            os.truncate(log, raw.rfind(b"\n") + 1)
        entries = _entries(log)
        prev = entries[-1]["mac"] if entries else workload_hash(lock)
        fields = {"n": len(entries), "path": rel, "sha256": sha256(text.encode()), "lock": workload_hash(lock),
                  "prev": prev}
        line = json.dumps({**fields, "mac": mac(fields)}, sort_keys=True) + "\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        atomic_write(target, text)


def workload_hash(lock: dict[str, Any]) -> str:
    """The hash a record is made under: the contract's and every workload file's (see contract.lock)."""
    return str(lock.get("workload_sha256") or lock.get("sha256") or "")


# --------------------------------------------------------------------------------------- verifying
def sealed_on_disk(run_dir: Path) -> list[str]:
    """Every file of the run directory that must carry a seal (relative, posix), sorted."""
    out = [n for n in SEALED_NAMES if (run_dir / n).is_file()]
    trials = run_dir / "trials"
    if trials.is_dir():
        for d in trials.iterdir():
            if d.name.isdigit() and (d / TRIAL_RECORD).is_file():
                out.append(f"trials/{d.name}/{TRIAL_RECORD}")
    return sorted(out, key=_order)


def _order(rel: str) -> tuple:
    parts = rel.split("/")
    return (1, int(parts[1]), rel) if parts[0] == "trials" and parts[1].isdigit() else (0, 0, rel)


def problems(run_dir: str | Path) -> list[str]:
    """Every way the run's records disagree with their seals, first problem first; [] when all match.
    A run directory without a lock has nothing to check."""
    run = Path(run_dir)
    try:
        lock = _lock_body(run)
    except SealError as e:
        return [str(e)]
    if lock is None:
        return []
    out: list[str] = []
    try:
        entries = _entries(run / SEAL_LOG)
    except SealError as e:
        return [str(e)]
    current = workload_hash(lock)
    prev = current
    history: dict[str, list[tuple[int, str]]] = {}  # path -> [(entry index, sha256), ...]
    for i, e in enumerate(entries):
        fields = {k: e.get(k) for k in ("n", "path", "sha256", "lock", "prev")}
        if not hmac.compare_digest(str(e.get("mac", "")), mac(fields)):
            out.append(f"{SEAL_LOG} entry {i} ({e.get('path')}) does not match its seal: the chain was edited or "
                       f"sealed with another key; the records cannot be trusted")
            return out
        if e["lock"] != current:
            out.append(f"{e['path']} was sealed under lock {str(e['lock'])[:12]}, but the run is now locked to "
                       f"{current[:12]}: the contract and its lock were re-sealed after the records were made; "
                       f"restore the contract, or start a new run with `infrarsi init CONTRACT --run-dir NEW_DIR`")
            return out
        if e["n"] != i or e["prev"] != prev:
            out.append(f"{SEAL_LOG} entry {i} ({e['path']}) does not follow entry {i - 1}: entries of the chain were "
                       f"removed or reordered; the records cannot be trusted")
            return out
        history.setdefault(e["path"], []).append((i, e["sha256"]))
        prev = e["mac"]
    tail = len(entries) - INTERRUPTED_TAIL
    must = set(sealed_on_disk(run))  # records that exist and must carry a seal
    for rel in sorted(must | set(history), key=_order):
        versions = history.get(rel)
        if not versions:
            out.append(f"{rel} carries no seal: it was not written by infrarsi (forged or copied in); remove it, or "
                       f"rerun into a new --run-dir")
            continue
        last_i, last_sha = versions[-1]
        if not (run / rel).is_file():
            if not (len(versions) == 1 and last_i >= tail):  # not a first write cut by a crash
                out.append(f"{rel} was sealed but is gone: a record was deleted; restore it, or rerun into a new "
                           f"--run-dir")
            continue
        now = sha256((run / rel).read_bytes())
        if now == last_sha:
            continue
        interrupted = last_i >= tail and len(versions) > 1 and now == versions[-2][1]
        if not interrupted:
            out.append(f"{rel} was edited after it was sealed (sha256 {last_sha[:12]} sealed, {now[:12]} on disk); "
                       f"restore it, or rerun into a new --run-dir")
    return out


def settled_problems(run_dir: str | Path) -> list[str]:
    """:func:`problems` read with the chain held, so no write (of this process or another) is half-seen."""
    run = Path(run_dir)
    if not (run / LOCK_FILE).is_file():
        return []
    with _chain_locked(run):
        return problems(run)


def verify_run(run_dir: str | Path) -> None:
    """Raise SealError naming the first record that does not match its seal."""
    probs = problems(run_dir)
    if probs:
        more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
        raise SealError(f"tampered records in {run_dir}: {probs[0]}{more}")
