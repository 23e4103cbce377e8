"""scripts/bench_search.py's command line: bad input is one clear line, before any run."""

from __future__ import annotations

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
