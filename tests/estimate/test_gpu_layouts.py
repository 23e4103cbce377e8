"""The layouts part of the device check (scripts/gpu_layouts.py, run by scripts/gpu_check.sh): its plan is the
estimate's own prediction and the Megatron adapter's own launch of each single-GPU layout of
contracts/megatron-gpu-check-h100x1.toml; the CPU rehearsal trains every dry layout for real and prints the table;
the summary judges issue 68's targets."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi.adapters.registry import SPECS
from infrarsi.adapters.workload import Workload
from infrarsi.cli import _register_tools, app
from infrarsi.contract.model import load_contract
from infrarsi.estimate import EstimateError
from infrarsi.estimate import step_model as sm

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts/megatron-gpu-check-h100x1.toml"
_spec = importlib.util.spec_from_file_location("gpu_layouts", ROOT / "scripts/gpu_layouts.py")
gl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gl)


def _row(layout: str, measured: float | None, predicted: float) -> dict:
    r = {"layout": layout, "predicted_s": predicted, "low_s": predicted * 0.9, "high_s": predicted * 1.1,
         "regime": "calibrated", "predicted_gib": 10.0, "wall_s": 12.0, "peak_gib": 9.0}
    return {**r, "measured_s": measured} if measured is not None else {**r, "error": "exit 1, 0 step line(s): OOM"}


def test_summary_judges_mae_rank_order_and_the_fastest():
    good = [_row("a", 1.00, 1.02), _row("b", 1.20, 1.18), _row("c", 1.50, 1.55)]
    s = gl.summary(good, judged=True)
    assert s["mae"] == pytest.approx((0.02 + 0.02 / 1.2 + 0.05 / 1.5) / 3)
    assert s["spearman"] == pytest.approx(1.0) and s["fastest_gap"] == 0.0 and s["targets_missed"] == []
    # the model's order reversed, optimistic by half, and its fastest the slowest: every target missed
    bad = [_row("a", 1.00, 0.80), _row("b", 1.20, 0.60), _row("c", 1.50, 0.50), _row("d", None, 0.4)]
    s = gl.summary(bad, judged=True)
    assert s["spearman"] == pytest.approx(-1.0) and s["fastest_gap"] == pytest.approx(0.5)
    assert [m.split()[0] for m in s["targets_missed"]] == ["1", "MAE", "Spearman", "predicted"]
    table = gl.markdown({"contract": "c.toml", "commit": "abc", "made": "now", "warmup_steps": 3,
                         "device": "H100-80GB"}, bad, s, "NVIDIA H100 80GB HBM3", judged=True,
                        seconds=95.0)
    assert "| d | **failed** |" in table and "| a | 1.0000 | 0.800 [0.720-0.880] | -20.0% | 1 | 3 |" in table
    assert "Summary: 3 of 4 layouts timed in 95 s; mean absolute error 45.6%" in table


def test_spearman_ranks_ties_by_their_mean_rank():
    assert gl.ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert gl.spearman([1.0, 2.0], [5.0, 5.0]) is None and gl.spearman([1.0], [1.0]) is None
    assert gl.spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)


def test_the_plan_is_the_estimate_and_the_adapter_launch_of_each_layout():
    """Nine layouts (micro-batch 1/2/4 x recompute none/selective/full): each command is the launch with that
    layout's flags, each prediction the number `infrarsi estimate --set ... --json` prints for it."""
    plan = gl.make_plan(dry=False)
    rows = plan["layouts"]
    assert [r["layout"] for r in rows] == [f"mbs {m}, recompute {rc}" for rc in ("none", "selective", "full")
                                           for m in (1, 2, 4)]
    for r in rows:
        a = r["args"]
        assert r["program"] == "launchers/pretrain_gpt_cpu.py"
        assert a[a.index("--micro-batch-size") + 1] == str(r["setting"]["micro_batch_size"])
        assert a[a.index("--global-batch-size") + 1] == "8" and a[a.index("--num-layers") + 1] == "12"
        rc = r["setting"]["recompute_granularity"]
        assert ("--recompute-granularity" in a) == (rc != "none")
        assert 0 < r["low_s"] < r["predicted_s"] < r["high_s"]
    _register_tools()
    out = CliRunner().invoke(app, ["estimate", str(CONTRACT), "--fastest", "9", "--json"])
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)["ranking"]["fastest"]
    by_layout = {(p["setting"]["micro_batch_size"], p["setting"]["recompute_granularity"]): p for p in listed}
    assert len(by_layout) == 9 and all(p["setting"]["data_parallel"] == 1 for p in listed)  # one GPU
    for r in rows:
        p = by_layout[(r["setting"]["micro_batch_size"], r["setting"]["recompute_granularity"])]
        assert (p["step_time_s"], p["low_s"], p["high_s"]) == pytest.approx((r["predicted_s"], r["low_s"], r["high_s"]))


