"""scripts/ci_tunes.sh, CI's end-to-end tunes after `make test`: what it refuses and how it fails a tune that does
not finish (the passing runs are the tunes themselves: minutes each, run by CI, not here)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci_tunes.sh"


def test_ci_runs_the_tunes_after_the_tests():
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()[:1] not in ("", "#")]
    assert lines.index("make test") < lines.index("scripts/ci_tunes.sh")


def test_an_unknown_tune_is_refused_naming_the_three():
    r = subprocess.run([str(SCRIPT), "demoo"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown tune 'demoo' (demo, torchtitan-cpu, megatron-cpu)" in r.stdout


def test_a_tune_past_its_limit_fails_with_its_code_wall_time_and_verdict(tmp_path):
    r = subprocess.run([str(SCRIPT), "torchtitan-cpu"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "CI_TUNE_LIMIT_S": "4", "CI_TUNES_DIR": str(tmp_path)})
    assert r.returncode == 1, r.stdout[-2000:]
    summary = r.stdout.split("=== ci_tunes:")[1]
    assert "torchtitan-cpu  exit 124" in summary and "FAIL: still running after its limit of 4 s, stopped" in summary
    assert (tmp_path / "torchtitan-cpu" / "log").is_file()
