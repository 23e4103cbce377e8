"""The sbatch options a user gives on the command line (``--partition --account --qos --time`` on doctor, run and
tune), validated at the edge and kept in the run directory's stages record, so a resume submits the same way.

Each becomes one ``#SBATCH`` line of every trial's job. ``--time`` is written after the job's own limit (the
contract's ``invariants.timing.timeout_s`` in whole minutes), and sbatch keeps the last value: it caps what a
queue allows, while InfraRSI still ends a trial at the contract's time-out. $INFRARSI_SLURM_PARTITION and
$INFRARSI_SLURM_ARGS stay as fallbacks: a flag wins over the variable for the same option.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import SettingError

NAME = re.compile(r"[A-Za-z0-9_.,:-]+")  # partition, account and QOS names (a partition may list several: a,b)
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; or UNLIMITED
TIME = re.compile(r"(\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|unlimited|INFINITE|infinite)")


class SlurmOptions(BaseModel):
    """The flags as given (None: not given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None

    def sbatch_args(self) -> list[str]:
        """The #SBATCH options besides the partition: ['--account=ml', '--qos=high', '--time=4:00:00']."""
        return [f"--{k}={v}" for k, v in (("account", self.account), ("qos", self.qos), ("time", self.time)) if v]

    def given(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


def from_flags(*, partition: str | None = None, account: str | None = None, qos: str | None = None,
               time: str | None = None) -> SlurmOptions:
    """Validate the flags: one line naming the flag and the form it takes (SettingError)."""
    for flag, value in (("--partition", partition), ("--account", account), ("--qos", qos)):
        if value is not None and not NAME.fullmatch(value):
            raise SettingError(f"{flag} {value!r} is not a Slurm name (letters, digits, '_', '.', ',', ':', '-'); "
                               f"see `sinfo -s` / `sacctmgr show assoc user=$USER`")
    if time is not None and not TIME.fullmatch(time):
        raise SettingError(f"--time {time!r} is not a Slurm time: give minutes (90), H:M:S (4:00:00) or D-H (1-12)")
    return SlurmOptions(partition=partition, account=account, qos=qos, time=time)


def remember(run_dir: Path, flags: SlurmOptions) -> SlurmOptions:
    """Keep the flags given now in the run directory's stages record, over the ones kept before (a flag given
    again replaces its value; one not given keeps the stored value). Returns what the run will use."""
    from ..rundir import RunDir

    run = RunDir(run_dir)
    body = run.stages()
    merged = SlurmOptions(**{**(body.slurm or {}), **flags.given()})
    if merged.given() != (body.slurm or {}):
        run.write_stages(body.model_copy(update={"slurm": merged.given()}))
    return merged


def stored(run_dir: Path | None) -> SlurmOptions:
    """The options this run directory keeps (empty when none were given, or no run directory)."""
    from ..rundir import RunDir

    if run_dir is None or not RunDir(run_dir).has_lock():
        return SlurmOptions()
    return SlurmOptions(**(RunDir(run_dir).stages().slurm or {}))