def test_a_layout_that_fails_is_reported_with_its_log_and_a_repeated_failure_stops_the_run(tmp_path):
    """Each layout's own process: one that exits on a flag the loop refuses gives a row saying so and its log; after
    two such, the rest are skipped (the device's minutes are not spent on the same failure); past the budget, none
    starts."""
    row = {"layout": "bad", "program": "launchers/pretrain_gpt_cpu.py", "args": ["--no-such-flag"], "predicted_s": 1.0}
    plan = {"layouts": [row, row, row], "warmup_steps": 1, "timeout_s": 120}
    rows = gl.time_all(plan, tmp_path, budget_s=600)
    assert rows[0]["error"].startswith("exit 2, 0 step line(s): pretrain_gpt.py: error: ")
    assert "--no-such-flag" in rows[0]["error"]
    assert rows[2]["error"].startswith("skipped: the first two layouts did not train")
    assert "--no-such-flag" in (tmp_path / "gpu_layouts_logs" / "2.log").read_text()
    assert [r["error"] for r in gl.time_all(plan, tmp_path, budget_s=-1)] == ["skipped: the -1 s budget was spent"] * 3


def test_a_contract_of_part_of_a_node_is_priced_and_other_counts_refused():
    contract = load_contract(CONTRACT, adapters=SPECS)
    for devices, ok in ((1, True), (2, True), (3, False), (12, False), (16, True)):
        c = contract.model_copy(update={"hardware": contract.hardware.model_copy(update={"devices": devices})})
        wl = Workload(c, CONTRACT.parent)
        if ok:
            assert sm.cost_workload(wl).world_size == devices
        else:
            with pytest.raises(EstimateError, match=f"devices = {devices}: .* use a divisor or a multiple of 8"):
                sm.cost_workload(wl)


@pytest.mark.slow
def test_the_dry_layouts_part_trains_every_layout_and_prints_the_table(tmp_path):
    """`GPU_CHECK_PARTS=layouts scripts/gpu_check.sh --dry`: megatron-core's GPT trained on the CPU at each dry
    layout (one process each), the table and summary written (about a minute on 2 loaded cores; the fast tests
    above keep the plan, the summary and the table covered)."""
    env = {**os.environ, "OUT": str(tmp_path), "GPU_CHECK_PARTS": "layouts"}
    out = subprocess.run(["scripts/gpu_check.sh", "--dry"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    table = (tmp_path / "gpu_layouts.md").read_text()
    rows = [ln.split("|")[1:-1] for ln in table.splitlines() if ln.startswith("| mbs ")]
    assert [r[0].strip() for r in rows] == [f"mbs {m}, recompute {rc}" for m, rc in gl.DRY_LAYOUTS]
    assert all(len(r) == 9 and float(r[1]) > 0 and r[3].strip() == "n/a" for r in rows)
    assert all(float(r[2].split("[")[0]) > 0 for r in rows)  # the H100 prediction beside each
    assert re.search(r"Summary: 5 of 5 layouts timed in \d+ s; mean absolute error n/a \(no CPU step model\)", table)
    assert "Targets missed: not judged (dry run" in table
    data = json.loads((tmp_path / "gpu_layouts.json").read_text())
    assert data["device"] == "cpu" and all(r["measured_s"] > 0 and len(r["steps_s"]) == 4 for r in data["rows"])
    assert not (tmp_path / "gpu_check.md").exists()  # the kernels part was not asked for
    log = (tmp_path / "gpu_layouts_logs" / "1.log").read_text()  # each layout's output, to read a failure by
    assert log.startswith("$ launchers/pretrain_gpt_cpu.py ") and "exit 0" in log and "iteration        4/" in log
