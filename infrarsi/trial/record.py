"""Trial records: what one launch of one setting produced, as data -- failures included.

A Trial is frozen and validated (optuna's FrozenTrial does the same): an ``ok`` trial has a finite
step time; an ``oom`` trial has no step time (all we know is peak > capacity); every failed trial
keeps the evidence (the log lines that decided its status). Imports nothing from infrarsi but the floor.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from .status import TrialStatus

__all__ = ["WARMUP_ROLE", "Cost", "Metrics", "Trial", "TrialStatus"]

WARMUP_ROLE = "warmup"  # the doctor's unmeasured first baseline run: warms the machine; no figure of it is data


class Metrics(BaseModel):
    """What a trial measured. Times in seconds, memory in bytes, per rank where it says so."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_time_s: float | None = None  # median steady-state step time (contract's window), as the harness measured it
    reported_step_time_s: float | None = None  # the same as the trial's log reports it (evidence; None: not clocked)
    step_times_s: list[float] = []  # every step's time, warm-up included
    steps_run: int | None = None  # the last step the harness saw a line of (execute/end_to_end.py; None: not clocked)
    tokens_per_s: float | None = None
    mfu: float | None = None  # fraction in [0, 1]; None when peak FLOP/s is unknown
    tflops_per_device: float | None = None
    peak_memory_bytes: float | None = None  # max over ranks of the capacity-governed peak
    peak_memory_by_rank: dict[int, float] = {}
    losses: list[float] = []  # loss per iteration, in order
    grad_norms: list[float] = []  # global gradient norm (before clipping) per iteration, in order; [] if not logged
    phases_s: dict[str, float] = {}  # phase -> seconds per step


class Cost(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_s: float = 0.0
    devices: int = 1

    @property
    def device_s(self) -> float:
        return self.wall_s * self.devices


class Trial(BaseModel):
    """One launch of one setting, finished or in flight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    setting: dict[str, Any]
    status: TrialStatus
    metrics: Metrics = Metrics()
    cost: Cost = Cost()
    evidence: list[str] = []  # the log lines (or checks) that decided the status
    reason: str = ""  # one line: why it failed, or "" for ok
    role: str = "search"  # search | baseline | verify | doctor
    exit_code: int | None = None
    signal: int | None = None
    job_id: str | None = None  # Slurm job id or local pid, for adopting in-flight trials
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None
    path: str | None = None  # the trial's directory
    warnings: list[str] = []  # what the harness could not guarantee for this trial (e.g. it ran without isolation)
    conditions: dict[str, Any] = {}  # the machine while it ran: load averages, others' CPU, GPUs (execute/conditions.py)
    network: str = ""  # "own": its own network namespace; "shared": the node's (a Slurm job); "": not isolated
    isolation: str = ""  # what isolated it (Handle.isolation): "bwrap", "bwrap per task of the launch's srun", ...

    @model_validator(mode="after")
    def _check(self) -> "Trial":
        if why := self.status.step_time_error(self.metrics.step_time_s, field="metrics.step_time_s"):
            raise ValueError(f"trial {self.id}: {why}")
        return self
