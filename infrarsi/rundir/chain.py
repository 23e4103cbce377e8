"""The seal chain: every record of a run is chained to its lock with an HMAC whose key lives outside the run.

Each write of a record (:func:`write`) appends one entry to ``RUN_DIR/seals.jsonl``, then replaces the file
atomically, then moves the run's *head* (below)::

    {"n": 7, "path": "trials/3/trial.json", "sha256": <of the new bytes; null: the file was removed>,
     "lock": <the lock's workload hash>, "prev": <the previous entry's mac; the workload hash for the first>,
     "mac": HMAC-SHA256(key, every other field)}

``n`` is a counter sealed with each record: entries are numbered 0, 1, 2, ... and each names the one before it
(``prev``), so no entry can be removed, reordered or replayed. :func:`problems` walks the chain and names the
first record that does not match: an entry whose mac is wrong (the chain was edited), made under another lock
(the contract and its lock were re-sealed after the records were made), out of order; a record whose bytes are
not its last sealed version (edited), are an earlier sealed version (rolled back), or are gone (deleted); a
record the chain never sealed (forged); a chain shorter than its head (cut).

The head: after each write, ``n`` and the entry's mac go to a file outside the run directory, beside the key
(``<key folder>/heads/<hash of the run's path>.json``), tagged with the lock's seal. A chain cut back to an
earlier entry (with the records written after it removed or rolled back, e.g. the run directory restored
from a copy) no longer reaches its head. The head is per path: a run directory moved or copied elsewhere
starts without one (and gets one at its next write).

Crashes: a write is entry, then file, then head, all while the chain is held. A process killed between the
entry and the file leaves the file at its previous sealed version (or absent): that is accepted for the
chain's *last* entry only, and only when the head does not cover it; the next write seals the file as it is
("mends" it) before its own entry. Nothing else is tolerated.

The key is 32 random bytes in ``~/.infrarsi/seal.key`` (mode 0600), or the file ``$INFRARSI_SEAL_KEY`` names;
it is created on first use. Without it nobody can make an edit the chain accepts; whoever can read it can.
That is the limit of the seal: any process of the same Unix user can read the key (mode 0600 keeps out other
users only), and can roll back the head as well as the run. Trials and kernel verification run isolated
(``execute/isolation.py``), where neither the key nor the run directory is visible; a trial that runs without
isolation (a machine without bubblewrap, ``INFRARSI_ISOLATION=off``, a Slurm node without it) could read the key
and re-seal what it edits: its record says it ran unisolated, and promotion on its evidence needs the contract's
``invariants.isolation.allow_unisolated``. The stages (init, doctor, run, report, apply) hold the key. To run a stage itself on a
cluster node, that node needs the same key (a shared home, or ``$INFRARSI_SEAL_KEY`` naming a file on a shared
disk, mode 0600). A process that finds no key creates a new one, under which every earlier record reads as
"sealed with another key".
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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ContractError
from ..io import atomic_write
from . import names

KEY_ENV = "INFRARSI_SEAL_KEY"
DEFAULT_KEY = Path("~/.infrarsi/seal.key")
HEADS = "heads"  # beside the key

_lock = threading.Lock()


class SealError(ContractError):
    """A run's records do not match their seals; the message names the first one and what to do."""


# ------------------------------------------------------------------------------------------ the key
def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or DEFAULT_KEY).expanduser()


def key() -> bytes:
    """The HMAC key (created with mode 0600 on first use, never inside a run directory)."""
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


def lock_body(run_dir: Path) -> dict[str, Any] | None:
    """The run's lock, None when it has none (a bare record); a lock that is not JSON is refused, never taken
    for no lock (that would write records unsealed and check nothing)."""
    try:
        body = json.loads((Path(run_dir) / names.LOCK).read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SealError(f"{Path(run_dir) / names.LOCK} is not a lock (not a JSON object): it was edited; the records "
                        f"cannot be trusted: rerun into a new --run-dir")
    return body


def workload_hash(lock: dict[str, Any]) -> str:
    """The hash a record is made under: the contract's and every workload file's (see contract.lock)."""
    return str(lock.get("workload_sha256") or lock.get("sha256") or "")


# ------------------------------------------------------------------------------------------ the head
def heads_dir() -> Path:
    return key_path().parent / HEADS


def _head_path(run: Path) -> Path:
    return heads_dir() / f"{sha256(str(run.resolve()).encode())[:32]}.json"


def read_head(run: Path, lock: dict[str, Any]) -> dict[str, Any] | None:
    """The run's head ({"n", "mac"}) when one was kept for this path under this lock; None otherwise."""
    try:
        head = json.loads(_head_path(run).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict) or head.get("lock") != lock.get("seal") or not isinstance(head.get("n"), int):
        return None  # another run once lived at this path, or none was kept
    return head


def _write_head(run: Path, lock: dict[str, Any], n: int, entry_mac: str) -> None:
    """Replace the run's head (temp file + rename). Not fsynced: after a power cut it may be older than the chain,
    which only loosens the check to its last entry; it is never ahead of it (the entry was fsynced first)."""
    with contextlib.suppress(OSError):  # an extra check: a home that cannot take it keeps the chain's own
        p = _head_path(run)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"run": str(run.resolve()), "lock": lock.get("seal"), "n": n, "mac": entry_mac}))
        os.replace(tmp, p)


