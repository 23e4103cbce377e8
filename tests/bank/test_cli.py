"""`infrarsi bank ...`: stats, show, export, import, and where the bank file comes from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from infrarsi.bank import Bank
from infrarsi.bank.cli import app, bank_path

from .conftest import A100, LLAMA8B, make_trial

runner = CliRunner()


def _bank(path: Path) -> Bank:
    b = Bank(path)
    b.add_trials("a100-run", [make_trial(0, {"tp": 1}, 2.0, role="baseline"), make_trial(1, {"tp": 2}, 1.25),
                              make_trial(2, {"tp": 8}, None, status="oom", peak_gib=None)],
                 hardware=A100, workload=LLAMA8B)
    return b


def test_bank_path_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("INFRARSI_BANK", raising=False)
    assert bank_path(None) == Path("~/.infrarsi/bank.sqlite").expanduser()
    monkeypatch.setenv("INFRARSI_BANK", str(tmp_path / "env.sqlite"))
    assert bank_path(None) == tmp_path / "env.sqlite"
    assert bank_path(tmp_path / "opt.sqlite") == tmp_path / "opt.sqlite"


def test_stats_show_export_import(tmp_path):
    src = tmp_path / "src.sqlite"
    _bank(src).close()
    r = runner.invoke(app, ["stats", "--bank", str(src), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert (s["runs"], s["trials"], s["trials_by_status"]) == (1, 3, {"ok": 2, "oom": 1})

    r = runner.invoke(app, ["show", "--bank", str(src), "--json"])
    assert r.exit_code == 0 and json.loads(r.output.splitlines()[0])["best_step_time_s"] == 1.25
    r = runner.invoke(app, ["show", "a100-run", "--bank", str(src)])
    assert r.exit_code == 0 and "oom" in r.output and "tp=2" in r.output
    r = runner.invoke(app, ["show", "nope", "--bank", str(src)])
    assert r.exit_code == 1 and "no run 'nope'" in r.output and "a100-run" in r.output

    out = tmp_path / "x.jsonl"
    assert runner.invoke(app, ["export", str(out), "--bank", str(src)]).exit_code == 0
    dst = tmp_path / "dst.sqlite"
    r = runner.invoke(app, ["import", str(out), "--bank", str(dst)])
    assert r.exit_code == 0 and "1 runs, 3 trials" in r.output
    r = runner.invoke(app, ["import", str(out), "--bank", str(dst)])
    assert r.exit_code == 0 and "0 runs, 0 trials" in r.output
    assert len(Bank(dst).trials()) == 3


def test_errors_are_one_line_and_create_nothing(tmp_path):
    missing = tmp_path / "missing.sqlite"
    r = runner.invoke(app, ["stats", "--bank", str(missing)])
    assert r.exit_code == 1 and "no bank at" in r.output and not missing.exists()
    bad = tmp_path / "bad.sqlite"
    bad.write_text("garbage")
    r = runner.invoke(app, ["show", "--bank", str(bad)])
    assert r.exit_code == 1 and "not an SQLite file" in r.output
    notjson = tmp_path / "n.jsonl"
    notjson.write_text("{oops\n")
    r = runner.invoke(app, ["import", str(notjson), "--bank", str(tmp_path / "b.sqlite")])
    assert r.exit_code == 1 and "not JSON" in r.output


def test_the_installed_cli_mounts_bank_and_reads_infrarsi_bank(tmp_path):
    path = tmp_path / "env.sqlite"
    _bank(path).close()
    env = {**os.environ, "INFRARSI_BANK": str(path)}
    p = subprocess.run([sys.executable, "-c", "from infrarsi.cli import main; main()", "bank", "stats", "--json"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["trials"] == 3
