"""scripts/bench_search.py's command line: bad input is one clear line, before any run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_search.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_zero_seeds_per_variant_is_refused():
    out = _run("--variant-seeds", "0", "--tuners", "random")
    assert out.returncode == 2 and "--variant-seeds 0: give 1 or more tuner seeds per variant" in out.stderr


def test_unknown_config_field_names_the_fields():
    out = _run("--set", "no_such_field=1", "--tuners", "cold")
    assert out.returncode == 2 and "'no_such_field' is not a TunerConfig field" in out.stderr


def test_table_shows_the_searchs_own_pick_and_the_best_tried(tmp_path):
    def run(tuner: str, seed: int, frac: float, **extra: float) -> dict:
        return {"landscape": "w~v0", "base": "w", "tuner": tuner, "seed": seed, "overhead_s": 0.1,
                "scores": {"30": {"frac": frac, "ooms": 1, "found_at": 20, "verified": frac, **extra}}}

    runs = [run("cold", 0, 0.90, own_pick=0.95, best_tried=0.97),
            run("cold", 1, 0.80, own_pick=0.85, best_tried=0.99),
            run("random", 0, 0.70)]  # a peer has no own pick, and a run saved before the columns none either
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(runs))
    out = _run("--table", str(path))
    assert out.returncode == 0, out.stderr
    header, cold, peer = out.stdout.splitlines()[1:4]
    assert header.split()[-5:] == ["pick", "own", "pick", "best", "tried"]
    cold, peer = cold.split(), peer.split()
    assert cold[1] == "cold" and cold[-4:-1] == ["0.850", "0.900", "0.980"]  # verified, own pick, best tried
    assert peer[1] == "random" and peer[-3:-1] == ["-", "-"]


def test_table_reads_an_append_file_one_run_per_line(tmp_path):
    # --append writes one run per line as each ends (a cut benchmark keeps what it measured); --table and
    # bench_compare.py read it as they read a --json list
    runs = [{"landscape": "w~v0", "base": "w", "tuner": "cold", "seed": s, "overhead_s": 0.1,
             "scores": {"30": {"frac": f, "ooms": 1, "found_at": 20, "verified": f}}} for s, f in ((0, 0.9), (1, 0.8))]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    out = _run("--table", str(path))
    assert out.returncode == 0, out.stderr
    row = out.stdout.splitlines()[2].split()
    assert row[1] == "cold" and row[3] == "0.850" and row[-1] == "(n=2)"



def test_paired_prints_b_minus_a_on_the_landscapes_and_seeds_both_ran(tmp_path, capsys):
    # --paired A B: per budget, row B minus row A on each (landscape, seed) both ran (bench_compare.py's table); a run
    # only one of them has is left out. In-process: three subprocesses of this script took ~60 s on the loaded machine
    spec = importlib.util.spec_from_file_location("bench_search", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def run(tuner: str, landscape: str, seed: int, at10: float, at20: float) -> dict:
        return {"landscape": landscape, "base": "w", "tuner": tuner, "seed": seed, "overhead_s": 0.1,
                "scores": {str(n): {"frac": f, "ooms": ooms, "found_at": 5, "verified": f}
                           for n, f, ooms in ((10, at10, 1), (20, at20, 2))}}

    runs = [run("priors", "w~v0", 0, 0.80, 0.90), run("priors-time", "w~v0", 0, 0.85, 0.92),
            run("priors", "w~v0", 1, 0.70, 0.90), run("priors-time", "w~v0", 1, 0.75, 0.94),
            run("priors", "w~v1", 0, 0.60, 0.80), run("priors-time", "w~v1", 0, 0.65, 0.86),
            run("priors", "w~v1", 1, 0.50, 0.90), run("priors-time", "w~v1", 1, 0.55, 0.88),
            run("priors-time", "w~v2", 0, 0.10, 0.10)]  # no priors run beside it: not a pair
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert bench.main(["--table", str(path), "--paired", "priors", "priors-time"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines.index("paired: priors-time minus priors, fraction of the optimum (best measured), per (landscape, seed) "
                       "both ran")
    at10, at20 = (line.split() for line in lines[head + 2:head + 4])
    # every pair +0.05 at 10 trials: the bootstrap interval is the one value; 4 pairs, 4 ahead, 0 behind
    assert at10 == ["10", "4", "0.650", "->", "0.700", "0.650", "->", "0.700", "0.500", "->", "0.550",
                    "+0.0500", "[+0.0500,", "+0.0500]", "4", "0", "1.0", "->", "1.0"]
    # +0.02, +0.04, +0.06, -0.02: mean +0.025; the 95% interval inside the pairs' range, around the mean; 3 ahead, 1 behind
    assert at20[:12] == ["20", "4", "0.900", "->", "0.900", "0.875", "->", "0.900", "0.800", "->", "0.860", "+0.0250"]
    lo, hi = float(at20[12].strip("[,")), float(at20[13].strip("]"))
    assert -0.02 <= lo < 0.025 < hi <= 0.06
    assert at20[14:] == ["3", "1", "2.0", "->", "2.0"]

    with pytest.raises(SystemExit) as e:
        bench.main(["--table", str(path), "--paired", "priors", "no-such-tuner"])
    assert "no landscape and seed ran both; the runs' tuners: priors, priors-time" in str(e.value.code)
    with pytest.raises(SystemExit) as e:
        bench.main(["--paired", "priors", "priors-time"])
    assert e.value.code == 2 and "--paired A B compares saved runs: give them with --table" in capsys.readouterr().err
