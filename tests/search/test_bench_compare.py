"""scripts/bench_compare.py: pairs two bench_search.py --json files by (landscape, seed) and says whether a change is
told apart from noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_compare.py"


def _runs(fracs: dict[tuple[str, int], float], tuner: str = "cold") -> list[dict]:
    return [{"landscape": land, "base": land.split("~")[0], "tuner": tuner, "seed": seed, "overhead_s": 0.1,
             "scores": {"30": {"frac": f, "ooms": 2, "found_at": 20, "verified": f}}}
            for (land, seed), f in fracs.items()]


def _run(tmp_path: Path, base: list[dict], new: list[dict], *extra: str) -> subprocess.CompletedProcess:
    a, b = tmp_path / "base.json", tmp_path / "new.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(new))
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), *extra], capture_output=True, text=True,
                          timeout=120)


def test_pairs_by_landscape_and_seed(tmp_path):
    base = {(f"w~v{i}", i): 0.8 for i in range(10)}
    new = {**{(f"w~v{i}", i): 0.9 for i in range(10)}, ("w~v99", 99): 0.1}  # an unpaired run is left out
    out = _run(tmp_path, _runs(base), _runs(new))
    assert out.returncode == 0, out.stderr
    row = out.stdout.splitlines()[1].split()
    assert row[:2] == ["30", "10"]  # budget, pairs
    assert "+0.1000" in out.stdout and "[+0.1000, +0.1000]" in out.stdout
    assert row[-5:-3] == ["10", "0"]  # ahead, behind


def test_noise_straddles_zero(tmp_path):
    base = {(f"w~v{i}", i): 0.9 for i in range(20)}
    new = {(f"w~v{i}", i): 0.9 + (0.1 if i % 2 else -0.1) for i in range(20)}
    out = _run(tmp_path, _runs(base), _runs(new))
    assert out.returncode == 0, out.stderr
    lo, hi = out.stdout.splitlines()[1].split("[")[1].split("]")[0].split(", ")
    assert float(lo) < 0 < float(hi)


def test_no_shared_run_is_a_clear_error(tmp_path):
    out = _run(tmp_path, _runs({("w~v0", 0): 0.9}), _runs({("w~v1", 1): 0.9}))
    assert out.returncode != 0 and "share no (landscape, seed)" in out.stderr


def test_several_tuners_need_a_choice(tmp_path):
    both = _runs({("w~v0", 0): 0.9}) + _runs({("w~v0", 0): 0.5}, tuner="random")
    out = _run(tmp_path, both, both)
    assert out.returncode != 0 and "--tuner" in out.stderr
    out = _run(tmp_path, both, both, "--tuner", "random")
    assert out.returncode == 0 and "+0.0000" in out.stdout


def test_by_landscape_pairs_other_seeds(tmp_path):
    base = _runs({(f"w~v{i}", i): 0.8 for i in range(5)})
    other = _runs({(f"w~v{i}", 1000 + i): 0.7 for i in range(5)})
    assert "share no (landscape, seed)" in _run(tmp_path, base, other).stderr
    out = _run(tmp_path, base, other, "--by", "landscape")
    assert out.returncode == 0, out.stderr
    assert "-0.1000" in out.stdout and out.stdout.splitlines()[1].split()[1] == "5"
    twice = base + _runs({("w~v0", 1000): 0.9})
    out = _run(tmp_path, twice, other, "--by", "landscape")
    assert out.returncode != 0 and "several runs of w~v0" in out.stderr
