"""The machine's conditions while a trial ran: what else the machine was doing, recorded beside the trial.

A step time means little without the load it was measured under: the same setting ran at 0.8 s/step in a quiet
minute and at 7 s/step when another job took a core. So every trial records (``Trial.conditions``):

- ``load_start`` / ``load_end``: the 1-minute load average when it started and ended (runnable processes);
- ``cores``: the CPUs this process may run on;
- ``busy_cpu_s``: CPU seconds the whole machine spent busy during the trial (``/proc/stat``: user + nice + system +
  irq + softirq + steal, all CPUs), and ``others_cpu_s``: that minus the trial's own processes' CPU (its clock's
  last sample), i.e. what other processes took; ``others_cores`` = others_cpu_s / wall: cores they kept busy;
- on a machine with ``nvidia-smi``: per GPU, the processes on it, its SM clock (MHz), temperature (C) and
  utilization (%), at the trial's end.

:func:`drift` compares two sets of trials' conditions in one sentence ("load rose from 1.2 to 6.0 ...").
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import Any

_BUSY = (0, 1, 2, 5, 6, 7)  # /proc/stat cpu fields: user nice system [idle iowait] irq softirq steal
# Loads this far apart (and at least this ratio) are a shift: a baseline measured before it no longer compares.
SHIFT_ABS = 1.0
SHIFT_RATIO = 1.5


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def busy_cpu_s() -> float | None:
    """CPU seconds the machine has spent busy since boot (all CPUs; None without /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
        return sum(int(fields[i]) for i in _BUSY if i < len(fields)) / ticks
    except (OSError, ValueError, IndexError):
        return None


def gpus() -> list[dict[str, Any]]:
    """Per GPU: index, SM clock (MHz), temperature (C), utilization (%), compute processes; [] without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        q = subprocess.run([smi, "--query-gpu=index,uuid,clocks.sm,temperature.gpu,utilization.gpu",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        apps = subprocess.run([smi, "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    procs: dict[str, list[dict[str, Any]]] = {}
    for line in apps.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            procs.setdefault(parts[0], []).append({"pid": parts[1], "memory_mib": parts[2]})
    out = []
    for line in q.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5:
            out.append({"index": parts[0], "sm_clock_mhz": parts[2], "temperature_c": parts[3],
                        "utilization_pct": parts[4], "processes": procs.get(parts[1], [])})
    return out


class Watch:
    """Conditions over one trial: :meth:`start` before the launch, :meth:`end` after it."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.load0 = load()
        self.busy0 = busy_cpu_s()

    def end(self, *, own_cpu_s: float | None) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        busy1 = busy_cpu_s()
        out: dict[str, Any] = {"load_start": self.load0, "load_end": load(), "cores": cores()}
        if self.busy0 is not None and busy1 is not None:
            busy = max(0.0, busy1 - self.busy0)
            out["busy_cpu_s"] = round(busy, 3)
            if own_cpu_s is not None:
                others = max(0.0, busy - own_cpu_s)
                out["others_cpu_s"] = round(others, 3)
                out["others_cores"] = round(others / wall, 2) if wall > 0 else None
        g = gpus()
        if g:
            out["gpus"] = g
        return out


def trial_load(conditions: Mapping[str, Any]) -> float | None:
    """One number for a trial's load: the cores other processes kept busy, else the mean of its load averages."""
    if conditions.get("others_cores") is not None:
        return float(conditions["others_cores"])
    xs = [conditions[k] for k in ("load_start", "load_end") if conditions.get(k) is not None]
    return statistics.fmean(xs) if xs else None


def load_of(conditions: Iterable[Mapping[str, Any]]) -> float | None:
    """The median load average over trials' conditions (None when none recorded one)."""
    xs = [statistics.fmean([c[k] for k in ("load_start", "load_end") if c.get(k) is not None])
          for c in conditions if c.get("load_start") is not None or c.get("load_end") is not None]
    return statistics.median(xs) if xs else None


def shifted(before: float | None, now: float | None) -> bool:
    """Whether the load moved enough that a baseline measured at ``before`` no longer compares at ``now``."""
    if before is None or now is None:
        return False
    lo, hi = sorted((before, now))
    return hi - lo >= SHIFT_ABS and hi >= SHIFT_RATIO * max(lo, 0.1)


def drift(label_a: str, a: float | None, label_b: str, b: float | None) -> str | None:
    """One sentence when the load shifted between two phases of a run, e.g. "load average rose from 1.2 during the
    search to 6.0 during verification"; None when it did not (or was not recorded)."""
    if not shifted(a, b):
        return None
    verb = "rose" if b > a else "fell"
    return f"load average {verb} from {a:.1f} {label_a} to {b:.1f} {label_b}"
