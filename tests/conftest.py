"""Test-session set-up shared by every folder.

Without a GPU, Triton kernels run in Triton's interpreter, which must be chosen before triton is first
imported (its language helpers are @jit functions made at import). Test modules collected before
tests/kernels/ (megatron-core, torchtitan) import triton, so the choice is made here, first.
"""

from __future__ import annotations

import os
import shutil

if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")


import pytest  # noqa: E402 - after the interpreter's choice above

from infrarsi.testing.recorded_run import cached_recorded_run, copy_run  # noqa: E402


@pytest.fixture(scope="session")
def recorded_root(tmp_path_factory):
    """A realistic recorded run (doctor, search, verification) written once per session by the real writers
    (infrarsi/testing/recorded_run.py): the apply, report, referee and CLI tests read copies of it."""
    return cached_recorded_run(tmp_path_factory.getbasetemp())


@pytest.fixture
def run_dir(recorded_root, tmp_path):
    """A copy of the recorded run in ``tmp_path/project``, this test's to change."""
    return copy_run(recorded_root, tmp_path / "project")
