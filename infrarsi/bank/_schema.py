"""The bank's tables as numbered migrations (``schema_version`` holds one row), and the canonical JSON that is
a stored record's identity."""

from __future__ import annotations

import json
from typing import Any

SCHEMA_VERSION = 3
_SQLITE_MAGIC = b"SQLite format 3\x00"

# (version, what it adds, SQL). Never edit a released step: add a new one.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "hardware, workloads, runs, trials, priors", """
        CREATE TABLE schema_version (version INTEGER NOT NULL);
        CREATE TABLE hardware (key TEXT PRIMARY KEY, kind TEXT NOT NULL, family TEXT NOT NULL, record TEXT NOT NULL);
        CREATE TABLE workloads (key TEXT PRIMARY KEY, name TEXT NOT NULL, record TEXT NOT NULL);
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            hardware_key TEXT NOT NULL REFERENCES hardware(key),
            workload_key TEXT NOT NULL REFERENCES workloads(key),
            created_at REAL NOT NULL);
        CREATE TABLE trials (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            trial_id INTEGER NOT NULL,
            setting_key TEXT NOT NULL,         -- Setting.key(): sorted JSON
            status TEXT NOT NULL,
            role TEXT NOT NULL,
            step_time_s REAL,                  -- seconds, NULL unless ok
            peak_memory_bytes REAL,            -- bytes, NULL when unknown
            record TEXT NOT NULL,              -- the full Trial as canonical JSON
            added_at REAL NOT NULL,
            PRIMARY KEY (run_id, trial_id));
        CREATE TABLE priors (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            kind TEXT NOT NULL CHECK (kind IN ('prior', 'posterior')),
            knob TEXT NOT NULL,
            value TEXT NOT NULL,               -- JSON of the knob value
            time_mean REAL NOT NULL, time_sd REAL NOT NULL,
            mem_mean REAL NOT NULL, mem_sd REAL NOT NULL,
            source TEXT NOT NULL, rationale TEXT NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, kind, knob, value));
    """),
    (2, "verified kernels, LLM exchanges, a run's reference peak, trial status index", """
        ALTER TABLE runs ADD COLUMN reference_peak_bytes REAL;  -- peak memory at the knob defaults, bytes
        CREATE TABLE kernels (
            op TEXT NOT NULL, sha256 TEXT NOT NULL, path TEXT NOT NULL, verdict TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}', updated_at REAL NOT NULL,
            PRIMARY KEY (op, sha256));
        CREATE TABLE llm_exchanges (uid TEXT PRIMARY KEY, run_id TEXT NOT NULL, record TEXT NOT NULL, added_at REAL NOT NULL);
        CREATE INDEX trials_status ON trials(status);
        CREATE INDEX llm_run ON llm_exchanges(run_id);
    """),
    (3, "the kind of evidence of a run: measured (real trials) or simulated (what-if runs)", """
        ALTER TABLE runs ADD COLUMN evidence TEXT NOT NULL DEFAULT 'measured' CHECK (evidence IN ('measured', 'simulated'));
        UPDATE runs SET evidence = 'simulated' WHERE workload_key IN
            (SELECT key FROM workloads WHERE json_extract(record, '$.framework') = 'simulated');
    """),
]
EVIDENCE = ("measured", "simulated")
assert MIGRATIONS[-1][0] == SCHEMA_VERSION


def _dumps(obj: Any) -> str:
    """Canonical JSON: sorted keys, no spaces (the identity of a record)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _statements(sql: str) -> list[str]:
    """Split a migration script on ';' (the scripts hold no ';' inside literals)."""
    out = []
    for part in sql.split(";"):
        lines = [ln.split("--", 1)[0] for ln in part.splitlines()]
        stmt = "\n".join(lines).strip()
        if stmt:
            out.append(stmt)
    return out
