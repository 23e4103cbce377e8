"""scripts/bench_cost_model.py on its smallest input: one row, its source named, predicted against published."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.adapters.megatron.pricing import README_SOURCE
from infrarsi.estimate.step_model import INTERVALS

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts/bench_cost_model.py"), *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_bench_cost_model_prints_one_row_per_measurement_with_its_source_and_error():
    r = _bench("--rows", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (row,) = out["rows"]
    assert row["source"].startswith(README_SOURCE) and row["fitted_on"] is True
    assert row["error"] == pytest.approx(row["predicted_s"] / row["published_s"] - 1)
    # the 1.7B row's measured/predicted is the top of the calibrated interval's spread, or inside it
    lo, hi = INTERVALS["calibrated"]
    assert lo <= row["published_s"] / row["predicted_s"] <= hi
    assert out["summary"] == {"collectives": "fixed", "small_work_terms": True, "torchtitan_kernels": "eager", "rows": 1,
                              "mean_abs_error": pytest.approx(abs(row["error"])),
                              "max_abs_error": pytest.approx(abs(row["error"])), "spearman_step_time": None}
    text = _bench("--rows", "1")
    assert text.returncode == 0 and "row 1.7B" in text.stdout and "1 rows (fitted on: in-sample; small-work terms on)" in text.stdout
    assert _bench("--rows", "0").returncode == 2


def test_held_out_rows_name_their_table_and_are_not_fitted_on():
    r = _bench("--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    held = [row for row in out["rows"] if not row["fitted_on"]]
    paper = [row for row in held if "arXiv 2205.05198, Tables 3+5" in row["source"]]
    bridge = [row for row in held if "Megatron-Bridge performance summary, 25.11, DGX-H100 table" in row["source"]]
    titan = [row for row in held if row["source"].startswith("torchtitan docs/performance.md, FSDP2 on 64 A100")]
    assert len(paper) == 8 and len(bridge) == 2 and len(titan) == 8 and len(held) == 18
    assert all(row["error"] == pytest.approx(row["predicted_s"] / row["published_s"] - 1) for row in held)
    # four models, each a landscape of two layouts (full recompute; SP + selective recompute)
    assert out["by_source"][paper[0]["source"].split(", 22B")[0]]["landscapes"] == 4
    # Megatron's held-out rows by scope; torchtitan's are a source of their own
    assert out["by_scope"]["held out, one node"]["rows"] == 2 and out["by_scope"]["held out, across nodes"]["rows"] == 8
    assert out["summary"]["rows"] == len(out["rows"]) == 22
    # torchtitan's rows are priced through its own path; their measured/predicted is the band the estimate prints
    lo, hi = INTERVALS["torchtitan"]
    assert all(row["regime"] == "torchtitan" and lo <= row["published_s"] / row["predicted_s"] <= hi for row in titan)
    # Llama 2 13B without AC, with layer and with op selective AC: one landscape of three layouts, its rank order
    spearman = out["by_source"]["torchtitan docs/performance.md, FSDP2 on 64 A100"]["landscape_spearman"]
    assert list(spearman) == ["torchtitan-Llama 2 13B"] and -1 <= spearman["torchtitan-Llama 2 13B"] <= 1
    # the layer and op AC rows, measured 0.5% apart, are one tie (1%): any order the model gives them is not judged
    ties = out["by_source"]["torchtitan docs/performance.md, FSDP2 on 64 A100"]["landscape_spearman_ties"]
    assert ties["torchtitan-Llama 2 13B"] == pytest.approx(1.0)
    # the small-work terms slow a hidden-1024 GPT on one node more the thinner its TP slices
    effect = [out["small_work_effect_by_tp"][str(tp)] for tp in (1, 2, 4, 8)]
    assert 1 < effect[0] < effect[1] < effect[2] < effect[3]


def test_torchtitan_rows_priced_with_fused_kernels_are_the_model_before_the_eager_terms():
    eager = {r["source"]: r for r in json.loads(_bench("--json").stdout)["rows"]}
    r = _bench("--json", "--torchtitan-kernels", "fused")
    assert r.returncode == 0, r.stderr
    fused = {row["source"]: row for row in json.loads(r.stdout)["rows"]}
    assert fused.keys() == eager.keys()
    for source, row in fused.items():
        if source.startswith("torchtitan"):  # the eager terms only add time, to torchtitan's rows only
            assert row["predicted_s"] < eager[source]["predicted_s"]
        else:
            assert row["predicted_s"] == eager[source]["predicted_s"]


def test_spearman_counts_measurements_within_the_tie_band_as_one_rank():
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_cost_model as b

    measured, predicted = [3.789, 4.280, 4.303], [3.479, 4.011, 3.942]  # Llama 2 13B: none, layer, op
    # strict: ranks (0, 1, 2) against (0, 2, 1): 1 - 6 * 2 / (3 * 8) = 0.5
    assert b.spearman(measured, predicted) == pytest.approx(0.5)
    # 4.303 / 4.280 = 1.0054, inside 1%: layer and op share rank 1.5 in both, so the ranks agree
    assert b.spearman(measured, predicted, 0.01) == pytest.approx(1.0)
    # without ties the tie-aware form is the classic rho; a tie the model orders the other way outside it still counts
    assert b.spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], 0.01) == pytest.approx(1 - 6 * 2 / (4 * 15))
