"""scripts/bench_search.py's command line: bad input is one clear line, before any run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
