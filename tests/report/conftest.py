"""Report tests read a recorded run written by the real writers (infrarsi/testing/recorded_run.py)."""

import io
import os
import shutil
import subprocess

import pytest
from rich.console import Console

from infrarsi.testing.recorded_run import copy_run


@pytest.fixture
def consoles():
    out, err = io.StringIO(), io.StringIO()
    return (Console(file=out, width=200, highlight=False), Console(file=err, width=200, highlight=False), out, err)


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium; installed with apt-get when missing and root (CI on a fresh machine); else skipped, and
    pytest -ra says why."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None and os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it needs root: `make test` as root does, or "
                    "apt-get install chromium")
    if exe is None and shutil.which("apt-get"):
        env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True, timeout=1200)
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed and `apt-get install chromium` failed (not root, or no network)")
    return exe


@pytest.fixture(scope="session")
def reported_run(recorded_root, tmp_path_factory):
    """A copy of the recorded run after `infrarsi report` (run once): (run_dir, what it printed)."""
    from infrarsi.stages import report as stage

    run = copy_run(recorded_root, tmp_path_factory.mktemp("reported") / "project")
    out, err = io.StringIO(), io.StringIO()
    code = stage.run(run, console=Console(file=out, width=200), err=Console(file=err, width=200))
    assert code == 0, err.getvalue()
    return run, out.getvalue()
