"""Export a bank as JSON lines (a ``meta`` line, then hardware, workloads, runs, trials, priors, kernels and
LLM exchanges, in key order) and merge such an export into a bank in one transaction."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..trial.record import Trial
from ..io import atomic_write
from ..trial.prior import Prior
from ._schema import SCHEMA_VERSION, _dumps
from .errors import BankError, BankSchemaError
from .fingerprint import HardwareFingerprint
from .signature import WorkloadSignature

if TYPE_CHECKING:
    from .store import Bank

EXPORT_FORMAT = "infrarsi-bank"
EXPORT_VERSION = 1


def export_jsonl(bank: Bank, path: str | os.PathLike[str]) -> int:
    """Write every record as JSON lines (a ``meta`` line first), atomically. Returns the line count."""
    c = bank._connection()

    def lines() -> list[dict[str, Any]]:
        c.execute("BEGIN")  # one read snapshot: a concurrent writer cannot tear the export
        try:
            out: list[dict[str, Any]] = [{"type": "meta", "format": EXPORT_FORMAT, "export_version": EXPORT_VERSION,
                                          "schema_version": SCHEMA_VERSION, "exported_at": time.time()}]
            for k, rec in c.execute("SELECT key, record FROM hardware ORDER BY key"):
                out.append({"type": "hardware", "key": k, "record": json.loads(rec)})
            for k, rec in c.execute("SELECT key, record FROM workloads ORDER BY key"):
                out.append({"type": "workload", "key": k, "record": json.loads(rec)})
            for rid, hk, wk, at, ref, ev in c.execute(
                    "SELECT run_id, hardware_key, workload_key, created_at, reference_peak_bytes, evidence FROM runs"
                    " ORDER BY created_at, run_id"):
                out.append({"type": "run", "run_id": rid, "hardware": hk, "workload": wk, "created_at": at,
                            "reference_peak_bytes": ref, "evidence": ev})
            for rid, rec, at in c.execute("SELECT run_id, record, added_at FROM trials ORDER BY run_id, trial_id"):
                out.append({"type": "trial", "run_id": rid, "record": json.loads(rec), "added_at": at})
            for row in c.execute("SELECT run_id, kind, knob, value, time_mean, time_sd, mem_mean, mem_sd, source,"
                                 " rationale, updated_at FROM priors ORDER BY run_id, kind, knob, value"):
                rid, kind, knob, value, tm, ts, mm, ms, src, why, at = row
                out.append({"type": "prior", "run_id": rid, "kind": kind, "updated_at": at,
                            "prior": {"knob": knob, "value": json.loads(value), "time_mean": tm, "time_sd": ts,
                                      "mem_mean": mm, "mem_sd": ms, "source": src, "rationale": why}})
            for op, sha, p, v, d, at in c.execute("SELECT op, sha256, path, verdict, detail, updated_at FROM kernels ORDER BY op, sha256"):
                out.append({"type": "kernel", "op": op, "sha256": sha, "path": p, "verdict": v,
                            "detail": json.loads(d), "updated_at": at})
            for rid, rec, at in c.execute("SELECT run_id, record, added_at FROM llm_exchanges ORDER BY added_at, uid"):
                out.append({"type": "llm", "run_id": rid, "record": json.loads(rec), "added_at": at})
            return out
        finally:
            c.execute("COMMIT")

    records = bank._retry(lines)
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, "".join(_dumps(r) + "\n" for r in records))
    return len(records)


def import_jsonl(bank: Bank, path: str | os.PathLike[str]) -> dict[str, int]:
    """Merge an export into this bank in one transaction. Returns rows added (or updated) per type;
    importing the same file twice adds nothing the second time. A malformed line, a newer export
    format or a conflicting record raises BankError naming the file and line; nothing is stored."""
    src = Path(path)
    try:
        text = src.read_text()
    except OSError as e:
        raise BankError(f"cannot read export {src}: {e}") from None
    parsed: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BankError(f"{src}:{n}: not JSON ({e}); the file is truncated or not a bank export") from None
        if not isinstance(obj, dict) or "type" not in obj:
            raise BankError(f"{src}:{n}: a record needs a 'type' field; is this a bank export?")
        parsed.append((n, obj))
    if not parsed or parsed[0][1].get("type") != "meta" or parsed[0][1].get("format") != EXPORT_FORMAT:
        raise BankError(f"{src}: not an InfraRSI bank export (the first line must be the meta record); "
                        f"make one with `infrarsi bank export FILE`")
    ver = parsed[0][1].get("export_version", 0)
    if not isinstance(ver, int) or ver > EXPORT_VERSION:
        raise BankSchemaError(f"{src}: export format version {ver} is newer than this InfraRSI reads "
                              f"(version {EXPORT_VERSION}); upgrade InfraRSI (pip install -U infrarsi)")

    def tx(c: sqlite3.Connection) -> dict[str, int]:
        counts = {"runs": 0, "trials": 0, "priors": 0, "kernels": 0, "llm_exchanges": 0}
        hws: dict[str, HardwareFingerprint] = {}
        wls: dict[str, WorkloadSignature] = {}
        for n, obj in parsed[1:]:
            try:
                counts_add = _import_one(bank, c, obj, hws, wls)
            except BankError as e:
                raise type(e)(f"{src}:{n}: {e}") from None
            except (KeyError, TypeError, ValueError) as e:
                raise BankError(f"{src}:{n}: bad {obj.get('type')} record ({type(e).__name__}: {e})") from None
            for k, v in counts_add.items():
                counts[k] += v
        return counts

    return bank._write(tx)


def _import_one(bank: Bank, c: sqlite3.Connection, obj: dict[str, Any], hws: dict[str, HardwareFingerprint],
                wls: dict[str, WorkloadSignature]) -> dict[str, int]:
    kind = obj["type"]
    if kind == "hardware":
        hws[obj["key"]] = HardwareFingerprint.model_validate(obj["record"])
        return {}
    if kind == "workload":
        wls[obj["key"]] = WorkloadSignature.model_validate(obj["record"])
        return {}
    if kind == "run":
        hw, wl = hws.get(obj["hardware"]), wls.get(obj["workload"])
        if hw is None or wl is None:
            raise BankError(f"run {obj['run_id']!r} names hardware/workload keys not defined above it")
        return {"runs": int(bank._put_run(c, obj["run_id"], hw, wl, created_at=float(obj["created_at"]),
                                          reference_peak_bytes=obj.get("reference_peak_bytes"),
                                          evidence=obj.get("evidence")))}
    if kind == "trial":
        _need_run(c, obj["run_id"])
        return {"trials": bank._put_trial(c, obj["run_id"], Trial.model_validate(obj["record"]),
                                          added_at=float(obj["added_at"]))}
    if kind == "prior":
        _need_run(c, obj["run_id"])
        if obj["kind"] not in ("prior", "posterior"):
            raise BankError(f"prior kind {obj['kind']!r}: expected 'prior' or 'posterior'")
        return {"priors": bank._put_prior(c, obj["run_id"], obj["kind"], Prior.model_validate(obj["prior"]),
                                          float(obj["updated_at"]))}
    if kind == "kernel":
        return {"kernels": bank._put_kernel(c, obj["op"], obj["sha256"], obj["path"], obj["verdict"],
                                            _dumps(obj.get("detail", {})), float(obj["updated_at"]))}
    if kind == "llm":
        blob = _dumps(obj["record"])
        uid = hashlib.sha256(f"{obj['run_id']}\n{blob}".encode()).hexdigest()
        return {"llm_exchanges": c.execute(
            "INSERT OR IGNORE INTO llm_exchanges (uid, run_id, record, added_at) VALUES (?, ?, ?, ?)",
            (uid, obj["run_id"], blob, float(obj["added_at"]))).rowcount}
    if kind == "meta":
        return {}
    raise BankError(f"unknown record type {kind!r}; expected hardware, workload, run, trial, prior, kernel or llm")


def _need_run(c: sqlite3.Connection, run_id: str) -> None:
    if c.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
        raise BankError(f"record for run {run_id!r} comes before (or without) its run record")