def prune_heads(limit: int = 64, idle_s: float = 3600.0) -> None:
    """Drop heads whose run directory is gone, once there are more than ``limit``; a head written in the last
    ``idle_s`` seconds is left alone (its run is in use)."""
    d = heads_dir()
    try:
        files = list(d.iterdir())
    except OSError:
        return
    if len(files) <= limit:
        return
    now = time.time()
    for f in files:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            if now - f.stat().st_mtime < idle_s:
                continue
            run = Path(json.loads(f.read_text())["run"])
            if not (run / names.LOCK).is_file():
                f.unlink()


# ----------------------------------------------------------------------------------------- writing
@contextlib.contextmanager
def held(run_dir: Path) -> Iterator[Path]:
    """The chain file, held exclusively (threads of this process and other processes)."""
    log = Path(run_dir) / names.SEALS
    with _lock, open(log, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield log
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def entries(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for i, line in enumerate(lines):
        try:
            e = json.loads(line)
        except ValueError:
            e = None
        if not isinstance(e, dict):
            if i == len(lines) - 1 and e is None:  # a last line cut by a crash: the write it announced never happened
                break
            raise SealError(f"{log}: line {i + 1} is not a seal entry; the chain was edited -- the records cannot be "
                            f"trusted: rerun into a new --run-dir")
        out.append(e)
    return out


def _fields(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k != "mac"}


def _disk_sha(p: Path) -> str | None:
    try:
        return sha256(p.read_bytes())
    except FileNotFoundError:
        return None


def _append(log: Path, fields: dict[str, Any]) -> str:
    m = mac(fields)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (json.dumps({**fields, "mac": m}, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return m


def rel_of(run: Path, target: Path) -> str:
    """``target`` relative to the run (posix). The folder is resolved, not the file: a record replaced by a
    symlink (trials/<n>/clock.json -> ../../noise.json) is sealed and replaced under its own name."""
    return (target.parent.resolve() / target.name).relative_to(run.resolve()).as_posix()


def write(run_dir: str | Path, path: str | Path, data: bytes | None) -> None:
    """Write ``data`` to ``path`` (inside ``run_dir``) atomically, sealed into the run's chain first; ``None``
    removes the file (sealed as removed). A run directory without a lock (a bare record, e.g. in a test of
    the executor) is written unsealed."""
    run, target = Path(run_dir), Path(path)
    lock = lock_body(run)
    if lock is None:
        _put(target, data)
        return
    rel = rel_of(run, target)
    with held(run) as log:
        last = _last(log)
        n = int(last["n"]) + 1 if last else 0
        prev = last["mac"] if last else workload_hash(lock)
        if last is not None and _disk_sha(run / str(last.get("path"))) != last.get("sha256"):
            mend = _mend(run, lock, entries(log))  # the whole chain, only now: the earlier versions of that record
            if mend is not None:  # the last write was cut by a crash: seal the file as it is, before going on
                prev = _append(log, {**mend, "n": n, "prev": prev})
                n += 1
        fields = {"n": n, "path": rel, "sha256": None if data is None else sha256(data),
                  "lock": workload_hash(lock), "prev": prev}
        m = _append(log, fields)
        _put(target, data)
        _write_head(run, lock, fields["n"], m)


def _last(log: Path) -> dict[str, Any] | None:
    """The chain's last entry, read from its end (a run's chain grows by several entries per trial); a last line cut
    by a crash is dropped first: the write it announced never happened."""
    with open(log, "rb+") as f:
        pos = f.seek(0, os.SEEK_END)
        buf = b""
        while pos > 0:
            step = min(8192, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            end = buf.rfind(b"\n")
            if end < 0:
                if pos > 0:
                    continue
                f.truncate(0)  # the whole chain is one cut line
                return None
            if end != len(buf) - 1:  # a cut line after the last whole one
                f.truncate(pos + end + 1)
                buf = buf[:end + 1]
            start = buf.rfind(b"\n", 0, len(buf) - 1)
            if start < 0 and pos > 0:
                continue  # the last line starts before this block
            line = buf[start + 1:]
            break
        else:
            return None
    try:
        e = json.loads(line)
    except ValueError:
        e = None
    if not isinstance(e, dict) or not isinstance(e.get("n"), int) or "mac" not in e:
        raise SealError(f"{log}: its last line is not a seal entry; the chain was edited -- the records cannot be "
                        f"trusted: rerun into a new --run-dir")
    return e


def _mend(run: Path, lock: dict[str, Any], chain: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry that seals a file whose last write a crash cut (it is at its previous sealed version, or absent
    after a first write), or None. Anything else that differs is left for :func:`problems` to name."""
    if not chain:
        return None
    last = chain[-1]
    now = _disk_sha(run / str(last.get("path")))
    if now == last.get("sha256"):
        return None
    head = read_head(run, lock)
    if head is not None and head["n"] >= len(chain) - 1:
        return None  # the head says that write was finished: this is an edit, not a crash
    earlier = [e.get("sha256") for e in chain[:-1] if e.get("path") == last.get("path")]
    if now != (earlier[-1] if earlier else None):
        return None
    return {"path": last["path"], "sha256": now, "lock": workload_hash(lock), "mends": last.get("n")}


def _put(target: Path, data: bytes | None) -> None:
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        return
    atomic_write(target, data)


# --------------------------------------------------------------------------------------- verifying
def problems(run_dir: str | Path) -> list[str]:
    """Every way the run's records disagree with their seals, first problem first; [] when all match.
    A run directory without a lock has nothing to check."""
    run = Path(run_dir)
    try:
        lock = lock_body(run)
    except SealError as e:
        return [str(e)]
    if lock is None:
        return []
    try:
        chain = entries(run / names.SEALS)
    except SealError as e:
        return [str(e)]
    current = workload_hash(lock)
    prev = current
    history: dict[str, list[tuple[int, str | None]]] = {}  # path -> [(entry index, sha256 or None), ...]
    never: set[int] = set()  # entries whose write a crash cut (a later entry mends them): no version of anything
    for i, e in enumerate(chain):
        if not hmac.compare_digest(str(e.get("mac", "")), mac(_fields(e))):
            return [f"{names.SEALS} entry {i} ({e.get('path')}) does not match its seal: the chain was edited or "
                    f"sealed with another key; the records cannot be trusted"]
        if e.get("lock") != current:
            return [f"{e.get('path')} was sealed under lock {str(e.get('lock'))[:12]}, but the run is now locked to "
                    f"{current[:12]}: the contract and its lock were re-sealed after the records were made; restore the "
                    f"contract, or start a new run with `infrarsi init CONTRACT --run-dir NEW_DIR`"]
        if e.get("n") != i or e.get("prev") != prev:
            return [f"{names.SEALS} entry {i} ({e.get('path')}) does not follow entry {i - 1}: entries of the chain were "
                    f"removed or reordered; the records cannot be trusted"]
        history.setdefault(str(e.get("path")), []).append((i, e.get("sha256")))
        if isinstance(e.get("mends"), int):
            never.add(e["mends"])
        prev = e["mac"]
    out: list[str] = []
    head = read_head(run, lock)
    if head is not None and (head["n"] >= len(chain) or chain[head["n"]].get("mac") != head.get("mac")):
        out.append(f"{names.SEALS} ends at entry {len(chain) - 1}, but this run's head (kept outside it, in "
                   f"{heads_dir()}) is at entry {head['n']}: the chain was cut and records rolled back (a copy of the "
                   f"run directory restored?); the records cannot be trusted: rerun into a new --run-dir")
    # Entries up to `settled` were finished (the head says so, or a later write followed them): no tolerance.
    settled = head["n"] if head is not None else len(chain) - 2
    last = len(chain) - 1
    for rel in sorted(set(names.sealed_on_disk(run)) | set(history), key=names.order):
        versions = history.get(rel)
        if not versions:
            out.append(f"{rel} carries no seal: it was not written by infrarsi (forged or copied in); remove it, or "
                       f"rerun into a new --run-dir")
            continue
        last_i, last_sha = versions[-1]
        now = _disk_sha(run / rel)
        if now == last_sha:
            continue
        before = versions[-2][1] if len(versions) > 1 else None
        if last_i == last > settled and now == before:
            continue  # the last write, cut by a crash between its entry and its file
        if now is None:
            out.append(f"{rel} was sealed but is gone: a record was deleted; restore it, or rerun into a new --run-dir")
        elif any(now == s for i, s in versions[:-1] if i not in never):
            k = max(i for i, s in versions[:-1] if s == now and i not in never)
            out.append(f"{rel} was rolled back to an earlier sealed version (chain entry {k}; its last is entry {last_i}): "
                       f"a record was replaced by an old copy; restore it, or rerun into a new --run-dir")
        else:
            out.append(f"{rel} was edited after it was sealed (sha256 {str(last_sha)[:12]} sealed, {now[:12]} on disk); "
                       f"restore it, or rerun into a new --run-dir")
    return out


def settled_problems(run_dir: str | Path) -> list[str]:
    """:func:`problems` read with the chain held, so no write (of this process or another) is half-seen."""
    run = Path(run_dir)
    if not (run / names.LOCK).is_file():
        return []
    with held(run):
        return problems(run)


def verify_run(run_dir: str | Path) -> None:
    """Raise SealError naming the first record that does not match its seal."""
    probs = problems(run_dir)
    if probs:
        more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
        raise SealError(f"tampered records in {run_dir}: {probs[0]}{more}")
