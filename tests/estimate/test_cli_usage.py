"""`infrarsi estimate`'s refusals come before any fake step, with docs/cli.md's exit codes: a bad --set is bad
usage (2), a framework without an estimate is one line (1) and no 'stepping ... real model' line first."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi.cli import _register_tools, app

ROOT = Path(__file__).resolve().parents[2]


def _estimate(*args):
    _register_tools()
    return CliRunner().invoke(app, ["estimate", *map(str, args)])


@pytest.mark.parametrize("item, says", [("micro_batch_size=three", "'three' is not an integer"),
                                        ("no_such_knob=1", "not a knob of this contract"),
                                        ("micro_batch_size", "expected KNOB=VALUE")])
def test_a_bad_set_value_is_bad_usage(item, says):
    r = _estimate(ROOT / "contracts/minigpt-cpu.toml", "--set", item)
    assert r.exit_code == 2 and says in r.stderr, r.output
    assert "stepping" not in r.output


def test_a_simulated_contract_is_priced_by_the_step_time_model_without_a_fake_step():
    r = _estimate(ROOT / "contracts/sim-dense8b-h100x8.toml")
    assert r.exit_code == 0 and "predicted step time:" in r.stdout and "fits" in r.stdout, r.output
    assert "stepping" not in r.output
