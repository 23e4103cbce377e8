"""LaunchSpec: everything an executor needs to start one trial, framework-free."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LaunchSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: list[str]
    """The command, e.g. ["python", "-m", "infrarsi.workloads.minigpt", "--micro-batch-size", "2", ...]."""
    env: dict[str, str] = {}
    """Added to the executor's environment."""
    cwd: str | None = None
    processes: int = Field(1, ge=1)
    """Processes per node (torchrun --nproc-per-node, srun --ntasks-per-node)."""
    nodes: int = Field(1, ge=1)
    devices: int = Field(1, ge=1)
    """Devices the trial occupies in all (for cost: wall seconds x devices)."""
    time_limit_s: float = Field(600, gt=0)
    pending_timeout_s: float | None = Field(None, gt=0)
    """Slurm: seconds the job may wait in the queue (the contract's invariants.timing.pending_timeout_s)."""
    memory_cap_bytes: int | None = None
    """Per-process memory cap; None = no cap."""
