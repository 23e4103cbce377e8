"""A real one-node Slurm cluster on localhost, for tests and demos.

``SlurmCluster`` installs the Debian packages when they are missing (as root), creates the munge key,
writes ``slurm.conf`` into a temporary directory, starts ``slurmctld`` and ``slurmd`` in the foreground
as our own child processes, waits until the node is idle and stops everything again.

Facts this rests on (Slurm 22.05 from Debian 12):
- package scripts try to start daemons; a temporary ``/usr/sbin/policy-rc.d`` that exits 101 stops them;
- ``KillWait=3``: a cancelled job blocks the only node for the kill grace period (default 30 s);
- ``MinJobAge=3600``: without slurmdbd, ``scontrol show job ID`` is how finished jobs stay visible;
- ``SlurmdParameters=config_overrides``: the node may declare more CPUs than the machine has, so
  several small test jobs run at once;
- memory: cgroup v1 enforcement when ``/sys/fs/cgroup/memory`` exists, else polling (linuxproc).
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "munged")
POLICY_RC = Path("/usr/sbin/policy-rc.d")


class SlurmSetupError(RuntimeError):
    """The cluster could not be set up; the message says which step failed."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def install(*, timeout_s: float = 300) -> None:
    """``apt-get install --no-install-recommends`` the Slurm and munge packages, without letting the
    package scripts start daemons. Needs root. Raises SlurmSetupError naming the failed command. Test processes
    started side by side (pytest -n) install one at a time: the others wait on a lock file, then find it done."""
    if not missing_binaries():
        return
    with open(os.path.join(tempfile.gettempdir(), "infrarsi-slurm-install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if missing_binaries():
            _install(timeout_s=timeout_s)


def _install(*, timeout_s: float) -> None:
    if os.geteuid() != 0:
        raise SlurmSetupError(f"Slurm is not installed ({', '.join(missing_binaries())} missing) and installing needs root")
    if shutil.which("apt-get") is None:
        raise SlurmSetupError("Slurm is not installed and there is no apt-get to install it with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    made_policy = not POLICY_RC.exists()
    if made_policy:
        POLICY_RC.write_text("#!/bin/sh\n# temporary: keep package scripts from starting daemons\nexit 101\n")
        POLICY_RC.chmod(0o755)
    try:
        for cmd in (["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
            try:
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise SlurmSetupError(f"`{' '.join(cmd)}` did not finish in {timeout_s:.0f} s") from None
            if r.returncode != 0:
                tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise SlurmSetupError(f"`{' '.join(cmd)}` failed (exit {r.returncode}): {tail}")
    finally:
        if made_policy:
            POLICY_RC.unlink(missing_ok=True)
    if missing_binaries():
        raise SlurmSetupError(f"installed {PACKAGES} but {missing_binaries()} are still missing")


def _proc_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (``kill -0`` says yes to zombies)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _running(comm: str) -> bool:
    """Whether any live process is named ``comm``."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == comm and _proc_alive(int(d.name)):
                    return True
            except OSError:
                continue
    return False


def _munge_ok() -> bool:
    try:
        enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=5)
        dec = subprocess.run(["unmunge"], input=enc.stdout, capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return enc.returncode == 0 and dec.returncode == 0


def ensure_munge() -> subprocess.Popen | None:
    """A working munged; returns the process when this call started it (None when one already ran)."""
    if _munge_ok():
        return None
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        r = subprocess.run(["runuser", "-u", "munge", "--", "mungekey", "--create"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise SlurmSetupError(f"`mungekey --create` failed: {r.stderr.strip()}")
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    proc = subprocess.Popen(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--foreground"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _munge_ok():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SlurmSetupError("munged did not start: `munge -n | unmunge` still fails")


def _mem_total_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise SlurmSetupError("no MemTotal in /proc/meminfo")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_conf(state: Path, *, cpus: int, real_memory_mib: int, cgroup_v1: bool, ctld_port: int = 6817,
               slurmd_port: int = 6818, first_job_id: int = 1) -> str:
    """The text of a one-node slurm.conf with every path under ``state``."""
    if cgroup_v1:
        tracking = ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup", "JobAcctGatherType=jobacct_gather/cgroup"]
    else:
        tracking = ["ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/linux",
                    "JobAcctGatherParams=OverMemoryKill", "JobAcctGatherFrequency=1"]
    lines = [
        "ClusterName=infrarsi-test", "SlurmctldHost=localhost", "SlurmUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", "MpiDefault=none",
        f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/d",
        f"SlurmctldPidFile={state}/slurmctld.pid", f"SlurmdPidFile={state}/slurmd.pid",
        f"SlurmctldLogFile={state}/slurmctld.log", f"SlurmdLogFile={state}/slurmd.log",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", f"FirstJobId={first_job_id}",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "SchedulerParameters=batch_sched_delay=0", "SlurmdParameters=config_overrides",
        "MinJobAge=3600", "KillWait=3", "ReturnToService=2", "InactiveLimit=0",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt", f"JobCompLoc={state}/jobcomp.txt",
        *tracking,
        f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={real_memory_mib} State=UNKNOWN",
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=512",
    ]
    return "\n".join(lines) + "\n"


class SlurmCluster:
    """A one-node cluster on localhost. ``with SlurmCluster() as c: ...`` or ``start()``/``stop()``.

    ``env`` holds ``SLURM_CONF``; pass it to every client command (or use ``export_env()``)."""

    def __init__(self, *, cpus: int = 4, workdir: str | Path | None = None, start_timeout_s: float = 60,
                 memory: str = "auto") -> None:
        """``memory``: "cgroup" (cgroup v1 enforcement), "linuxproc" (polling), or "auto" (cgroup v1 when
        /sys/fs/cgroup/memory exists)."""
        if memory not in ("auto", "cgroup", "linuxproc"):
            raise ValueError(f"memory={memory!r}; use auto, cgroup or linuxproc")
        self.cpus = cpus
        self.start_timeout_s = start_timeout_s
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="infrarsi-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.cgroup_v1 = memory == "cgroup" or (memory == "auto" and Path("/sys/fs/cgroup/memory").is_dir())
        self._procs: list[subprocess.Popen] = []
        self._munged: subprocess.Popen | None = None
        self._old_conf: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def client(self, *args: str, timeout_s: float = 15) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout_s)

    def start(self) -> "SlurmCluster":
        install()
        self._munged = ensure_munge()
        state = self.dir / "state"
        for sub in ("ctld", "d"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        real_mem = max(1024, _mem_total_mib() - 1024)
        # Free ports and a random first job id: two clusters on one machine (two test sessions) neither
        # share a port nor a job id (cgroup paths are named after job ids).
        self.conf.write_text(slurm_conf(state, cpus=self.cpus, real_memory_mib=real_mem, cgroup_v1=self.cgroup_v1,
                                        ctld_port=free_port(), slurmd_port=free_port(),
                                        first_job_id=random.randint(1, 900_000)))
        if self.cgroup_v1:
            (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainSwapSpace=no\n")
        env = {**os.environ, **self.env}
        # -D: stay in the foreground as our children, so stop() can end exactly these processes.
        # -i: ignore state left by an earlier cluster in this directory.
        for cmd, log in ((["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out"),
                         (["slurmd", "-D", "-f", str(self.conf), "-N", "localhost"], "slurmd.out")):
            out = open(self.dir / log, "wb")
            self._procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            out.close()
        self._old_conf = os.environ.get("SLURM_CONF")
        deadline = time.monotonic() + self.start_timeout_s
        state_now = ""
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self._procs if p.poll() is not None]
            if dead:
                self.stop()
                raise SlurmSetupError(f"{dead[0]} exited during start-up; see {self.dir}/{dead[0]}.out and state/{dead[0]}.log")
            try:
                r = self.client("sinfo", "-h", "-n", "localhost", "-o", "%T", timeout_s=10)
                state_now = r.stdout.strip()
            except subprocess.TimeoutExpired:
                state_now = "(sinfo timed out)"
            if state_now == "idle":
                return self
            time.sleep(0.2)
        self.stop()
        raise SlurmSetupError(f"the node did not become idle in {self.start_timeout_s:.0f} s (last state {state_now!r}); logs in {self.dir}")

    def kill_controller(self) -> None:
        """SIGKILL slurmctld (a controller crash); slurmd and running jobs stay up."""
        ctld = self._procs[0]
        if ctld.poll() is None:
            os.killpg(ctld.pid, signal.SIGKILL)
            ctld.wait()

    def restart_controller(self) -> None:
        """Start slurmctld again from its saved state (jobs recovered, not ``-i``) and wait until it answers."""
        out = open(self.dir / "slurmctld.out", "ab")
        self._procs[0] = subprocess.Popen(["slurmctld", "-D", "-f", str(self.conf)], env={**os.environ, **self.env},
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._procs[0].poll() is not None:
                raise SlurmSetupError(f"slurmctld exited on restart; see {self.dir}/slurmctld.out")
            try:
                if self.client("scontrol", "ping", timeout_s=10).stdout.count("UP"):
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        raise SlurmSetupError(f"slurmctld did not answer within {self.start_timeout_s:.0f} s of its restart")

    def cancel_all(self) -> None:
        try:
            r = self.client("squeue", "-h", "-o", "%i", timeout_s=10)
            ids = r.stdout.split()
            if ids:
                self.client("scancel", *ids, timeout_s=10)
        except subprocess.TimeoutExpired:
            pass

    def wait_drained(self, timeout_s: float = 15) -> None:
        """Until no job is pending, running or completing (a completing job blocks the node)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            r = self.client("squeue", "-h", "-o", "%T", timeout_s=10)
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel every job (shutdown alone leaves job processes alive), shut down, end the daemons."""
        if any(p.poll() is None for p in self._procs):
            self.cancel_all()
            self.wait_drained(timeout_s=10)
            try:
                self.client("scontrol", "shutdown", timeout_s=10)
            except subprocess.TimeoutExpired:
                pass
        for p in self._procs:
            _end(p)  # `scontrol shutdown` ends both daemons; signals only if they linger
        self._procs.clear()
        if self._munged is not None and not _running("slurmctld"):  # another cluster may still need munge
            _end(self._munged, wait_first_s=0)
            self._munged = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _end(p: subprocess.Popen, *, wait_first_s: float = 5, grace_s: float = 5) -> None:
    try:
        p.wait(timeout=wait_first_s)
        return
    except subprocess.TimeoutExpired:
        pass
    # Each daemon was started in its own session: signal the whole group (runuser + munged, for one).
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
