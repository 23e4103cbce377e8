"""LaunchSpec: everything an executor needs to start one trial, framework-free."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

TRIAL_DIR = "@INFRARSI_TRIAL_DIR@"
"""In an argv word or an env value: replaced by the trial's directory when the trial is launched (adapters point a
framework's checkpoints, TensorBoard and log folders there: ``f"{TRIAL_DIR}/outputs/checkpoints"``)."""


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
    pass_env: list[str] = []
    """Names of the runner's environment an isolated trial inherits beyond the frameworks' (the contract's
    ``workload.pass_env``); their values are read at launch and never recorded."""
    scratch_bytes: int | None = Field(None, gt=0)
    """Size of each writable tmpfs of an isolated trial (/tmp, /dev/shm, the home folder, a named cache folder);
    None: isolation.SCRATCH_BYTES (the contract's ``invariants.isolation.scratch_gib``)."""

    def for_trial(self, trial_dir: str | Path) -> "LaunchSpec":
        """This spec with :data:`TRIAL_DIR` replaced by ``trial_dir`` (absolute) in its argv and env values."""
        d = str(Path(trial_dir).resolve())
        if not any(TRIAL_DIR in a for a in self.argv) and not any(TRIAL_DIR in v for v in self.env.values()):
            return self
        return self.model_copy(update={"argv": [a.replace(TRIAL_DIR, d) for a in self.argv],
                                       "env": {k: v.replace(TRIAL_DIR, d) for k, v in self.env.items()}})
