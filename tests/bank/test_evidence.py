"""The kind of evidence travels with a run: simulated (what-if) trials never seed a measured run unasked."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

from rich.console import Console

from infrarsi.adapters import get_adapter
from infrarsi.bank import Bank
from infrarsi.contract import load_contract
from infrarsi.bank.policy import bank_seed

from .conftest import make_trial

CONTRACT = Path(__file__).resolve().parents[2] / "contracts" / "minigpt-cpu.toml"
CPU = {"kind": "cpu", "devices": 1, "memory_capacity_gib": 0.75}


def _store(bank: Bank, run_id: str, framework: str, setting: dict) -> None:
    c = load_contract(CONTRACT)
    wl = {"framework": framework, **c.workload.args}
    bank.add_trials(run_id, [make_trial(0, setting, 0.5)], hardware=CPU, workload=wl)


def test_simulated_runs_are_kept_apart_and_only_seed_a_measured_run_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("INFRARSI_BANK", str(tmp_path / "bank.sqlite"))
    c = load_contract(CONTRACT)
    space = get_adapter("minigpt").knob_space(c)
    real = space.complete({**c.baseline, "micro_batch_size": 4}).to_dict()
    what_if = space.complete({**c.baseline, "micro_batch_size": 8, "intra_op_threads": 2}).to_dict()
    with Bank(tmp_path / "bank.sqlite") as bank:
        _store(bank, "measured-1", "minigpt", real)
        _store(bank, "simulated-1", "simulated", what_if)
        kinds = {r.run_id: r.evidence for r in bank.runs()}
    assert kinds == {"measured-1": "measured", "simulated-1": "simulated"}

    err = io.StringIO()
    initial, _, sources = bank_seed(space, c, tmp_path / "run", [], Console(file=err, width=200), evidence="measured")
    assert what_if not in [s.to_dict() for s in initial] and real in [s.to_dict() for s in initial]
    assert "1 simulated run(s) in the bank not used to seed this measured run" in err.getvalue()

    err = io.StringIO()
    initial, _, _ = bank_seed(space, c, tmp_path / "run", [], Console(file=err, width=200), evidence="measured",
                              from_simulated=True)
    assert what_if in [s.to_dict() for s in initial]
    assert "seeding from simulated runs too, as asked" in err.getvalue()


def test_a_bank_written_before_the_evidence_column_marks_simulated_runs(tmp_path):
    path = tmp_path / "bank.sqlite"
    with Bank(path) as bank:
        _store(bank, "sim", "simulated", {"micro_batch_size": 2})
        _store(bank, "real", "minigpt", {"micro_batch_size": 2})
    con = sqlite3.connect(path)  # back to schema 2: drop the column, forget the migration
    con.execute("ALTER TABLE runs DROP COLUMN evidence")
    con.execute("UPDATE schema_version SET version = 2")
    con.commit()
    con.close()
    with Bank(path) as bank:
        assert {r.run_id: r.evidence for r in bank.runs()} == {"sim": "simulated", "real": "measured"}
        bank.export_jsonl(tmp_path / "out.jsonl")
    with Bank(tmp_path / "copy.sqlite") as copy:  # export and import keep the kind
        copy.import_jsonl(tmp_path / "out.jsonl")
        assert {r.run_id: r.evidence for r in copy.runs()} == {"sim": "simulated", "real": "measured"}
