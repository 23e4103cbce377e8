"""The bank's SQLite store: records round-trip, many processes write at once, bad files are refused."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import sqlite3

import pytest

from infrarsi.bank import (
    SCHEMA_VERSION,
    Bank,
    BankConflictError,
    BankCorruptError,
    BankError,
    BankSchemaError,
)
from infrarsi.bank.store import MIGRATIONS, _statements
from infrarsi.trial import TrialStatus
from infrarsi.trial.prior import Prior

from .conftest import A100, GiB, H100, LLAMA8B, make_trial

SHA = hashlib.sha256(b"kernel source").hexdigest()


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_trials_round_trip_with_failures_and_run_summary(bank):
    trials = [
        make_trial(0, {"tp": 1, "mbs": 1}, 2.0, role="baseline", peak_gib=40),
        make_trial(1, {"tp": 2, "mbs": 1}, 1.5, peak_gib=30),
        make_trial(2, {"tp": 1, "mbs": 4}, None, status="oom", peak_gib=None),
        make_trial(3, {"tp": 8, "mbs": 1}, None, status="crash"),
    ]
    assert bank.add_trials("r1", trials, hardware=A100, workload=LLAMA8B) == 4
    got = bank.trials("r1")
    assert [st.trial for st in got] == trials  # every field, failures included
    assert got[2].trial.status is TrialStatus.OOM and got[2].trial.metrics.step_time_s is None
    assert got[0].hardware.family == "A100" and got[0].workload.hidden_size == 4096
    (run,) = bank.runs()
    assert (run.n_trials, run.n_ok, run.best_step_time_s, run.best_setting) == (4, 2, 1.5, {"mbs": 1, "tp": 2})
    assert run.baseline_step_time_s == 2.0 and run.baseline_peak_bytes == 40 * GiB
    assert run.by_status == {"ok": 2, "oom": 1, "crash": 1}
    s = bank.stats()
    assert s["trials_by_status"] == {"crash": 1, "ok": 2, "oom": 1}
    assert s["device_s"] == pytest.approx(4 * 30.0 * 8)
    assert s["runs_by_hardware"] == {"A100-80GB": 1}
    with sqlite3.connect(bank.path) as c:  # WAL: readers never block the one writer
        assert c.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    c.close()


def test_same_trials_twice_add_nothing_and_running_is_completed(bank):
    running = make_trial(0, {"tp": 2}, None, status="running")
    assert bank.add_trials("r", [running], hardware=A100, workload=LLAMA8B) == 1
    done = make_trial(0, {"tp": 2}, 1.2)
    assert bank.add_trials("r", [done], hardware=A100, workload=LLAMA8B) == 1
    assert bank.add_trials("r", [done], hardware=A100, workload=LLAMA8B) == 0
    assert bank.add_trials("r", [running], hardware=A100, workload=LLAMA8B) == 0  # stale copy: ignored
    assert [st.trial for st in bank.trials("r")] == [done]


def test_changing_a_finished_trial_is_refused_and_the_call_stores_nothing(bank):
    bank.add_trials("r", [make_trial(0, {"tp": 2}, 1.2)], hardware=A100, workload=LLAMA8B)
    with pytest.raises(BankConflictError, match=r"run 'r' trial 0.*another id"):
        bank.add_trials("r", [make_trial(1, {"tp": 4}, 1.0), make_trial(0, {"tp": 2}, 9.9)],
                        hardware=A100, workload=LLAMA8B)
    assert [st.trial.id for st in bank.trials("r")] == [0]  # trial 1 rolled back with the rest


def test_a_run_id_is_bound_to_its_hardware(bank):
    bank.add_trials("r", [make_trial(0, {"tp": 2}, 1.2)], hardware=A100, workload=LLAMA8B)
    with pytest.raises(BankConflictError, match="another hardware.*another id"):
        bank.add_trials("r", [make_trial(1, {"tp": 2}, 1.2)], hardware=H100, workload=LLAMA8B)


def test_posteriors_latest_wins_kernels_and_llm_rows(bank):
    p = Prior(knob="tp", value=2, time_mean=-0.1, time_sd=0.2, mem_mean=-0.4, mem_sd=0.1, source="bank")
    assert bank.add_posteriors("r", [p], hardware=A100, workload=LLAMA8B) == 1
    assert bank.add_posteriors("r", [p], hardware=A100, workload=LLAMA8B) == 0
    p2 = p.model_copy(update={"time_mean": -0.2, "time_sd": 0.05})
    assert bank.add_posteriors("r", [p2], hardware=A100, workload=LLAMA8B) == 1
    assert bank.posteriors("r") == [("r", p2)]
    assert bank.add_priors("r", [p], hardware=A100, workload=LLAMA8B) == 1
    assert bank.priors("r", kind="prior") == [("r", p)]

    assert bank.add_kernel("rmsnorm", SHA, "kernels/rmsnorm/cand1.py", "pass", detail={"max_err": 1e-6})
    assert not bank.add_kernel("rmsnorm", SHA, "kernels/rmsnorm/cand1.py", "pass", detail={"max_err": 1e-6})
    assert bank.add_kernel("rmsnorm", SHA, "kernels/rmsnorm/cand1.py", "fail")
    (k,) = bank.kernels("rmsnorm")
    assert (k.verdict, k.sha256) == ("fail", SHA)
    with pytest.raises(BankError, match="64 hex digits"):
        bank.add_kernel("rmsnorm", "abc", "x.py", "pass")

    rec = {"model": "gpt-x", "prompt": "effect of tp=2?", "response": {"tp=2": -0.1}}
    assert bank.add_llm_exchange("r", rec) is True
    assert bank.add_llm_exchange("r", dict(rec)) is False
    assert bank.llm_exchanges("r") == [rec]
    s = bank.stats()
    assert (s["posteriors"], s["priors"], s["kernels"], s["llm_exchanges"]) == (1, 1, 1, 1)


# ------------------------------------------------------------------ concurrency
def _writer(path: str, worker: int, n: int, batch: int) -> None:
    """One tuner process: its own run, plus trials in a run every worker shares, in small transactions."""
    b = Bank(path, busy_timeout_s=5.0, retries=50)
    hw = {**A100, "kind": f"A100-w{worker}"}
    for start in range(0, n, batch):
        own = [make_trial(i, {"tp": 1 + i % 4}, 1.0 + i / 100) for i in range(start, start + batch)]
        b.add_trials(f"run-{worker}", own, hardware=hw, workload=LLAMA8B)
        shared = [make_trial(worker * 10_000 + i, {"tp": 2}, 1.0) for i in range(start, start + batch)]
        b.add_trials("shared", shared, hardware=A100, workload=LLAMA8B)
        b.add_posteriors(f"run-{worker}", [Prior(knob="tp", value=2, time_mean=-start / 1000)],
                         hardware=hw, workload=LLAMA8B)
        b.add_llm_exchange(f"run-{worker}", {"worker": worker, "batch": start})
    b.add_kernel("rmsnorm", hashlib.sha256(f"k{worker}".encode()).hexdigest(), f"k{worker}.py", "pass")
    b.close()


def test_concurrent_writer_processes_lose_no_record(tmp_path):
    path = str(tmp_path / "bank.sqlite")  # created by the racing workers themselves
    workers, n, batch = 4, 40, 4
    ctx = mp.get_context("spawn")  # fresh interpreters: nothing shared but the file
    procs = [ctx.Process(target=_writer, args=(path, w, n, batch)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * workers
    b = Bank(path)
    s = b.stats()
    assert s["runs"] == workers + 1
    assert s["trials"] == 2 * workers * n
    assert len(b.trials("shared")) == workers * n
    assert {st.trial.id for st in b.trials("shared")} == {w * 10_000 + i for w in range(workers) for i in range(n)}
    assert s["posteriors"] == workers  # one knob value per run, updated in place
    assert s["llm_exchanges"] == workers * (n // batch)
    assert s["kernels"] == workers


# --------------------------------------------------------------- bad files
def test_a_garbage_file_is_refused_naming_it_and_left_untouched(tmp_path):
    path = tmp_path / "bank.sqlite"
    path.write_bytes(b"this is not a database\n" * 100)
    before = _sha(path)
    with pytest.raises(BankCorruptError, match=rf"{path}.*not an SQLite file.*import"):
        Bank(path)
    assert _sha(path) == before


def test_a_damaged_bank_is_refused_naming_it_and_left_untouched(tmp_path):
    path = tmp_path / "bank.sqlite"
    b = Bank(path)
    b.add_trials("r", [make_trial(i, {"tp": i}, 1.0 + i) for i in range(300)], hardware=A100, workload=LLAMA8B)
    b.close()
    data = bytearray(path.read_bytes())
    for off in (4096 * 3, 4096 * 10):  # overwrite the start of two b-tree pages
        data[off:off + 256] = b"\xff" * 256
    path.write_bytes(bytes(data))
    before = _sha(path)
    with pytest.raises(BankCorruptError, match=rf"{path} is corrupt"):
        Bank(path)
    assert _sha(path) == before


def test_a_newer_schema_is_refused_with_both_versions_and_the_fix(tmp_path):
    path = tmp_path / "bank.sqlite"
    b = Bank(path)
    b.add_trials("r", [make_trial(0, {"tp": 2}, 1.2)], hardware=A100, workload=LLAMA8B)
    b.close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 7,))
    c.close()
    before = _sha(path)
    with pytest.raises(BankSchemaError) as e:
        Bank(path)
    msg = str(e.value)
    assert f"schema version {SCHEMA_VERSION + 7}" in msg and f"version {SCHEMA_VERSION})" in msg
    assert "upgrade InfraRSI" in msg and str(path) in msg
    assert _sha(path) == before
    with sqlite3.connect(path) as c:  # the data is still there
        assert c.execute("SELECT COUNT(*) FROM trials").fetchone() == (1,)
    c.close()


def test_an_sqlite_file_that_is_not_a_bank_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE users (name TEXT)")
    c.close()
    before = _sha(path)
    with pytest.raises(BankSchemaError, match="not an InfraRSI bank"):
        Bank(path)
    assert _sha(path) == before


def test_a_missing_bank_is_not_created_when_reading(tmp_path):
    with pytest.raises(BankError, match="no bank at"):
        Bank(tmp_path / "nope.sqlite", create=False)
    assert not (tmp_path / "nope.sqlite").exists()


def test_an_old_schema_is_migrated_forward_keeping_its_data_and_a_backup(tmp_path):
    path = tmp_path / "bank.sqlite"
    b = Bank(tmp_path / "ref.sqlite")  # the v1 rows are written as v1 code would have: same tables
    b.add_trials("old", [make_trial(0, {"tp": 2}, 1.2)], hardware=A100, workload=LLAMA8B)
    with sqlite3.connect(path) as c:
        for stmt in _statements(MIGRATIONS[0][2]):
            c.execute(stmt)
        c.execute("INSERT INTO schema_version VALUES (1)")
        ref = sqlite3.connect(b.path)
        v1_columns = {"runs": "run_id, hardware_key, workload_key, created_at"}
        for table in ("hardware", "workloads", "runs", "trials"):
            rows = ref.execute(f"SELECT {v1_columns.get(table, '*')} FROM {table}").fetchall()
            c.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)
        ref.close()
    c.close()
    b.close()
    migrated = Bank(path)
    assert migrated.stats()["schema_version"] == SCHEMA_VERSION
    assert migrated.runs()[0].reference_peak_bytes is None  # the column v2 added, empty for old runs
    assert [st.trial for st in migrated.trials("old")] == [make_trial(0, {"tp": 2}, 1.2)]
    assert migrated.add_kernel("rmsnorm", SHA, "k.py", "pass")  # a v2 table works
    backup = tmp_path / "bank.sqlite.schema1.bak"
    with sqlite3.connect(backup) as c:
        assert c.execute("SELECT version FROM schema_version").fetchone() == (1,)
        assert c.execute("SELECT COUNT(*) FROM trials").fetchone() == (1,)
    c.close()


# ------------------------------------------------------------ export/import
def _fill(b: Bank) -> None:
    b.add_trials("a100-run", [make_trial(0, {"tp": 1}, 2.0, role="baseline"), make_trial(1, {"tp": 2}, 1.4),
                              make_trial(2, {"tp": 8}, None, status="oom", peak_gib=None)],
                 hardware=A100, workload=LLAMA8B)
    b.add_trials("h100-run", [make_trial(0, {"tp": 4}, 0.9)], hardware=H100, workload=LLAMA8B)
    b.add_posteriors("a100-run", [Prior(knob="tp", value=2, time_mean=-0.3, time_sd=0.1, mem_mean=-0.5, mem_sd=0.1)],
                     hardware=A100, workload=LLAMA8B, reference_peak_bytes=50 * GiB)
    b.add_priors("a100-run", [Prior(knob="tp", value=2, time_mean=-0.1, source="llm", rationale="halves weights")],
                 hardware=A100, workload=LLAMA8B)
    b.add_kernel("rmsnorm", SHA, "kernels/rmsnorm/c1.py", "pass")
    b.add_llm_exchange("a100-run", {"prompt": "p", "response": "r"})


def _records(path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if json.loads(ln)["type"] != "meta"]


def test_export_import_round_trip_is_complete_and_idempotent(tmp_path):
    src = Bank(tmp_path / "src.sqlite")
    _fill(src)
    out = tmp_path / "bank.jsonl"
    assert src.export_jsonl(out) == 1 + 2 + 1 + 2 + 4 + 2 + 1 + 1  # meta, hw, wl, runs, trials, priors, kernel, llm
    dst = Bank(tmp_path / "dst.sqlite")
    assert dst.import_jsonl(out) == {"runs": 2, "trials": 4, "priors": 2, "kernels": 1, "llm_exchanges": 1}
    assert dst.import_jsonl(out) == {"runs": 0, "trials": 0, "priors": 0, "kernels": 0, "llm_exchanges": 0}
    assert [(s.run_id, s.trial) for s in dst.trials()] == [(s.run_id, s.trial) for s in src.trials()]
    assert dst.posteriors() == src.posteriors() and dst.priors(kind="prior") == src.priors(kind="prior")
    assert dst.kernels() == src.kernels() and dst.llm_exchanges() == src.llm_exchanges()
    assert dst.runs() == src.runs()  # reference peaks, baselines, best settings included
    again = tmp_path / "again.jsonl"
    dst.export_jsonl(again)
    assert _records(again) == _records(out)


def test_import_merges_into_a_bank_with_other_runs(tmp_path):
    src = Bank(tmp_path / "src.sqlite")
    _fill(src)
    out = tmp_path / "bank.jsonl"
    src.export_jsonl(out)
    dst = Bank(tmp_path / "dst.sqlite")
    dst.add_trials("local", [make_trial(0, {"tp": 2}, 1.1)], hardware=H100, workload=LLAMA8B)
    dst.import_jsonl(out)
    assert {r.run_id for r in dst.runs()} == {"local", "a100-run", "h100-run"}


def test_a_broken_or_conflicting_import_stores_nothing(tmp_path, bank):
    src = Bank(tmp_path / "src.sqlite")
    _fill(src)
    out = tmp_path / "bank.jsonl"
    src.export_jsonl(out)
    lines = out.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-2] + [lines[-2][: len(lines[-2]) // 2]]) + "\n")
    with pytest.raises(BankError, match=rf"{cut}:{len(lines) - 1}: not JSON"):
        bank.import_jsonl(cut)
    assert bank.stats()["trials"] == 0

    bank.add_trials("a100-run", [make_trial(1, {"tp": 2}, 7.7)], hardware=A100, workload=LLAMA8B)
    with pytest.raises(BankConflictError, match=rf"{out}:\d+: run 'a100-run' trial 1"):
        bank.import_jsonl(out)
    assert bank.stats()["trials"] == 1 and bank.stats()["kernels"] == 0

    newer = tmp_path / "newer.jsonl"
    meta = json.loads(lines[0])
    newer.write_text(json.dumps({**meta, "export_version": 99}) + "\n")
    with pytest.raises(BankSchemaError, match="export format version 99"):
        bank.import_jsonl(newer)


def test_an_older_export_does_not_overwrite_newer_posteriors(tmp_path):
    a = Bank(tmp_path / "a.sqlite")
    old = Prior(knob="tp", value=2, time_mean=-0.1)
    a.add_posteriors("r", [old], hardware=A100, workload=LLAMA8B)
    a.export_jsonl(tmp_path / "old.jsonl")
    new = old.model_copy(update={"time_mean": -0.3})
    a.add_posteriors("r", [new], hardware=A100, workload=LLAMA8B)
    assert a.import_jsonl(tmp_path / "old.jsonl")["priors"] == 0
    assert a.posteriors("r") == [("r", new)]


def test_one_bank_shared_by_threads(bank):
    from concurrent.futures import ThreadPoolExecutor

    def add(w: int) -> int:
        return bank.add_trials(f"t{w}", [make_trial(i, {"tp": 2}, 1.0 + i) for i in range(10)],
                               hardware=A100, workload=LLAMA8B)

    with ThreadPoolExecutor(4) as ex:
        assert list(ex.map(add, range(8))) == [10] * 8
    assert bank.stats()["trials"] == 80
