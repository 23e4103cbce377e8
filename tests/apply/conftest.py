"""Apply tests: a recorded run (real writers) and a real git repository in a temp folder."""

import io
import subprocess

import pytest
from rich.console import Console

from infrarsi.testing.recorded_run import cached_recorded_run, copy_run


@pytest.fixture(scope="session")
def out_of_scope_root(tmp_path_factory):
    """The same run under a contract whose scope.files does not take the RMSNorm candidate."""
    return cached_recorded_run(tmp_path_factory.getbasetemp(), scope_files=["kernels/swiglu/*.py"])


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "user-repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.name", "Test User")
    git(r, "config", "user.email", "test@example.com")
    git(r, "config", "commit.gpgsign", "false")
    (r / "README.md").write_text("training code\n")
    git(r, "add", "README.md")
    git(r, "commit", "-q", "-m", "initial")
    return r


@pytest.fixture
def consoles():
    out, err = io.StringIO(), io.StringIO()
    return (Console(file=out, width=200, highlight=False), Console(file=err, width=200, highlight=False), out, err)


@pytest.fixture(scope="session")
def generated_root(tmp_path_factory):
    """The same run whose winning RMSNorm candidate the run stage generated (kernels/rmsnorm/generated/)."""
    return cached_recorded_run(tmp_path_factory.getbasetemp(), generated=True)
