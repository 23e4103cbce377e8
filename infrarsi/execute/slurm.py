"""SlurmExecutor: one trial = one batch job.

The job script is generated from the LaunchSpec (``trial_dir/job.sbatch``): nodes, tasks per node,
time limit (whole minutes, rounded up), ``--mem`` (always: a job without it gets DefMemPerCPU and
importing torch alone can pass that), output paths in the trial directory, the environment, and
RLIMIT_DATA (``ulimit -d``) for the per-process memory cap. The command is ``exec``'d, so the job's
``ExitCode=status:signal`` is the command's own.

Each job carries a per-trial token in its name and comment (``infrarsi-<token>``): job ids restart at
1 on a fresh cluster, so a job is only ever adopted when its id *and* its token match.

States come from ``scontrol show job ID -o`` (finished jobs stay visible for MinJobAge), then
``sacct`` (slurmdbd or the jobcomp text file). Every client call has a timeout; an unreachable
controller raises ``SlurmUnreachable`` with one line naming SLURM_CONF and the failed command.

Isolation (``isolation.py``): the job runs its command inside bwrap on the node -- ``bwrap ... -- command``, or
``srun ... bwrap ... -- command`` so that each task is isolated (srun's tasks are started by slurmd, not by the
batch script). The layout is the local trial's (the nodes are assumed to share the file system, as the job's
paths already are): its trial directory read-write, the repository read-only, no run directory, bank, cache,
key, ``.git`` or home folder, the node's own GPU and RDMA devices (listed by the job script on the node). A single
task gets a PID namespace of its own; the tasks of a multi-task step keep the node's PID and IPC namespaces and
``/dev/shm`` (NCCL's shared memory and CUDA IPC between ranks need them), and Slurm's step cgroup ends them. Whether the nodes have a working bwrap is found out
once per process and cluster by a probe job (``Config.isolation = "auto"``); where they do not (or ``isolation = "off"``),
every trial is recorded as unisolated (the runner then checks the repository and the run's seals after each
job, the report says so, and promotion on such evidence needs the contract's opt-in). With the isolation
required (``"on"``, or a probe that passed), a job that lands on a node without bwrap fails; it never runs
unisolated. The decision is the runner's, made before submitting: nothing a job could print or write decides
it. A launch that starts its own ``srun`` keeps it, every option as written, with the box between srun and the
command (``srun [options] bwrap ... -- command``: user_srun.py), or a podman container as the box (containers.py;
pyxis, enroot and docker containers are not counted as isolation).

The harness's clock (tail_clock.py's :class:`~infrarsi.execute.tail_clock.TailClock`): the job writes its own output, so the
runner reads the job's stdout and stderr as they grow (every 50 ms, on the shared file system) and stamps each line;
at the end the stamps are taken relative to the job's StartTime and the record's wall time is Slurm's own elapsed
time (RunTime, or sacct's ElapsedRaw): the bound a trial whose lines came in bursts is scored by, and the one its
log's steps must fit in. Its step time is the harness's, as for a local trial.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import SlurmError, SlurmPendingTimeout, SlurmUnreachable  # known failures (errors.py), still named here
from ..rundir.names import JOB_SCRIPT
from ..contract.scope import repository_root
from . import containers, isolation, user_srun
from .tail_clock import TailClock
from .executor import STDERR, STDOUT, Handle, LaunchEnd, fresh_trial_dir
from .local import CAP_ENV, EXIT_STATUS, WRAPPER, resolve_argv, run_dir_of, trial_env
from ..trial import OUTPUTS, LaunchSpec
from .torchrun import is_torchrun

MiB = 2**20

# JobState -> how the trial ended. Anything not listed (PENDING, RUNNING, CONFIGURING, COMPLETING,
# SUSPENDED, REQUEUED, RESIZING, STAGE_OUT, SIGNALING) is still in flight.
FINISHED_STATES = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
}
_OOM_LINE = re.compile(r"oom-kill event|exceeded memory limit|out of memory|OutOfMemory", re.I)


# A pending job with one of these reasons (or priority 0) will not start by itself: after a controller restart
# Slurm requeues jobs it could not launch as "launch failed requeued held".
_HELD = re.compile(r"held|JobHeld", re.I)


def is_held(info: dict[str, str]) -> bool:
    """True for a job Slurm keeps in the queue until someone releases it."""
    if info.get("JobState") in ("REQUEUE_HOLD", "SUSPENDED"):
        return info.get("JobState") == "REQUEUE_HOLD"
    return info.get("JobState") == "PENDING" and (bool(_HELD.search(info.get("Reason", ""))) or info.get("Priority") == "0")


# (SLURM_CONF, bwrap, partition, extra args) -> the isolation probe's answer ("" = works), once per process
_PROBED: dict[tuple, str] = {}


class SlurmExecutor:
    kind = "slurm"

    class Config(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")

        partition: str | None = None
        """Partition to submit to; None = the cluster's default."""
        client_timeout_s: float = Field(15.0, gt=0)
        """Seconds any one sbatch/squeue/scontrol/sacct/scancel call may take (a dead controller
        makes clients retry for about a minute)."""
        default_mem_mb: int = Field(1024, ge=1)
        """--mem per node for a spec without a memory cap."""
        mem_overhead_mb: int = Field(256, ge=0)
        """Added to cap x processes for --mem: the shell, the launcher, page cache."""
        time_slack_s: float = Field(0.0, ge=0)
        """Extra seconds before infrarsi itself cancels a job past its limit (Slurm checks only
        every 30 s and rounds the limit up to minutes)."""
        extra_args: list[str] = []
        """More #SBATCH lines, e.g. ["--account=ml", "--gres=gpu:8"]."""
        isolation: Literal["auto", "on", "off"] = "auto"
        """Run each job's command inside bwrap on its node: "auto" when a probe job finds a working bwrap on a
        node, "on" always (a node without it fails the job), "off" never (every trial recorded unisolated)."""
        bwrap: str = "bwrap"
        """The bwrap binary on the nodes (a name on their PATH, or a path)."""
        probe_timeout_s: float = Field(300.0, gt=0)
        """How long the isolation probe job may take, queue included."""

    def __init__(self, config: Config | None = None, *, env: dict[str, str] | None = None) -> None:
        self.config = config or SlurmExecutor.Config()
        self.env = {**os.environ, **(env or {})}  # env: e.g. {"SLURM_CONF": ...} for every client call
        self._why: dict[str, str] = {}  # job id -> "timeout" | "cancel" (what infrarsi did to it)
        self._pending_since: dict[str, float] = {}  # job id -> monotonic time this process first saw it pending
        self._lock = threading.Lock()
        self._probed: str | None = None  # "" once the probe found bwrap working; else why not
        self._clocks: dict[str, TailClock] = {}  # job id -> the clock reading its output as it is written

    # ------------------------------------------------------------- the client
    def _call(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        conf = self.env.get("SLURM_CONF", "(unset: /etc/slurm/slurm.conf)")
        line = " ".join(shlex.quote(a) for a in args)
        try:
            r = subprocess.run(list(args), env=self.env, capture_output=True, text=True, errors="replace",
                               timeout=self.config.client_timeout_s)  # a garbage slurm.conf is echoed back as bytes
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"Slurm unreachable (SLURM_CONF={conf}): `{line}` did not answer in "
                                   f"{self.config.client_timeout_s:g} s") from None
        except FileNotFoundError:
            raise SlurmUnreachable(f"Slurm unreachable (SLURM_CONF={conf}): `{args[0]}` is not installed") from None
        if check and r.returncode != 0:
            msg = " ".join(r.stderr.split()) or f"exit {r.returncode}"
            if re.search(r"contact|connect|Connection refused|Unable to establish|timed out|Socket", msg, re.I):
                raise SlurmUnreachable(f"Slurm unreachable (SLURM_CONF={conf}): `{line}` failed: {msg}")
            raise SlurmError(f"`{line}` failed (SLURM_CONF={conf}): {msg[:300]}")
        return r

    # ----------------------------------------------------------------- submit
    def mem_mb(self, spec: LaunchSpec) -> int:
        """--mem per node in MiB: cap x processes per node + overhead, or the default."""
        if spec.memory_cap_bytes is None:
            return self.config.default_mem_mb
        return math.ceil(spec.memory_cap_bytes * spec.processes / MiB) + self.config.mem_overhead_mb

    def command_line(self, spec: LaunchSpec) -> list[str]:
        """The command the job script runs (``srun ...`` when it starts several tasks), as a person would."""
        srun, command = self._steps(spec)
        return srun + command

    def _steps(self, spec: LaunchSpec) -> tuple[list[str], list[str]]:
        """(the srun that starts the tasks, [] for none; the command each task runs). A launch that starts its own
        srun keeps it, with every option as written (user_srun.py); otherwise the executor starts several tasks
        itself, one per rank (one per node for torchrun, which starts the ranks)."""
        argv = resolve_argv(spec.argv)
        own = user_srun.split(argv)
        if own is not None:  # a container's command runs the image's python, not this machine's
            return own.srun, own.command if containers.runtime(own.command, own.options) else resolve_argv(own.command)
        tasks = 1 if is_torchrun(argv) else spec.processes
        return (["srun", f"--ntasks-per-node={tasks}"] if spec.nodes * tasks > 1 else []), argv

    def _srun(self, spec: LaunchSpec) -> list[str]:
        return self._steps(spec)[0]

    def _shape(self, spec: LaunchSpec) -> tuple[int, int]:
        """(tasks per node, CPUs per task) of the job."""
        argv = resolve_argv(spec.argv)
        own = user_srun.split(argv)
        if own is not None:
            return user_srun.job_shape(own, processes=spec.processes, nodes=spec.nodes)
        launcher = is_torchrun(argv)  # torchrun starts the workers itself: one task per node
        return (1, spec.processes) if launcher else (spec.processes, 1)

    # ---------------------------------------------------------------- isolation
    def isolation_why(self, trial_dir: Path, spec: LaunchSpec | None = None) -> str | None:
        """None when a trial in ``trial_dir`` runs isolated on its node; else why not ("" for a bare trial
        directory, which is never isolated)."""
        if run_dir_of(trial_dir) is None:
            return ""
        if self.config.isolation == "off":
            return "trial isolation is off (SlurmExecutor.Config.isolation = off or INFRARSI_ISOLATION=off)"
        kind = self._container(spec)
        if kind is not None and (why := containers.not_isolation(kind)):
            return why
        if kind == "podman":  # the container is the box (containers.py): no bwrap on the node needed
            return self._podman(spec, Path(trial_dir))[2]
        if self.config.isolation == "on":
            return None
        key = (self.env.get("SLURM_CONF", ""), self.config.bwrap, self.config.partition, tuple(self.config.extra_args))
        with self._lock:
            if self._probed is None:
                self._probed = _PROBED.get(key)
            if self._probed is None:
                self._probed = _PROBED[key] = self._probe(Path(trial_dir))
            return self._probed or None

    def _container(self, spec: LaunchSpec | None) -> str | None:
        """The container runtime the launch's own srun starts its tasks in (containers.py), or None."""
        own = user_srun.split(resolve_argv(spec.argv)) if spec is not None else None
        return containers.runtime(own.command, own.options) if own is not None else None

    def _podman(self, spec: LaunchSpec, trial_dir: Path) -> tuple[list[str], str, str | None]:
        """containers.podman_isolation for the launch's ``podman run``: (options added, network, why not)."""
        srun, command = self._steps(spec)
        try:
            run = containers.split_podman(command)
        except ValueError as e:
            return [], "", str(e)
        cwd = Path(spec.cwd).resolve() if spec.cwd else Path.cwd().resolve()
        box = self._box(spec, trial_dir, cwd, [*run.options, *run.command])
        names = sorted(trial_env(spec, "-", trial_dir))
        return containers.podman_isolation(run, box, outputs=Path(trial_dir).resolve() / OUTPUTS, env_names=names,
                                           one_node=spec.nodes == 1, profile=Path(trial_dir).resolve() / PODMAN_PROFILE)

    def isolates(self, trial_dir: Path, spec: LaunchSpec | None = None) -> bool:
        return self.isolation_why(trial_dir, spec) is None

    def _probe(self, trial_dir: Path) -> str:
        """Run bwrap with a trial's options in a job of its own; "" when it worked, else why not (one line)."""
        trial_dir.mkdir(parents=True, exist_ok=True)
        out = (trial_dir / "isolation-probe.out").resolve()
        b = shlex.quote(self.config.bwrap)
        opts = " ".join(shlex.quote(o) for o in [*isolation.base_options(), *isolation.machine_options()])
        wrap = (f"command -v {b} >/dev/null || {{ echo 'no {self.config.bwrap} on '$(hostname); exit 3; }}; "
                f"{b} {opts} -- true && echo isolation-ok")
        args = ["sbatch", "--parsable", "--wait", "--job-name=infrarsi-isolation-probe", "--time=1", "--mem=64M",
                f"--output={out}", *([f"--partition={self.config.partition}"] if self.config.partition else []),
                *self.config.extra_args, "--wrap", wrap]
        try:
            r = subprocess.run(args, env=self.env, capture_output=True, text=True, errors="replace",
                               timeout=self.config.probe_timeout_s)
        except subprocess.TimeoutExpired:
            return f"the isolation probe job did not finish in {self.config.probe_timeout_s:g} s"
        except FileNotFoundError:
            raise SlurmUnreachable("Slurm unreachable: `sbatch` is not installed") from None
        said = _read(out).strip()
        if r.returncode == 0 and said.endswith("isolation-ok"):
            return ""
        tail = (said.splitlines() or r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return f"the Slurm node has no working bwrap (probe job: {tail[:200]})"

    def _isolated_command(self, spec: LaunchSpec, trial_dir: Path) -> list[str]:
        """srun (several tasks) + bwrap ... -- python trial_wrapper.py --inner STATUS command (one status file: only
        a single task's signal is told apart from its exit status)."""
        cwd = Path(spec.cwd).resolve() if spec.cwd else Path.cwd().resolve()
        srun, argv = self._steps(spec)
        if self._container(spec) == "podman":  # podman's container is the box, with the options InfraRSI adds
            run = containers.split_podman(argv)
            return [*srun, *run.head, *run.options, *self._podman(spec, trial_dir)[0], run.image, *run.command]
        box = self._box(spec, trial_dir, cwd, argv)
        status = str(_status_file(trial_dir)) if not srun else "/dev/null"
        inner = [sys.executable, "-I", "-S", WRAPPER, "--inner", status, *argv]
        if not (trial_dir / SECCOMP_FILE).is_file():
            return srun + box.argv(inner, bwrap_path=self.config.bwrap)
        # each task opens the filter for its own bwrap (srun hands its tasks no descriptor of the script's)
        opened = ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(trial_dir / SECCOMP_FILE)]
        return srun + opened + box.argv(inner, bwrap_path=self.config.bwrap, seccomp_fd=SECCOMP_FD)

    def _isolated_by(self, spec: LaunchSpec) -> str:
        """What isolates an isolated trial: a bwrap around the job's command, one around each task of the executor's
        own srun, or one around each task of the launch's own srun (user_srun.py)."""
        if self._container(spec) == "podman":
            return containers.PODMAN_RUNTIME
        if user_srun.split(resolve_argv(spec.argv)) is not None:
            return BWRAP_PER_USER_TASK
        return "bwrap per task" if self._srun(spec) else "bwrap"

    def _network(self, spec: LaunchSpec, trial_dir: Path) -> str:
        """An isolated trial's network: "own" (a namespace of its own) or "shared" (the node's)."""
        if self._container(spec) == "podman":
            return self._podman(spec, trial_dir)[1]
        return "shared" if _needs_network(spec, self._srun(spec)) else "own"

    def _box(self, spec: LaunchSpec, trial_dir: Path, cwd: Path, argv: list[str]) -> isolation.Box:
        # Several tasks (srun, each in a bwrap of its own) keep the node's PID and IPC namespaces and /dev/shm:
        # NCCL's shared memory and CUDA IPC between the ranks of one node need them; Slurm's step cgroup ends them.
        # A job of several nodes keeps the node's network (its ranks meet over it); its record says "shared".
        return isolation.trial_box(trial_dir, run_dir_of(trial_dir), argv=argv, env=spec.env, cwd=cwd,
                                   inherited=isolation.clean_environment(os.environ, pass_env=spec.pass_env),
                                   repository=repository_root(cwd), shared=bool(self._srun(spec)), node_devices=True,
                                   network=_needs_network(spec, self._srun(spec)),
                                   scratch_bytes=spec.scratch_bytes or isolation.SCRATCH_BYTES)

    def script(self, spec: LaunchSpec, trial_dir: Path, *, token: str, isolated: bool | None = None) -> str:
        """The sbatch script for one trial (``isolated``: the submit's decision; None asks isolation_why)."""
        trial_dir = Path(trial_dir).resolve()
        spec = spec.for_trial(trial_dir)
        tasks, cpus = self._shape(spec)
        minutes = max(1, math.ceil(spec.time_limit_s / 60))
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name=infrarsi-{token}",
            f"#SBATCH --comment=infrarsi-{token}",
            f"#SBATCH --nodes={spec.nodes}",
            f"#SBATCH --ntasks-per-node={tasks}",
            f"#SBATCH --cpus-per-task={cpus}",
            f"#SBATCH --mem={self.mem_mb(spec)}M",
            f"#SBATCH --time={minutes}",
            f"#SBATCH --output={trial_dir / STDOUT}",
            f"#SBATCH --error={trial_dir / STDERR}",
            f"#SBATCH --chdir={Path(spec.cwd).resolve() if spec.cwd else Path.cwd()}",
        ]
        if self.config.partition:
            lines.append(f"#SBATCH --partition={self.config.partition}")
        lines += [f"#SBATCH {a}" for a in self.config.extra_args]
        lines.append("")
        if isolated is None:
            isolated = self.isolation_why(trial_dir, spec) is None
        if isolated:  # the submitting shell's secrets (sbatch exports its environment) stay out of the job
            for k in sorted(set(os.environ) - set(isolation.clean_environment(os.environ, pass_env=spec.pass_env))):
                lines.append(f"unset {k}")
        for k, v in sorted(trial_env(spec, token, trial_dir).items()):
            lines.append(f"export {k}={shlex.quote(v)}")
        if spec.memory_cap_bytes is not None:
            # RLIMIT_DATA per process, in KiB; the same cap the local executor sets (INFRARSI_MEMORY_CAP_BYTES above).
            lines.append(f"ulimit -d {spec.memory_cap_bytes // 1024}")
        if not isolated:
            lines.append("exec " + " ".join(shlex.quote(a) for a in self.command_line(spec)))
            return "\n".join(lines) + "\n"
        status = shlex.quote(str(_status_file(trial_dir)))
        lines += [
            f"rm -f {status}",
            "# bwrap ends the command's namespace when it ends: a polite signal goes to the command, which decides",
            "trap '' TERM INT HUP",
            isolation.node_devices_shell(),
            " ".join('"${infrarsi_dev[@]}"' if a == isolation.NODE_DEVICES else shlex.quote(a)
                     for a in self._isolated_command(spec, trial_dir)),
            "rc=$?",
            "# bwrap reports a command ended by signal N as 128 + N: end the same way when the inner wrapper agrees",
            f'if [ "$rc" -gt 128 ] && [ "$(cat {status} 2>/dev/null)" = "signal $((rc - 128))" ]; then',
            "  trap - TERM INT HUP; kill -s $((rc - 128)) $$",
            "fi",
            "exit $rc",
        ]
        return "\n".join(lines) + "\n"

    def submit(self, spec: LaunchSpec, trial_dir: Path, *, token: str) -> Handle:
        trial_dir = Path(trial_dir)
        fresh_trial_dir(trial_dir, (STDOUT, STDERR, EXIT_STATUS, JOB_SCRIPT, SECCOMP_FILE, PODMAN_PROFILE), OUTPUTS)
        spec = spec.for_trial(trial_dir)
        why = self.isolation_why(trial_dir, spec)
        missing = None
        if why is None and self._container(spec) == "podman":
            why = containers.write_seccomp_profile(trial_dir / PODMAN_PROFILE)  # the keyring too, or no isolation
        elif why is None and not isolation.write_seccomp(trial_dir / SECCOMP_FILE):
            missing = isolation.seccomp_problem()
        path = trial_dir / JOB_SCRIPT
        path.write_text(self.script(spec, trial_dir, token=token, isolated=why is None))
        r = self._call("sbatch", "--parsable", str(path.resolve()))
        job_id = r.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch printed no job id: {r.stdout.strip()!r}")
        with self._lock:
            self._clocks[job_id] = TailClock(trial_dir)
        return Handle(kind=self.kind, trial_dir=str(trial_dir), token=token, job_id=job_id,
                      submitted_at=time.time(), time_limit_s=spec.time_limit_s, devices=spec.devices,
                      pending_timeout_s=spec.pending_timeout_s, sandboxed=why is None, unsandboxed_why=why or "",
                      network=self._network(spec, trial_dir) if why is None else "",
                      isolation="" if why is not None else self._isolated_by(spec),
                      unisolated=[f"the kernel keyring ({missing})"] if missing else [])

    # ------------------------------------------------------------------- state
    def job_info(self, job_id: str) -> dict[str, str] | None:
        """``scontrol show job ID -o`` as a dict, or None when the controller no longer knows the job."""
        r = self._call("scontrol", "show", "job", job_id, "-o", check=False)
        if r.returncode != 0:
            if "Invalid job id" in r.stderr:
                return None
            self._call("scontrol", "show", "job", job_id, "-o")  # raises with the message
        text = r.stdout.strip()
        return parse_scontrol(text) if text else None

    def _sacct(self, job_id: str) -> dict[str, str] | None:
        """Accounting record of a purged job: slurmdbd, else the jobcomp text file (-c)."""
        fields = "JobID,JobName,State,ExitCode,ElapsedRaw"
        for extra in ([], ["-c"]):
            r = self._call("sacct", *extra, "-X", "-n", "-P", "-j", job_id, "-o", fields, check=False)
            for line in r.stdout.splitlines():
                parts = line.split("|")
                if len(parts) == 5 and parts[0] == job_id:
                    return {"JobId": parts[0], "JobName": parts[1], "JobState": parts[2].split()[0],
                            "ExitCode": parts[3], "RunSeconds": parts[4], "Reason": "(sacct)"}
        return None

    def _info(self, handle: Handle) -> dict[str, str] | None:
        """The job's record, only when it is *this* trial's job (token in its name)."""
        info = self.job_info(handle.job_id) or self._sacct(handle.job_id)
        if info is None or info.get("JobName") != f"infrarsi-{handle.token}":
            return None
        return info

    def poll(self, handle: Handle) -> LaunchEnd | None:
        info = self._info(handle)
        if info is None:
            return LaunchEnd(state="lost", lost=True,
                           evidence=[f"Slurm knows no job {handle.job_id} named infrarsi-{handle.token}"])
        state = info.get("JobState", "")
        if state not in FINISHED_STATES and is_held(info):
            return self._give_up_held(handle, info)
        if state == "PENDING":
            self._check_pending(handle, info)
        else:
            self._pending_since.pop(handle.job_id, None)
        if state not in FINISHED_STATES:
            run_s = _duration_s(info.get("RunTime", "0"))
            with self._lock:
                clock = self._clocks.get(handle.job_id)
            if clock is not None and clock.dropped() and handle.job_id not in self._why:
                with self._lock:  # its output past what the runner keeps: stopped (recorded invalid by the runner)
                    self._why.setdefault(handle.job_id, "dropped")
                self._call("scancel", handle.job_id, check=False)
            elif state == "RUNNING" and run_s > handle.time_limit_s + self.config.time_slack_s:
                with self._lock:
                    self._why.setdefault(handle.job_id, "timeout")
                self._call("scancel", handle.job_id)
            return None
        with self._lock:
            why = self._why.pop(handle.job_id, None)
        return self._launch_end(handle, info, why)

    def _give_up_held(self, handle: Handle, info: dict[str, str]) -> LaunchEnd:
        """A held job never starts by itself: cancel it and ask for a new launch (the Runner relaunches)."""
        try:
            self._call("scancel", handle.job_id)
        except SlurmError:
            pass  # it ended meanwhile
        self._pending_since.pop(handle.job_id, None)
        line = (f"slurm job {handle.job_id} was held (JobState={info.get('JobState')} Reason={info.get('Reason', '')} "
                f"Restarts={info.get('Restarts', '0')}): cancelled it")
        return LaunchEnd(state="HELD", lost=True, relaunch=True, evidence=[line], time_limit_s=handle.time_limit_s)

    def _check_pending(self, handle: Handle, info: dict[str, str]) -> None:
        """Raise SlurmPendingTimeout once the job has waited past its pending timeout (seen from this process)."""
        limit = handle.pending_timeout_s
        first = self._pending_since.setdefault(handle.job_id, time.monotonic())
        waited = time.monotonic() - first
        if limit is None or waited <= limit:
            return
        raise SlurmPendingTimeout(
            f"slurm job {handle.job_id} (trial {Path(handle.trial_dir).name}) waited {waited:.0f} s in the queue "
            f"(Reason={info.get('Reason', '?')}), past the contract's invariants.timing.pending_timeout_s = {limit:g} s")

    def live_clock(self, handle: Handle) -> None:
        """None: a Slurm job writes its own output, stamped by no harness clock while it runs (no pruning here)."""
        return None

    def cancel(self, handle: Handle, *, why: str = "cancel") -> None:
        with self._lock:
            self._why.setdefault(handle.job_id, why)
        self._call("scancel", handle.job_id)

    def end(self, handle: Handle) -> None:
        """scancel, as ``cancel``: the job has printed every line it is measured by (its files, read by the runner).
        Only a RUNNING job: lines found beside one still pending (a requeued job's, in the same output files) are not
        its own, so it is left to run to its end."""
        info = self._info(handle)
        if info is None or info.get("JobState") != "RUNNING":
            return
        self.cancel(handle, why="ended")

    def adopt(self, handle: Handle) -> Handle | None:
        """Keep watching the job when Slurm still knows it by id and token; else look it up by the
        token alone (the id was lost in a crash between sbatch and the record); else None."""
        if handle.job_id and self._info(handle) is not None:
            self._watch(handle)
            return handle
        # -t all: a job that finished while nobody watched is still this trial's result.
        r = self._call("squeue", "-h", "-t", "all", "--name", f"infrarsi-{handle.token}", "-o", "%i")
        ids = r.stdout.split()
        if ids:
            handle = handle.model_copy(update={"job_id": ids[0]})
            self._watch(handle)
            return handle
        return None

    def _watch(self, handle: Handle) -> None:
        """A clock for an adopted job (what it wrote before is stamped at once: one burst, scored by the bound)."""
        with self._lock:
            if handle.job_id not in self._clocks:
                self._clocks[handle.job_id] = TailClock(Path(handle.trial_dir))

    def _launch_end(self, handle: Handle, info: dict[str, str], why: str | None) -> LaunchEnd:
        state = info["JobState"]
        status, _, sig = info.get("ExitCode", "0:0").partition(":")
        rc, signum = int(status or 0), int(sig or 0)
        wall = float(info["RunSeconds"]) if "RunSeconds" in info else _duration_s(info.get("RunTime", "0"))
        ev = [f"slurm job {handle.job_id}: JobState={state} Reason={info.get('Reason', '')} ExitCode={rc}:{signum}"]
        text = _read(Path(handle.trial_dir) / STDERR) + _read(Path(handle.trial_dir) / STDOUT)
        mem_lines = list(dict.fromkeys(ln.strip() for ln in text.splitlines() if _OOM_LINE.search(ln) and "slurmstepd" in ln))
        ev += mem_lines[:3]
        oom = state == "OUT_OF_MEMORY" or bool(mem_lines)
        timed_out = state == "TIMEOUT" or (why == "timeout")
        ended = why == "ended" and state in ("CANCELLED", "COMPLETED")  # scancel'd, or it ended by itself meanwhile
        cancelled = state == "CANCELLED" and why not in ("timeout", "ended") and not oom
        if timed_out and why == "timeout":
            ev.append(f"cancelled by infrarsi after {wall:.0f} s: past its time limit of {handle.time_limit_s:g} s")
        if why == "dropped":
            ev.append(f"cancelled by infrarsi after {wall:.0f} s: its output was more than the runner keeps")
            cancelled = False
        if ended:
            ev.append(f"ended by infrarsi after {wall:.0f} s: every line it is measured by had come")
        with self._lock:
            clock = self._clocks.pop(handle.job_id, None)
        if clock is not None:  # stamps relative to the job's start as Slurm accounted it; Slurm's elapsed time
            clock.finish(started_unix=_unix(info.get("StartTime", "")) or time.time() - wall, wall_s=wall)
        # 125 is slurmstepd's own code for an OOM kill, not the command's exit status.
        returncode = None if signum or state == "OUT_OF_MEMORY" else rc
        return LaunchEnd(state=state, returncode=returncode, signal=signum or None, timed_out=timed_out,
                       cancelled=cancelled, ended=ended, oom=oom, wall_s=wall, evidence=ev,
                       time_limit_s=handle.time_limit_s)

    def queue(self) -> list[dict[str, str]]:
        """Jobs of this user in the queue: id, name, state."""
        r = self._call("squeue", "-h", "--me", "-o", "%i|%j|%T")
        out = []
        for line in r.stdout.splitlines():
            i, n, s = (line.split("|") + ["", ""])[:3]
            out.append({"job_id": i, "name": n, "state": s})
        return out


