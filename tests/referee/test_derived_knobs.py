"""Hole 8 (a false refusal): data_parallel is derived (world / (tp x pp x cp)); it follows the knobs in scope.
An honest candidate that moves tensor parallel, and data parallel with it, is applied; one whose data
parallel breaks the world size is still refused."""

import pytest

from infrarsi.testing.recorded_run import write_verified_run

from .conftest import ROOT

SIM = (ROOT / "contracts" / "sim-dense8b-h100x8.toml").read_text()


def test_apply_takes_a_derived_data_parallel(cli, tmp_path):
    run = write_verified_run(tmp_path / "sim", SIM, {"tensor_parallel": 2, "data_parallel": 4})
    r = cli("apply", "--run-dir", run, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "data_parallel=4" in r.stdout and "tensor_parallel=2" in r.stdout


def test_apply_refuses_a_data_parallel_that_breaks_the_world_size(cli, tmp_path):
    run = write_verified_run(tmp_path / "sim", SIM, {"tensor_parallel": 2, "data_parallel": 2})
    r = cli("apply", "--run-dir", run, "--dry-run")
    assert r.returncode == 1 and "apply refused" in r.err and "!= world_size(8)" in r.err, r.stdout


@pytest.mark.slow
def test_tune_on_a_shipped_simulated_contract_reaches_apply(cli, project):
    text = SIM.replace("doctor_repeats = 5", "doctor_repeats = 3")
    (project / "sim.toml").write_text(text)
    r = cli("tune", "sim.toml", "--run-dir", "run", "--max-trials", "10")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "apply --dry-run: best of" in " ".join(r.stdout.split())
