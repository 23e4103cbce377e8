"""The experience bank: every trial of every run, in one SQLite file shared by many tuner processes.

What is kept (one table each): hardware fingerprints, workload signatures, runs (run id -> hardware,
workload), trials (the full frozen Trial record as JSON plus indexed columns), priors used and
posteriors reached (Prior-shaped rows), verified kernels by content hash, LLM exchanges (opaque
JSON rows).

Concurrency: WAL journal (readers never block the writer), a busy timeout, every write in one
``BEGIN IMMEDIATE`` transaction, retried with jittered back-off when another process holds the
lock. A connection is opened per process (a forked child reopens its own).

Schema: ``schema_version`` holds one row. Opening an older file migrates it forward in one
transaction, after copying it to ``<file>.schema<N>.bak``. A file written by a newer InfraRSI, a
corrupt file or a SQLite file that is not a bank is refused with an error naming the file and the
fix; the file is never changed.

Identity and idempotency: a run is its ``run_id`` (make it unique across clusters, e.g. contract
name + lock hash + start time); a trial is ``(run_id, trial id)``; a prior row is ``(run_id, kind,
knob, value)``; a kernel is ``(op, sha256)``; an LLM exchange is the hash of its run id and JSON.
Adding or importing the same record twice adds nothing.

The parts: the tables and their migrations (``_schema``), export and import (``_export``), the errors
(``errors``); this module holds the connection, the transactions and the records.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..trial.record import Trial, TrialStatus
from ..knobs.setting import Setting
from ..trial.prior import Prior
from . import _export
from ._schema import _SQLITE_MAGIC, EVIDENCE, MIGRATIONS, SCHEMA_VERSION, _dumps, _statements
from ._export import EXPORT_FORMAT, EXPORT_VERSION
from .errors import BankConflictError, BankCorruptError, BankError, BankSchemaError
from .fingerprint import HardwareFingerprint, fingerprint_from
from .signature import WorkloadSignature, signature_from

__all__ = [
    "EVIDENCE", "EXPORT_FORMAT", "EXPORT_VERSION", "MIGRATIONS", "SCHEMA_VERSION", "Bank", "BankConflictError",
    "BankCorruptError", "BankError", "BankSchemaError", "KernelRecord", "RunSummary", "StoredTrial", "_statements",
]

T = TypeVar("T")



@dataclass(frozen=True)
class StoredTrial:
    """A trial as the bank holds it: the record plus where and on what it ran."""

    run_id: str
    trial: Trial
    hardware: HardwareFingerprint
    workload: WorkloadSignature


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    hardware: HardwareFingerprint
    workload: WorkloadSignature
    created_at: float
    n_trials: int
    n_ok: int
    best_step_time_s: float | None
    best_setting: dict[str, Any] | None
    baseline_step_time_s: float | None  # median over ok trials with role "baseline"
    baseline_peak_bytes: float | None
    reference_peak_bytes: float | None  # peak at the knob defaults (the effects' reference), when stored
    by_status: dict[str, int] = field(default_factory=dict)
    evidence: str = "measured"  # measured: real trials; simulated: a what-if run (never seeds a real one unasked)


@dataclass(frozen=True)
class KernelRecord:
    op: str
    sha256: str
    path: str
    verdict: str
    detail: dict[str, Any]
    updated_at: float



def _as_trial(t: Trial | Mapping[str, Any]) -> Trial:
    return t if isinstance(t, Trial) else Trial.model_validate(dict(t))


class Bank:
    """The experience bank in one SQLite file.

    ``Bank(path)`` creates the file (and its folder) when missing, unless ``create=False``.
    One connection per thread and process (a forked child or another thread opens its own), so one
    Bank may be shared by a tuner's worker threads.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True, busy_timeout_s: float = 30.0,
                 retries: int = 20) -> None:
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s
        self.retries = retries
        self._local = threading.local()  # one connection per thread (and per process: see _connection)
        if not create and not self.path.exists():
            raise BankError(f"no bank at {self.path}; run a tune first, `infrarsi bank import FILE`, "
                            f"or pass --bank / set INFRARSI_BANK to an existing bank")
        if not create and self.path.is_file() and self.path.stat().st_size == 0:  # reading never writes a schema
            raise BankError(f"bank {self.path} is an empty file (0 bytes), not a bank; it was left untouched: remove "
                            f"it, or pass --bank / set INFRARSI_BANK to an existing bank")
        self._connection()  # open, check and migrate now: a bad file fails at construction

    # ------------------------------------------------------------ connection
    def _connection(self) -> sqlite3.Connection:
        loc = self._local
        if getattr(loc, "conn", None) is not None and loc.pid == os.getpid():
            return loc.conn
        loc.conn = None  # a connection inherited across fork must not be used (or closed) here
        self._check_header()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as e:
            raise BankError(f"cannot open bank {self.path}: {e}; check the path and its permissions") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            check = self._retry(lambda: conn.execute("PRAGMA quick_check").fetchall())
            if check != [("ok",)]:
                raise sqlite3.DatabaseError("; ".join(str(r[0]) for r in check[:3]))
            self._refuse(self._retry(lambda: self._version(conn)))  # before anything writes to the file
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except sqlite3.DatabaseError as e:
            conn.close()
            if isinstance(e, sqlite3.OperationalError) and _is_busy(e):
                raise BankError(f"bank {self.path} stayed locked by another process: {e}") from None
            raise BankCorruptError(
                f"bank {self.path} is corrupt or not an SQLite file ({e}); it was left untouched: move it aside "
                f"and restore from an export (`infrarsi bank import FILE`), or point --bank/INFRARSI_BANK elsewhere"
            ) from None
        except BankError:
            conn.close()
            raise
        loc.conn, loc.pid = conn, os.getpid()
        return conn

    def _check_header(self) -> None:
        """A non-empty file that does not start with the SQLite magic is refused before SQLite sees it."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(16)
        except FileNotFoundError:
            return
        except OSError as e:
            raise BankError(f"cannot read bank {self.path}: {e}") from None
        if head and head != _SQLITE_MAGIC:
            raise BankCorruptError(
                f"bank {self.path} is not an SQLite file (it starts with {head[:8]!r}); it was left untouched: "
                f"move it aside and restore from an export (`infrarsi bank import FILE`), or point --bank elsewhere"
            )

    def close(self) -> None:
        """Close this thread's connection (other threads' close with them)."""
        loc = self._local
        if getattr(loc, "conn", None) is not None and loc.pid == os.getpid():
            loc.conn.close()
        loc.conn = None

    def __enter__(self) -> "Bank":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- schema
    @staticmethod
    def _version(conn: sqlite3.Connection) -> int | None:
        """The file's schema version; None for a file with no tables; -1 for tables but no version."""
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" not in names:
            return -1 if names - {"sqlite_sequence"} else None
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else -1

    def _migrate(self, conn: sqlite3.Connection) -> None:
        v = self._version(conn)
        if v == SCHEMA_VERSION:
            return
        self._refuse(v)
        if v is not None and v >= 1:
            self._backup(conn, v)

        def step(c: sqlite3.Connection) -> None:
            now = self._version(c)  # another process may have migrated while we waited for the lock
            if now == SCHEMA_VERSION:
                return
            self._refuse(now)
            for version, _, sql in MIGRATIONS:
                if version > (now or 0):
                    for stmt in _statements(sql):
                        c.execute(stmt)
            c.execute("DELETE FROM schema_version")
            c.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))

        self._write(step, conn=conn)

    def _refuse(self, v: int | None) -> None:
        if v == -1:
            raise BankSchemaError(f"{self.path} is an SQLite file but not an InfraRSI bank (no schema_version table); "
                                  f"it was left untouched: point --bank/INFRARSI_BANK at a bank file")
        if v is not None and v > SCHEMA_VERSION:
            raise BankSchemaError(
                f"bank {self.path} has schema version {v}, newer than this InfraRSI understands (version "
                f"{SCHEMA_VERSION}); it was left untouched: upgrade InfraRSI (pip install -U infrarsi), or "
                f"export it with the newer version and import it into another bank"
            )

    def _backup(self, conn: sqlite3.Connection, v: int) -> None:
        dest = self.path.with_name(f"{self.path.name}.schema{v}.bak")
        if dest.exists():
            return
        out = sqlite3.connect(dest)
        try:
            self._retry(lambda: conn.backup(out))
        finally:
            out.close()

    # ---------------------------------------------------------- transactions
    def _retry(self, fn: Callable[[], T]) -> T:
        delay = 0.01
        for attempt in range(self.retries):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not _is_busy(e) or attempt == self.retries - 1:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _write(self, fn: Callable[[sqlite3.Connection], T], *, conn: sqlite3.Connection | None = None) -> T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction: all of it lands, or none of it."""
        c = conn or self._connection()

        def once() -> T:
            c.execute("BEGIN IMMEDIATE")
            try:
                out = fn(c)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            return out

        try:
            return self._retry(once)
        except sqlite3.OperationalError as e:
            if _is_busy(e):
                raise BankError(f"bank {self.path} stayed locked through {self.retries} retries: {e}; "
                                f"another process holds a long write, try again") from None
            raise

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        c = self._connection()
        return self._retry(lambda: c.execute(sql, args).fetchall())

    # ------------------------------------------------------------------ runs
    def _put_run(self, c: sqlite3.Connection, run_id: str, hw: HardwareFingerprint, wl: WorkloadSignature,
                 created_at: float | None = None, reference_peak_bytes: float | None = None,
                 evidence: str | None = None) -> bool:
        if not run_id:
            raise BankError("run_id is empty; give each run a unique id (e.g. contract name + start time)")
        evidence = evidence or ("simulated" if wl.framework == "simulated" else "measured")
        if evidence not in EVIDENCE:
            raise BankError(f"run {run_id!r}: evidence={evidence!r}; use 'measured' (real trials) or 'simulated'")
        hk, wk = hw.key(), wl.key()
        c.execute("INSERT OR IGNORE INTO hardware (key, kind, family, record) VALUES (?, ?, ?, ?)",
                  (hk, hw.kind, hw.family, _dumps(hw.model_dump(mode="json"))))
        c.execute("INSERT OR IGNORE INTO workloads (key, name, record) VALUES (?, ?, ?)",
                  (wk, wl.name, _dumps(wl.model_dump(mode="json"))))
        if reference_peak_bytes is not None and not (math.isfinite(reference_peak_bytes) and reference_peak_bytes > 0):
            raise BankError(f"run {run_id!r}: reference_peak_bytes={reference_peak_bytes!r}; give a positive byte count or None")
        row = c.execute("SELECT hardware_key, workload_key, reference_peak_bytes FROM runs WHERE run_id = ?",
                        (run_id,)).fetchone()
        if row is None:
            c.execute("INSERT INTO runs (run_id, hardware_key, workload_key, created_at, reference_peak_bytes, evidence)"
                      " VALUES (?, ?, ?, ?, ?, ?)",
                      (run_id, hk, wk, time.time() if created_at is None else created_at, reference_peak_bytes,
                       evidence))
            return True
        if reference_peak_bytes is not None and row[2] != reference_peak_bytes:
            c.execute("UPDATE runs SET reference_peak_bytes = ? WHERE run_id = ?", (reference_peak_bytes, run_id))
        row = row[:2]
        if row != (hk, wk):
            what = "hardware" if row[0] != hk else "workload"
            raise BankConflictError(
                f"run {run_id!r} is already recorded with another {what} ({row[0] if what == 'hardware' else row[1]} "
                f"!= {hk if what == 'hardware' else wk}); give this run another id (run ids must be unique across clusters)"
            )
        return False

    # ---------------------------------------------------------------- trials
    def add_trials(self, run_id: str, trials: Iterable[Trial | Mapping[str, Any]], *, hardware: Any,
                   workload: Any, evidence: str | None = None) -> int:
        """Store trials of a run (failed ones too). Returns how many rows were added or completed.

        ``evidence``: "measured" (real trials) or "simulated" (a what-if run); None = "simulated" for the
        simulated framework, else "measured". It is the run's, set when the run is first stored.

        A trial already stored identically adds nothing; an in-flight (``running``) record is replaced by
        its finished one; a finished trial never changes: a different finished record for the same
        ``(run_id, trial id)`` raises BankConflictError and nothing of this call is stored."""
        hw, wl = fingerprint_from(hardware), signature_from(workload)
        recs = [_as_trial(t) for t in trials]

        def tx(c: sqlite3.Connection) -> int:
            self._put_run(c, run_id, hw, wl, evidence=evidence)
            return sum(self._put_trial(c, run_id, t) for t in recs)

        return self._write(tx)

    def _put_trial(self, c: sqlite3.Connection, run_id: str, t: Trial, added_at: float | None = None) -> int:
        rec = _dumps(t.model_dump(mode="json"))
        row = c.execute("SELECT status, record FROM trials WHERE run_id = ? AND trial_id = ?", (run_id, t.id)).fetchone()
        if row is not None:
            old_status, old_rec = row
            if old_rec == rec or t.status is TrialStatus.RUNNING:
                return 0  # the same record, or a stale in-flight copy of a finished one
            if TrialStatus(old_status) is not TrialStatus.RUNNING:
                raise BankConflictError(
                    f"run {run_id!r} trial {t.id}: already stored as a finished trial ({old_status}) with a different "
                    f"record; finished trials are immutable: give the new trial another id, or the run another run id"
                )
            c.execute("DELETE FROM trials WHERE run_id = ? AND trial_id = ?", (run_id, t.id))
        c.execute(
            "INSERT INTO trials (run_id, trial_id, setting_key, status, role, step_time_s, peak_memory_bytes, record, added_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, t.id, Setting(t.setting).key(), t.status.value, t.role, t.metrics.step_time_s,
             t.metrics.peak_memory_bytes, rec, time.time() if added_at is None else added_at),
        )
        return 1

    def trials(self, run_id: str | None = None, *, status: TrialStatus | str | None = None) -> list[StoredTrial]:
        """Stored trials (all runs, or one), oldest run first, by trial id."""
        sql = ("SELECT t.run_id, t.record, h.record, w.record FROM trials t JOIN runs r USING (run_id)"
               " JOIN hardware h ON h.key = r.hardware_key JOIN workloads w ON w.key = r.workload_key WHERE 1 = 1")
        args: list[Any] = []
        if run_id is not None:
            sql += " AND t.run_id = ?"
            args.append(run_id)
        if status is not None:
            sql += " AND t.status = ?"
            args.append(TrialStatus.parse(status).value)
        sql += " ORDER BY r.created_at, t.run_id, t.trial_id"
        hw_cache: dict[str, HardwareFingerprint] = {}
        wl_cache: dict[str, WorkloadSignature] = {}
        out = []
        for rid, rec, hrec, wrec in self._read(sql, args):
            hw = hw_cache.get(hrec) or hw_cache.setdefault(hrec, HardwareFingerprint.model_validate_json(hrec))
            wl = wl_cache.get(wrec) or wl_cache.setdefault(wrec, WorkloadSignature.model_validate_json(wrec))
            out.append(StoredTrial(rid, Trial.model_validate_json(rec), hw, wl))
        return out

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first, with its trial counts, best ok trial and baseline figures."""
        rows = self._read(
            "SELECT r.run_id, r.created_at, h.record, w.record, r.reference_peak_bytes, r.evidence FROM runs r"
            " JOIN hardware h ON h.key = r.hardware_key JOIN workloads w ON w.key = r.workload_key"
            " ORDER BY r.created_at, r.run_id")
        counts: dict[str, dict[str, int]] = {}
        for rid, st, n in self._read("SELECT run_id, status, COUNT(*) FROM trials GROUP BY run_id, status"):
            counts.setdefault(rid, {})[st] = n
        best: dict[str, tuple[float, str]] = {}
        for rid, step, skey in self._read(
                "SELECT run_id, step_time_s, setting_key FROM trials WHERE status = ? ORDER BY step_time_s DESC",
                (TrialStatus.OK.value,)):
            best[rid] = (step, skey)  # slowest first, so the last write per run is its fastest
        base: dict[str, tuple[list[float], list[float]]] = {}
        for rid, step, peak in self._read(
                "SELECT run_id, step_time_s, peak_memory_bytes FROM trials WHERE status = ? AND role = 'baseline'",
                (TrialStatus.OK.value,)):
            steps, peaks = base.setdefault(rid, ([], []))
            steps.append(step)
            if peak is not None:
                peaks.append(peak)
        out = []
        for rid, created, hrec, wrec, ref_peak, evidence in rows:
            c = counts.get(rid, {})
            b = best.get(rid)
            steps, peaks = base.get(rid, ([], []))
            out.append(RunSummary(
                run_id=rid, hardware=HardwareFingerprint.model_validate_json(hrec),
                workload=WorkloadSignature.model_validate_json(wrec), created_at=created,
                n_trials=sum(c.values()), n_ok=c.get(TrialStatus.OK.value, 0),
                best_step_time_s=b[0] if b else None, best_setting=json.loads(b[1]) if b else None,
                baseline_step_time_s=statistics.median(steps) if steps else None,
                baseline_peak_bytes=statistics.median(peaks) if peaks else None, reference_peak_bytes=ref_peak,
                by_status=dict(c), evidence=evidence,
            ))
        return out

    # ---------------------------------------------------------------- priors
    def add_priors(self, run_id: str, priors: Iterable[Prior], *, hardware: Any, workload: Any) -> int:
        """Store the priors a run started from (kind 'prior'). Returns rows added or changed."""
        return self._add_prior_rows(run_id, "prior", priors, hardware, workload)

    def add_posteriors(self, run_id: str, priors: Iterable[Prior], *, hardware: Any, workload: Any,
                       reference_peak_bytes: float | None = None) -> int:
        """Store the knob effects a run learned (kind 'posterior', Prior-shaped: log-scale effects of a
        value relative to the knob's default). A later call for the same knob value replaces the row
        (the models refit as trials arrive). ``reference_peak_bytes``: the run's peak memory at the knob
        defaults (e.g. exp of the memory model's intercept), what memory effects are relative to; it lets
        a later seed move them in bytes. Returns rows added or changed."""
        return self._add_prior_rows(run_id, "posterior", priors, hardware, workload, reference_peak_bytes)

    def _add_prior_rows(self, run_id: str, kind: str, priors: Iterable[Prior], hardware: Any, workload: Any,
                        reference_peak_bytes: float | None = None) -> int:
        hw, wl = fingerprint_from(hardware), signature_from(workload)
        rows = list(priors)
        now = time.time()

        def tx(c: sqlite3.Connection) -> int:
            self._put_run(c, run_id, hw, wl, reference_peak_bytes=reference_peak_bytes)
            return sum(self._put_prior(c, run_id, kind, p, now) for p in rows)

        return self._write(tx)

    @staticmethod
    def _put_prior(c: sqlite3.Connection, run_id: str, kind: str, p: Prior, updated_at: float) -> int:
        if not isinstance(p, Prior):
            p = Prior.model_validate(p)
        vals = (p.time_mean, p.time_sd, p.mem_mean, p.mem_sd, p.source, p.rationale)
        if not all(math.isfinite(x) for x in vals[:4]):
            raise BankError(f"prior {p.feature}: non-finite effect {vals[:4]}; store finite means and sds")
        key = (run_id, kind, p.knob, _dumps(p.value))
        row = c.execute("SELECT time_mean, time_sd, mem_mean, mem_sd, source, rationale, updated_at FROM priors"
                        " WHERE run_id = ? AND kind = ? AND knob = ? AND value = ?", key).fetchone()
        if row is not None and (tuple(row[:6]) == vals or row[6] >= updated_at):
            return 0  # the same belief, or the stored one is newer (an older export imported later)
        c.execute("INSERT OR REPLACE INTO priors (run_id, kind, knob, value, time_mean, time_sd, mem_mean, mem_sd,"
                  " source, rationale, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*key, *vals, updated_at))
        return 1

    def priors(self, run_id: str | None = None, *, kind: str = "posterior") -> list[tuple[str, Prior]]:
        """``(run_id, Prior)`` rows of a kind ('prior' or 'posterior'), for one run or all."""
        sql = ("SELECT run_id, knob, value, time_mean, time_sd, mem_mean, mem_sd, source, rationale FROM priors"
               " WHERE kind = ?")
        args: list[Any] = [kind]
        if run_id is not None:
            sql += " AND run_id = ?"
            args.append(run_id)
        out = []
        for rid, knob, value, tm, ts, mm, ms, src, why in self._read(sql + " ORDER BY run_id, knob, value", args):
            out.append((rid, Prior(knob=knob, value=json.loads(value), time_mean=tm, time_sd=ts, mem_mean=mm,
                                   mem_sd=ms, source=src, rationale=why)))
        return out

    def posteriors(self, run_id: str | None = None) -> list[tuple[str, Prior]]:
        return self.priors(run_id, kind="posterior")

    # ------------------------------------------------------ kernels and LLM
    def add_kernel(self, op: str, sha256: str, path: str, verdict: str, *, detail: Mapping[str, Any] | None = None) -> bool:
        """Record a kernel candidate's verification verdict by content hash. The latest verdict for an
        ``(op, sha256)`` wins. Returns True when a row was added or changed."""
        sha = sha256.lower()
        if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
            raise BankError(f"kernel {op}: sha256 {sha256!r} is not 64 hex digits; pass hashlib.sha256(content).hexdigest()")
        if not op or not verdict:
            raise BankError(f"kernel {op!r} {sha[:12]}: op and verdict must be non-empty (e.g. verdict='pass')")
        d = _dumps(dict(detail or {}))
        now = time.time()
        return bool(self._write(lambda c: self._put_kernel(c, op, sha, path, verdict, d, now)))

    @staticmethod
    def _put_kernel(c: sqlite3.Connection, op: str, sha: str, path: str, verdict: str, detail: str, at: float) -> int:
        row = c.execute("SELECT path, verdict, detail, updated_at FROM kernels WHERE op = ? AND sha256 = ?", (op, sha)).fetchone()
        if row is not None and (tuple(row[:3]) == (path, verdict, detail) or row[3] >= at):
            return 0
        c.execute("INSERT OR REPLACE INTO kernels (op, sha256, path, verdict, detail, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                  (op, sha, path, verdict, detail, at))
        return 1

    def kernels(self, op: str | None = None) -> list[KernelRecord]:
        sql = "SELECT op, sha256, path, verdict, detail, updated_at FROM kernels"
        rows = self._read(sql + (" WHERE op = ?" if op else "") + " ORDER BY op, updated_at", (op,) if op else ())
        return [KernelRecord(o, s, p, v, json.loads(d), u) for o, s, p, v, d, u in rows]

    def add_llm_exchange(self, run_id: str, record: Mapping[str, Any]) -> bool:
        """Keep one LLM exchange (prompt, response, model, parsed priors: any JSON object). Returns True
        when it was new (the same run id and JSON are stored once)."""
        try:
            blob = _dumps(dict(record))
            json.loads(blob)
        except (TypeError, ValueError) as e:
            raise BankError(f"LLM exchange for run {run_id!r} is not a JSON object: {e}") from None
        uid = hashlib.sha256(f"{run_id}\n{blob}".encode()).hexdigest()
        now = time.time()
        return bool(self._write(lambda c: c.execute(
            "INSERT OR IGNORE INTO llm_exchanges (uid, run_id, record, added_at) VALUES (?, ?, ?, ?)",
            (uid, run_id, blob, now)).rowcount))

    def llm_exchanges(self, run_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT record FROM llm_exchanges" + (" WHERE run_id = ?" if run_id else "") + " ORDER BY added_at, uid"
        return [json.loads(r[0]) for r in self._read(sql, (run_id,) if run_id else ())]

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        """Counts for people: runs, trials by status, hardware kinds, workloads, priors, kernels, LLM rows."""
        one = lambda sql: self._read(sql)[0][0]  # noqa: E731
        by_status = {s: n for s, n in self._read("SELECT status, COUNT(*) FROM trials GROUP BY status ORDER BY status")}
        kinds = {k: n for k, n in self._read(
            "SELECT h.kind, COUNT(*) FROM runs r JOIN hardware h ON h.key = r.hardware_key GROUP BY h.kind ORDER BY h.kind")}
        return {
            "path": str(self.path),
            "schema_version": SCHEMA_VERSION,
            "file_bytes": self.path.stat().st_size if self.path.exists() else 0,
            "runs": one("SELECT COUNT(*) FROM runs"),
            "trials": sum(by_status.values()),
            "trials_by_status": by_status,
            "device_s": sum(_device_s(json.loads(r)) for (r,) in self._read("SELECT record FROM trials")),
            "runs_by_hardware": kinds,
            "workloads": one("SELECT COUNT(DISTINCT workload_key) FROM runs"),
            "priors": one("SELECT COUNT(*) FROM priors WHERE kind = 'prior'"),
            "posteriors": one("SELECT COUNT(*) FROM priors WHERE kind = 'posterior'"),
            "kernels": one("SELECT COUNT(*) FROM kernels"),
            "llm_exchanges": one("SELECT COUNT(*) FROM llm_exchanges"),
        }

    # -------------------------------------------------------- export/import
    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write every record as JSON lines (a ``meta`` line first), atomically. Returns the line count."""
        return _export.export_jsonl(self, path)

    def import_jsonl(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Merge an export into this bank in one transaction. Returns rows added (or updated) per type;
        importing the same file twice adds nothing the second time. A malformed line, a newer export
        format or a conflicting record raises BankError naming the file and line; nothing is stored."""
        return _export.import_jsonl(self, path)


def _device_s(rec: dict[str, Any]) -> float:
    cost = rec.get("cost") or {}
    return float(cost.get("wall_s", 0.0)) * int(cost.get("devices", 1))


def _is_busy(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg
