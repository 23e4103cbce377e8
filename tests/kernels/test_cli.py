"""`infrarsi kernels verify|bench|list` through the real typer app."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

from infrarsi.kernels.cli import app
from infrarsi.kernels.loader import list_candidates

from .conftest import ADVERSARIAL

runner = CliRunner()


def test_verify_json_pass_exit_0():
    path = next(c for c in list_candidates("rmsnorm") if c.name == "triton_rows.py@rows16")  # shared with test_verify
    res = runner.invoke(app, ["verify", str(path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["verdict"] == "pass" and out["reasons"] == [] and len(out["cases"]) >= 10
    assert {"family", "dtype", "seed", "errors"} <= set(out["cases"][0])


def test_verify_fail_exit_1_with_reasons():
    res = runner.invoke(app, ["verify", str(ADVERSARIAL / "timer_patch.py"), "--op", "rmsnorm", "--json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert out["verdict"] == "fail" and any(r.startswith("static-patch") for r in out["reasons"])


def test_verify_table_output():
    res = runner.invoke(app, ["verify", str(ADVERSARIAL / "fallback_torch.py"), "--op", "rmsnorm"])
    assert res.exit_code == 1 and "FAIL" in res.stdout and "rms_norm" in res.stdout


def test_bad_usage_exit_2():
    res = runner.invoke(app, ["verify", str(ADVERSARIAL / "racy.py")])  # folder is not an op
    assert res.exit_code == 2 and "--op" in res.output
    res = runner.invoke(app, ["verify", "no/such/file.py"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["verify", str(ADVERSARIAL / "racy.py"), "--op", "gelu"])
    assert res.exit_code == 2 and "gelu" in res.output


def test_bench_without_gpu_says_so_and_exits_2():
    if torch.cuda.is_available():
        return
    res = runner.invoke(app, ["bench", str(list_candidates("rmsnorm")[0])])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no CUDA GPU" in lines[0]


def test_list():
    res = runner.invoke(app, ["list", "rope"])
    assert res.exit_code == 0 and "triton_rows.py@rows4" in res.stdout and "triton_rows.py@rows16" in res.stdout
