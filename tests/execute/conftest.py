"""Fixtures for executor tests: a real one-node Slurm cluster (session-wide) and the toy adapter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # toy.py, also for runner processes started by tests

from infrarsi.testing.slurm import SlurmCluster, SlurmSetupError  # noqa: E402


@pytest.fixture(scope="session")
def slurm_cluster():
    """Installs Slurm when missing (root + apt-get), starts slurmctld + slurmd, stops them afterwards."""
    cluster = SlurmCluster(cpus=4)
    try:
        cluster.start()
    except SlurmSetupError as e:
        if "install" in str(e) or "apt-get" in str(e) or "needs root" in str(e):
            pytest.skip(f"Slurm cannot be installed here: {e}")
        raise
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster):
    """The cluster, drained before each test (a completing job blocks the only node)."""
    slurm_cluster.wait_drained()
    return slurm_cluster