_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=")


def parse_scontrol(line: str) -> dict[str, str]:
    """``Key=value Key2=value two ...`` (one ``scontrol -o`` line) -> dict; values may hold spaces."""
    keys = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def _duration_s(text: str) -> float:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) -> seconds."""
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":") if p.isdigit()]
    secs = 0
    for p in parts:
        secs = secs * 60 + p
    return days * 86400 + secs


def _unix(stamp: str) -> float | None:
    """Slurm's ``2026-12-07T04:01:02`` (the controller's local time) -> unix seconds, or None ("Unknown", "None")."""
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _read(path: Path, max_bytes: int = 256_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


__all__ = ["CAP_ENV", "SlurmError", "SlurmExecutor", "SlurmPendingTimeout", "SlurmUnreachable", "is_held",
           "parse_scontrol"]


BWRAP_PER_USER_TASK = "bwrap per task of the launch's srun"  # a trial record's isolation (user_srun.py)
SECCOMP_FILE = "seccomp.bpf"  # in the trial's folder: each task's bwrap reads the filter from it (--seccomp 9 9<file)
SECCOMP_FD = 9
PODMAN_PROFILE = "podman-seccomp.json"  # in the trial's folder: the profile its podman container runs under


def _status_file(trial_dir: Path) -> Path:
    """Where a job's inner wrapper says how the command ended: in outputs/, the one folder the trial may write (the
    job script believes it only where bwrap's own status agrees)."""
    return Path(trial_dir) / OUTPUTS / EXIT_STATUS


def _needs_network(spec: LaunchSpec, srun: list[str]) -> bool:
    """A job whose ranks meet over the network (several nodes, or tasks started by srun) keeps the node's."""
    return spec.nodes > 1 or bool(srun)
