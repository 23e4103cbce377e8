"""CLI tests: a recorded run (real writers; tests/conftest.py's run_dir) and the CLI as a user runs it, in a
subprocess."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


