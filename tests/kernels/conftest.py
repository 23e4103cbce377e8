"""Fixtures for the kernel tests: the CPU Triton interpreter, and a fresh verification cache.

TRITON_INTERPRET must be set before triton is first imported (its language helpers are @jit
functions made at import), so it is set here, at collection time, when there is no GPU. If another
test module imported triton first, verify() notices and runs its dynamic checks in a fresh process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ADVERSARIAL = Path(__file__).parent / "adversarial"  # cheats and bugs: each must fail, for its reason
HONEST = Path(__file__).parent / "honest"  # unusual but honest candidates: each must pass
INSITU = Path(__file__).parent / "insitu"  # pass every offline check; caught inside training


@pytest.fixture(scope="session", autouse=True)
def verify_cache(tmp_path_factory):
    """One empty cache per test session: nothing depends on an earlier run; within the session each
    shipped candidate is verified once and later tests read the cached result."""
    path = tmp_path_factory.mktemp("infrarsi-cache")
    old = os.environ.get("INFRARSI_CACHE")
    os.environ["INFRARSI_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("INFRARSI_CACHE", None)
    else:
        os.environ["INFRARSI_CACHE"] = old
