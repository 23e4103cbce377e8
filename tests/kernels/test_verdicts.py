"""A run's kernel verdicts and the pins a launch carries are per candidate value, ``FILE`` or ``FILE@VARIANT``:
a variant that passed does not admit another variant of the same file, and the sha256 is the file's, so one
changed byte refuses every variant of it."""

from __future__ import annotations

import json
import shutil

import pytest

from infrarsi.kernels import verdicts
from infrarsi.kernels.loader import KERNELS_ROOT, sha256_of

RMSNORM = KERNELS_ROOT / "rmsnorm" / "triton_rows.py"


@pytest.fixture
def family(tmp_path, monkeypatch):
    """(a copy of the shipped RMSNorm file, the run directory); no pins or verdict file in the environment."""
    for var in (verdicts.ENV, verdicts.PINS_ENV):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "kernels" / "rmsnorm" / "triton_rows.py"
    path.parent.mkdir(parents=True)
    shutil.copy(RMSNORM, path)
    return path, tmp_path / "run"


def _pass(path) -> dict:
    return {"op": "rmsnorm", "verdict": "pass", "sha256": sha256_of(path)}


def _pins(monkeypatch, f) -> dict[str, str]:
    """Set the environment a pinned launch carries (verdicts.pinned); returns the pins."""
    pins = verdicts.pins_of(f)
    monkeypatch.setenv(verdicts.ENV, str(f))
    monkeypatch.setenv(verdicts.PINS_ENV, json.dumps(pins))
    return pins


def test_a_pin_for_one_variant_does_not_admit_another(family, monkeypatch):
    path, run = family
    rows4, rows16 = f"{path}@rows4", f"{path}@rows16"
    f = verdicts.record(run, {rows4: _pass(path)})
    assert _pins(monkeypatch, f) == {rows4: sha256_of(path)}  # keyed by the value, the file's sha256
    assert verdicts.refusal("rmsnorm", rows4) is None
    for other in (rows16, str(path)):  # the other variant, and the file with its constants as written
        assert "was not a verified candidate of this run" in verdicts.refusal("rmsnorm", other)
    # the verdict file alone (no pins: the workload checks it itself) holds it the same way
    monkeypatch.delenv(verdicts.PINS_ENV)
    assert verdicts.refusal("rmsnorm", rows4) is None
    assert "was never verified in this run" in verdicts.refusal("rmsnorm", rows16)


def test_each_variant_that_passed_is_pinned_and_a_changed_byte_refuses_both(family, monkeypatch):
    path, run = family
    rows4, rows16 = f"{path}@rows4", f"{path}@rows16"
    f = verdicts.record(run, {rows4: _pass(path), rows16: _pass(path)})
    assert set(_pins(monkeypatch, f)) == {rows4, rows16}
    assert verdicts.refusal("rmsnorm", rows4) is None and verdicts.refusal("rmsnorm", rows16) is None
    path.write_text(path.read_text() + "\n# one more byte\n")
    for value in (rows4, rows16):
        why = verdicts.refusal("rmsnorm", value)
        assert why is not None and "changed since it was verified at run start" in why and value in why, why
    monkeypatch.delenv(verdicts.PINS_ENV)  # and by the verdict file alone
    assert all("changed since it was verified" in verdicts.refusal("rmsnorm", v) for v in (rows4, rows16))


def test_a_variant_that_drifted_is_disqualified_alone(family, monkeypatch):
    path, run = family
    rows4, rows16 = f"{path}@rows4", f"{path}@rows16"
    verdicts.record(run, {rows4: _pass(path), rows16: _pass(path)})

    class T:
        id = 5
        evidence = [f"{verdicts.DRIFT}: rmsnorm={rows16} call 2: forward: output 0: 3 of 8 elements off"]

    assert verdicts.after_trial(run, T()) == [rows16]
    f = verdicts.verdict_file(run)
    assert set(_pins(monkeypatch, f)) == {rows4}
    assert "disqualified" in verdicts.refusal("rmsnorm", rows16) and verdicts.refusal("rmsnorm", rows4) is None
    assert verdicts.same_candidate(rows16, f"{path.parent}/../rmsnorm/triton_rows.py@rows16")
    assert not verdicts.same_candidate(rows16, rows4)
