"""Executors (local subprocess, torchrun, Slurm), the trial runner, the crash-safe run record,
failure classification and cost accounting.

Entry points, each imported from its module (the trial records live in the types floor, ``infrarsi.trial``):

- ``RunRecord(run_dir)`` (``record``): ``trials()``, ``finished()``, ``running()``, ``matching()``, ``next_id()``,
  ``start()``, ``finish()``, ``trial_dir()``, ``cost_by_status()``
- ``Runner(record, executor, adapter, contract, config=Runner.Config(parallel=N))`` (``runner``): ``submit()``,
  ``run()``, ``resume()``, ``cancel()``, ``close()``
- ``make_executor(kind)``: ``LocalExecutor`` / ``TorchrunExecutor`` / ``SlurmExecutor``
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import SettingError

EXECUTOR_ENV = "INFRARSI_EXECUTOR"
ISOLATION_ENV = "INFRARSI_ISOLATION"  # "off": trials run without isolation (each record says so)
PARTITION_ENV = "INFRARSI_SLURM_PARTITION"  # Slurm: the partition trials are submitted to (default: the cluster's)
SBATCH_ENV = "INFRARSI_SLURM_ARGS"  # Slurm: more #SBATCH options, shell words, e.g. "--account=ml --gres=gpu:8"


def sbatch_args(text: str) -> list[str]:
    """``$INFRARSI_SLURM_ARGS`` as #SBATCH options: shell words, each one whole option with its value attached
    (``--account=ml``, ``--gres=gpu:8``: each becomes its own #SBATCH line), none holding a line break."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise SettingError(f"{SBATCH_ENV}={text!r} does not split into shell words ({e}); quote it as a shell would") from None
    for w in words:
        if not w.startswith("-") or "\n" in w or "\r" in w:
            raise SettingError(f"{SBATCH_ENV}: {w!r} is not one sbatch option; write each as --name=value, e.g. "
                             f"{SBATCH_ENV}='--account=ml --gres=gpu:8'")
    return words


def slurm_partition(text: str) -> str | None:
    """``$INFRARSI_SLURM_PARTITION``: one partition name (None when unset or empty)."""
    if text and not re.fullmatch(r"[A-Za-z0-9_.,:-]+", text):
        raise SettingError(f"{PARTITION_ENV}={text!r} is not a partition name (letters, digits, '_', '.', ',', ':', '-'); "
                         f"see `sinfo -s`")
    return text or None


def make_executor(kind: str | None = None, *, run_dir: Path | None = None) -> Any:
    """``local`` (default; multi-process specs go through torchrun) or ``slurm`` (SLURM_CONF from the
    environment). ``kind`` defaults to $INFRARSI_EXECUTOR; ``INFRARSI_ISOLATION=off`` runs trials without
    isolation (execute/isolation.py; every such trial's record says so); ``INFRARSI_BWRAP`` names the bwrap
    binary (here, and on the Slurm nodes); ``INFRARSI_SLURM_PARTITION`` and ``INFRARSI_SLURM_ARGS`` (more
    #SBATCH options: account, GPUs, constraints) shape every Slurm job, after the flags ``run_dir`` keeps
    (``--partition --account --qos --time``: execute/slurm_options.py), which win over them."""
    kind = kind or os.environ.get(EXECUTOR_ENV) or "local"
    box = os.environ.get(ISOLATION_ENV, "on").lower()
    if box not in ("on", "off"):
        raise SettingError(f"{ISOLATION_ENV}={box!r}; set it to on (default) or off")
    if kind in ("local", "torchrun"):
        from .torchrun import TorchrunExecutor

        return TorchrunExecutor(TorchrunExecutor.Config(isolation=box == "on"))
    if kind == "slurm":
        from .slurm import SlurmExecutor
        from .slurm_options import stored

        flags = stored(run_dir)
        return SlurmExecutor(SlurmExecutor.Config(isolation="auto" if box == "on" else "off",
                                                  bwrap=os.environ.get("INFRARSI_BWRAP") or "bwrap",
                                                  partition=flags.partition or slurm_partition(os.environ.get(PARTITION_ENV, "")),
                                                  extra_args=sbatch_args(os.environ.get(SBATCH_ENV, "")) + flags.sbatch_args()))
    raise SettingError(f"unknown executor {kind!r}; set {EXECUTOR_ENV} to local or slurm")


__all__ = ["EXECUTOR_ENV", "ISOLATION_ENV", "PARTITION_ENV", "SBATCH_ENV", "make_executor", "sbatch_args", "slurm_partition"]
