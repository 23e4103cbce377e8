"""What an executor is given and gives back: the launch of one trial (:class:`LaunchSpec`), the handle to find it
again (:class:`Handle`) and how it ended (:class:`LaunchEnd`). Framework-free; imports nothing from infrarsi."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

TRIAL_DIR = "@INFRARSI_TRIAL_DIR@"
"""In an argv word or an env value: replaced by the trial's directory when the trial is launched (adapters point a
framework's checkpoints, TensorBoard and log folders there: ``f"{TRIAL_DIR}/{OUTPUTS}/checkpoints"``)."""

OUTPUTS = "outputs"
"""RUN_DIR/trials/<n>/outputs: where a trial's checkpoints, TensorBoard and wandb files go (the one folder of its
trial directory an isolated trial may write)."""


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


class Handle(BaseModel):
    """Enough to find a started trial again, also from another process after a restart."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str  # "local" | "slurm"
    trial_dir: str
    token: str  # unique per launch attempt; in the process environment or the Slurm job name
    job_id: str  # local: the process id (= its process group id); Slurm: the job id
    submitted_at: float  # unix seconds
    time_limit_s: float
    devices: int = 1
    pending_timeout_s: float | None = None  # Slurm: how long the job may wait in the queue
    sandboxed: bool = False  # the trial ran isolated (isolation.py: bubblewrap, locally or inside the Slurm job)
    unsandboxed_why: str = ""  # why a trial of a run was not isolated ("" when it was, or had no run around it)
    unisolated: list[str] = []  # classes an isolated trial went without ("kernel keyring: ..."): recorded as such
    network: str = ""  # "own" (a network namespace of its own), "shared" (the node's), "" (no isolation)
    isolation: str = ""  # what isolated it: "bwrap", "bwrap per task", "bwrap per task of the launch's srun"; "": none


class LaunchEnd(BaseModel):
    """How a launch ended, as the executor saw it. Times in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: str  # the executor's own word: "exited", "killed", Slurm's JobState ("COMPLETED", "OUT_OF_MEMORY", ...)
    returncode: int | None = None  # exit status when the process exited by itself
    signal: int | None = None  # the signal that ended it, when one did
    timed_out: bool = False  # killed (or ended by Slurm) at its time limit
    cancelled: bool = False  # someone cancelled it (not the time limit)
    ended: bool = False  # the harness ended it once every line it is measured by had come (execute/tail_stop.py):
    # a finished trial, whatever its exit status or signal (its shutdown is not run)
    oom: bool = False  # the executor itself saw a memory kill (e.g. Slurm OUT_OF_MEMORY)
    lost: bool = False  # the executor no longer knows the job (purged, or never started)
    relaunch: bool = False  # it never ran to an end through no fault of the setting (a held job): launch it again
    wall_s: float = 0.0  # time from start to end of the process (not queue time)
    time_limit_s: float | None = None  # the limit it ran under (the contract's timeout_s or the launch's, the smaller)
    kill_grace_s: float | None = None  # at a time-out: seconds allowed between SIGTERM and SIGKILL (wall_s includes them)
    leftovers: int = 0  # processes of an isolated trial still alive after it ended (killed; never expected)
    evidence: list[str] = []  # lines that say how it ended
