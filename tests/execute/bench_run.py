"""scripts/bench_prune.py's sub-commands on real minigpt-cpu trials, as the benchmark tests run them: a run directory
`infrarsi init` locked, then the sub-command on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_prune_on_minigpt(tmp_path: Path, *args: str) -> str:
    """`infrarsi init contracts/minigpt-cpu.toml --run-dir RUN`, then `bench_prune.py ARGS --run-dir RUN`; its stdout
    (both must exit 0)."""
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "init", str(ROOT / "contracts" / "minigpt-cpu.toml"),
                        "--run-dir", str(run)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_prune.py"), *args, "--run-dir", str(run)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout
