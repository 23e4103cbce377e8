"""A launch that starts its own ``srun``: the user's srun options kept, each task boxed on its node.

The usual cluster launch is ``srun [options] COMMAND`` (``srun --ntasks-per-node=1 torchrun ...``,
``srun --label python train.py``, ``srun bash train.sh``). srun's tasks are started by slurmd, not by the batch
script, so a bwrap around the batch script's command would leave them outside. The Slurm executor therefore keeps
the user's srun, with every option as written, and puts the box between srun and the command:

    srun [the user's options] /bin/sh -c 'exec "$@" 9<"$0"' seccomp.bpf  bwrap [box] -- python trial_wrapper.py --inner /dev/null COMMAND

so every task enters its own box before the user's program, as the tasks of the steps the executor starts itself do
(``slurm.py``). :func:`split` reads the srun and its options off a launch; :func:`job_shape` gives the batch
job the tasks and CPUs that srun asks of it. Which container options come with the srun, and what a container
covers, is :mod:`.containers`' (a container runtime *is* the isolation only where it covers the box's classes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..launch.command import _SRUN_FLAGS, _launcher_options, is_python
from . import containers
from .torchrun import is_torchrun


@dataclass(frozen=True, kw_only=True)
class UserSrun:
    """``srun`` (argv[0] as written), its options (valued ones as ``(name, value)``), and the command each task
    runs."""

    srun: list[str]  # ["srun", "--ntasks-per-node=1", "--label", ...]: kept as written
    options: list[tuple[str, str | None]]
    command: list[str]

    def value(self, *names: str) -> str | None:
        """The last value given to any of ``names`` (``--ntasks-per-node``), None when none is."""
        found = [v for n, v in self.options if n in names]
        return found[-1] if found else None

    def count(self, *names: str) -> int | None:
        """A count option's value (``--nodes=2``, ``-N 2``, ``-n2``); None when absent or not a plain number (a
        node range ``2-4`` is the scheduler's to resolve, never the executor's)."""
        v = self.value(*names)
        return int(v) if v is not None and v.strip().isdigit() else None


def split(argv: list[str]) -> UserSrun | None:
    """The launch's own srun, or None when the launch does not start with one. Raises ValueError (one line, naming
    the fix) for an srun with no command after its options."""
    if not argv or os.path.basename(argv[0]) != "srun":
        return None
    prefix = [argv[0]]
    options, k = _launcher_options(argv, 1, prefix, _SRUN_FLAGS)
    if k >= len(argv):
        raise ValueError(f"the launch's srun has no command after its options ({' '.join(argv[:6])} ...): "
                         f"write the program after srun's options, e.g. `srun --ntasks-per-node=1 torchrun ...`")
    return UserSrun(srun=prefix, options=options, command=list(argv[k:]))


def starts_workers(command: list[str]) -> bool:
    """Whether one task's command starts the ranks itself (torchrun, or a shell script that runs a launcher), so that
    the job runs one task per node; a ``python`` program run straight by srun is one rank per task."""
    command = containers.program(command)  # what runs inside a container the task starts
    if not command:
        return False
    return is_torchrun(command) or not is_python(command[0])


def job_shape(own: UserSrun, *, processes: int, nodes: int) -> tuple[int, int]:
    """(tasks per node, CPUs per task) of the batch job that the user's srun runs in. ``processes``: the launch's
    ranks per node. The srun's own counts win (``--ntasks-per-node``, ``--ntasks`` / nodes, ``--cpus-per-task``);
    otherwise a command that starts its ranks itself (torchrun, a script) is one task per node with a CPU per rank,
    and a python program is one task per rank."""
    tasks = own.count("--ntasks-per-node")
    if tasks is None:
        total = own.count("-n", "--ntasks")
        tasks = max(1, total // max(1, nodes)) if total else (1 if starts_workers(own.command) else processes)
    cpus = own.count("-c", "--cpus-per-task")
    if cpus is None:
        cpus = max(1, processes // tasks) if starts_workers(own.command) else 1
    return tasks, cpus
