"""Executors (local subprocess, torchrun, Slurm), the trial runner, the crash-safe run record,
failure classification and cost accounting.

Entry points (imported lazily, so ``infrarsi.execute.trial`` stays cheap to import):

- ``RunRecord(run_dir)``: ``trials()``, ``finished()``, ``running()``, ``matching()``, ``next_id()``,
  ``start()``, ``finish()``, ``trial_dir()``, ``cost_by_status()``
- ``Runner(record, executor, adapter, contract, config=Runner.Config(parallel=N))``: ``submit()``,
  ``run()``, ``resume()``, ``cancel()``, ``close()``
- ``make_executor(kind)``: ``LocalExecutor`` / ``TorchrunExecutor`` / ``SlurmExecutor``
"""

from __future__ import annotations

import importlib
import os
from typing import Any

_EXPORTS = {
    "Executor": "executor", "Handle": "executor", "LaunchEnd": "executor",
    "LocalExecutor": "local", "TorchrunExecutor": "torchrun",
    "SlurmExecutor": "slurm", "SlurmUnreachable": "slurm", "SlurmError": "slurm",
    "RunRecord": "record", "cost_by_status": "record",
    "Runner": "runner", "local_parallel_limit": "runner",
    "classify": "classify", "loss_drift": "classify",
    "Trial": "trial", "TrialStatus": "trial", "Metrics": "trial", "Cost": "trial",
    "LaunchSpec": "spec",
}

EXECUTOR_ENV = "INFRARSI_EXECUTOR"
ISOLATION_ENV = "INFRARSI_ISOLATION"  # "off": trials run without isolation (each record says so)


def make_executor(kind: str | None = None) -> Any:
    """``local`` (default; multi-process specs go through torchrun) or ``slurm`` (SLURM_CONF from the
    environment). ``kind`` defaults to $INFRARSI_EXECUTOR; ``INFRARSI_ISOLATION=off`` runs trials without
    isolation (execute/isolation.py; every such trial's record says so); ``INFRARSI_BWRAP`` names the bwrap
    binary (here, and on the Slurm nodes)."""
    kind = kind or os.environ.get(EXECUTOR_ENV) or "local"
    box = os.environ.get(ISOLATION_ENV, "on").lower()
    if box not in ("on", "off"):
        raise ValueError(f"{ISOLATION_ENV}={box!r}; set it to on (default) or off")
    if kind in ("local", "torchrun"):
        from .torchrun import TorchrunExecutor

        return TorchrunExecutor(TorchrunExecutor.Config(isolation=box == "on"))
    if kind == "slurm":
        from .slurm import SlurmExecutor

        return SlurmExecutor(SlurmExecutor.Config(isolation="auto" if box == "on" else "off",
                                                  bwrap=os.environ.get("INFRARSI_BWRAP") or "bwrap"))
    raise ValueError(f"unknown executor {kind!r}; set {EXECUTOR_ENV} to local or slurm")


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [*_EXPORTS, "make_executor"]
