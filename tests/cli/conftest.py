"""CLI tests: a recorded run (real writers, tests/apply's) and the CLI as a user runs it, in a subprocess."""

import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.testing.recorded_run import cached_recorded_run, copy_run

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


@pytest.fixture(scope="session")
def recorded_root(tmp_path_factory):
    return cached_recorded_run(tmp_path_factory.getbasetemp())


@pytest.fixture
def run_dir(recorded_root, tmp_path):
    return copy_run(recorded_root, tmp_path / "project")
