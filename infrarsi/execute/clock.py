"""Time measured by the harness, not by the measured process.

A trial's step time is read from what its process prints ("elapsed time per iteration (ms): 812.3").
A process can print anything, so the harness keeps its own clock:

- the local executor reads the trial's stdout through a pipe (:class:`LineClock`), stamps each line with
  the moment it arrived (monotonic seconds since the launch) and writes it to ``trial_dir/stdout``;
- when the process has ended, the trial's clock record (RunDir.write_clock_at) gets the wall time, every line's arrival time and
  the sha256 of the bytes that came through the pipe. It is written after the process group is gone,
  so nothing the trial ran can write it.

:func:`referee` then compares, for the contract's measured window, the step time the log reports with
the median gap between the arrivals of consecutive iteration lines. A report off by more than
``TOLERANCE`` (relative to the larger) fails the trial as ``invalid`` with both numbers. There is no absolute
slack: any slack would let a log claim steps shorter than it and print its lines in a burst.
So does a stdout rewritten during the trial (its sha256 is not what came through the pipe), an
iteration line printed twice (a forged line after the real one), a process that left children holding
its stdout, and a log whose step times add up to more than the process ran.

A forger that paces its own lines (prints its forged iteration lines at the claimed pace, after or instead of
the real steps) passes the gap check. The clock also samples the CPU time of the trial's process group
right after each iteration line arrives (a sampler thread, each sample stamped with its own time;
nanoseconds on a CPU, ``/proc/<pid>/task/<tid>/schedstat``, summed over every thread of every process in the
group). A measured window whose processes spent less than
``MIN_CPU_FRACTION`` of one core is a window of sleeping, not of training steps: invalid, with both numbers.
What is left: a forger that burns CPU while it paces its lines (a busy loop between forged lines, with the
real steps skipped or replayed) is not told apart by this clock; the loss referee still holds its losses
against the baseline's, and its measured wall time (cost) is its real one.

Slurm trials have no clock file (the job writes its own output): only the wall-time bound applies.
Adapters whose step time is modelled, not measured (``Adapter.measured_time = False``, the simulated
clusters), are not checked against the clock.
"""

from __future__ import annotations

import hashlib
import os
import re
import statistics
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import IO, Any

from ..rundir import RunDir
# A reported median step time may differ from the median arrival gap by this fraction of the larger: the gap
# also holds the printing of the timer and memory lines (well under a millisecond), and a loaded machine
# delays a line now and then (the median of the window's gaps absorbs one). The forgeries it is there
# for are off by factors (a log that claims 8.9x), not by percent.
TOLERANCE = 0.25
# A training step keeps at least this fraction of one core busy in its own processes: the Python that launches
# the kernels, the optimizer, the timers' synchronize (a CUDA wait spins by default). A process that sleeps
# between its lines spends well under 1% (a print and a wake-up per line). Summed over all the trial's processes.
MIN_CPU_FRACTION = 0.05
_ITER = re.compile(rb"iteration\s+(\d+)\s*/\s*\d+\s*\|")
_ITER_LINE = b"elapsed time per iteration"


RESCAN_S = 1.0  # how often the CPU sampler looks for new processes of the group in /proc (a full scan costs ms)


def group_pids(pgid: int) -> list[int]:
    """Every process in process group ``pgid``, and every descendant of one (a scan of /proc): torchrun starts
    each rank in a session of its own (``start_new_session``), so the group alone holds the launcher but not the
    ranks that train."""
    parent: dict[int, int] = {}
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()  # fields after the name: state ppid pgrp
            parent[int(name)] = int(fields[1])
            if int(fields[2]) == pgid:
                out.append(int(name))
        except (OSError, ValueError, IndexError):  # the process ended while we looked
            continue
    members = set(out)
    for pid in parent:
        p, seen = parent.get(pid), 0
        while p and p not in members and seen < 64:  # walk up to a member of the group, or to init
            p, seen = parent.get(p), seen + 1
        if p in members and pid not in members:
            out.append(pid)
    return out


def threads_cpu_ns(pids: list[int]) -> dict[int, int]:
    """thread id -> nanoseconds it has run on a CPU (``/proc/<pid>/task/<tid>/schedstat``), for every thread of
    ``pids`` ({} when /proc has no schedstat)."""
    out: dict[int, int] = {}
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


class LineClock:
    """Copies a pipe to a file line by line, stamping each line's arrival (a daemon thread)."""

    def __init__(self, pipe: IO[bytes], out_path: Path, *, pgid: int | None = None,
                 members: Callable[[], list[int]] | None = None) -> None:
        # members: the trial's processes (its cgroup's list, which setsid cannot leave); else the process group
        self.pipe, self.out_path, self.pgid, self.members = pipe, Path(out_path), pgid, members
        self.t0 = time.monotonic()
        self.started_unix = time.time()
        self.arrivals: list[float] = []  # seconds since the launch, one per line
        # Per line: seconds of CPU the group had used, and when that was sampled (seconds since the launch), for
        # iteration lines (None for other lines, and for an iteration line that came while the sampler was busy).
        # The CPU is the sum, over samples, of each thread's increase since the previous sample (a thread that
        # ended takes its last part with it). A sampler thread takes the samples, so the reader's stamps never
        # wait for a /proc scan.
        self.cpu_s: list[float | None] = []
        self.cpu_t_s: list[float | None] = []
        self._cpu_total_ns = 0
        self._cpu_prev: dict[int, int] = {}
        self._pids: list[int] = []
        self._scanned = -RESCAN_S
        self._want: int | None = None  # the line waiting for a sample
        self._done = False
        self._cv = threading.Condition()
        self._sampler = threading.Thread(target=self._sample, daemon=True, name="cpu-sampler")
        if pgid is not None:
            self._sampler.start()
        self._sha = hashlib.sha256()
        self._out = open(self.out_path, "wb")  # exists from the launch on (tail -f it), not from the first line
        self._thread = threading.Thread(target=self._copy, daemon=True, name="line-clock")
        self._thread.start()

    def _copy(self) -> None:
        with self._out as out:
            for line in iter(self.pipe.readline, b""):
                self.arrivals.append(time.monotonic() - self.t0)
                self.cpu_s.append(None)
                self.cpu_t_s.append(None)
                if _ITER_LINE in line and self.pgid is not None:
                    with self._cv:
                        self._want = len(self.arrivals) - 1
                        self._cv.notify()
                self._sha.update(line)
                out.write(line)
                out.flush()
        self.pipe.close()

    def _sample(self) -> None:
        while True:
            with self._cv:
                while self._want is None and not self._done:
                    self._cv.wait()
                if self._want is None:
                    return
                i, self._want = self._want, None
            now = time.monotonic() - self.t0
            if now - self._scanned >= RESCAN_S:
                self._pids = self.members() if self.members is not None else group_pids(self.pgid)
                self._scanned = now
            cpu = threads_cpu_ns(self._pids)
            if not cpu:
                continue
            self._cpu_total_ns += sum(max(0, ns - self._cpu_prev.get(tid, 0)) for tid, ns in cpu.items())
            self._cpu_prev = cpu
            self.cpu_s[i], self.cpu_t_s[i] = round(self._cpu_total_ns / 1e9, 6), round(now, 6)

    def finish(self, wall_s: float, *, grace_s: float = 5.0) -> dict[str, Any]:
        """Wait for the pipe to close (every writer gone), then write the clock record; returns its body."""
        self._thread.join(grace_s)
        with self._cv:
            self._done = True
            self._cv.notify()
        if self.pgid is not None:
            self._sampler.join(grace_s)
        body = {"wall_s": wall_s, "started_unix": self.started_unix, "complete": not self._thread.is_alive(),
                "stdout_sha256": self._sha.hexdigest(), "arrivals_s": [round(t, 6) for t in self.arrivals],
                "cpu_s": self.cpu_s, "cpu_t_s": self.cpu_t_s}
        # Sealed into the run's chain when the trial lives in a locked run (RUN_DIR/trials/<n>/).
        RunDir.write_clock_at(self.out_path.parent, body)
        return body


def pipe_lines(data: bytes) -> list[bytes]:
    """``data`` cut where the pipe's reader cut it: after each ``\\n`` only (``readline``), so a progress bar's
    ``\\r`` stays inside its line (``bytes.splitlines`` would also cut at ``\\r``, ``\\x0b``, ``\\x0c``, ...)."""
    out = data.split(b"\n")
    last = out.pop()
    lines = [ln + b"\n" for ln in out]
    return lines + [last] if last else lines


def read_clock(trial_dir: Path) -> dict[str, Any] | None:
    clock = RunDir.clock_at(trial_dir)
    return clock.model_dump() if clock is not None else None


def referee(stdout_path: Path, *, step_time_s: float | None, step_times_s: list[float], warmup_steps: int,
            measured_steps: int, wall_s: float, measured_time: bool = True) -> str | None:
    """Why the reported step times cannot be believed (one line with both numbers), or None.

    ``step_time_s`` is the reported median over iterations ``warmup+1 .. warmup+measured``; ``step_times_s``
    every reported step; ``wall_s`` the process's wall time as the executor measured it."""
    if step_time_s is None:
        return None
    if measured_time and step_times_s and sum(step_times_s) > wall_s * 1.05 + 1.0:
        return (f"the log reports {sum(step_times_s):.3f} s of steps but the process ran {wall_s:.3f} s "
                f"(harness wall time): the reported step times are not this process's")
    clock = read_clock(stdout_path.parent)
    if clock is None or not measured_time:
        return None
    data = stdout_path.read_bytes() if stdout_path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != clock["stdout_sha256"]:
        return ("stdout was rewritten during the trial: its bytes are not what the process printed through the "
                "harness's pipe (sha256 differs)")
    if not clock.get("complete", True):
        return "a process of the trial outlived it and kept its stdout open (left running outside its process group)"
    lines = pipe_lines(data)
    arrivals = clock["arrivals_s"]
    if len(lines) != len(arrivals):
        return f"stdout has {len(lines)} lines but {len(arrivals)} came through the harness's pipe"
    seen, cpu_at, twice = _iterations(lines, clock)
    first = warmup_steps + 1 if warmup_steps > 0 else 2  # a gap needs the line before the step
    have = [i for i in range(first, warmup_steps + measured_steps + 1) if i in seen and i - 1 in seen]
    gaps = [seen[i] - seen[i - 1] for i in have]
    if gaps:
        # Two harness measures of the same window: the median gap, and the window's span over its steps. A loaded
        # reader stamps lines in bursts now and then, which moves the median gap but not the span; a log that prints
        # its lines in a burst moves both. Either agreeing with the report is enough: a forger able to fake the span
        # paces its lines, which the CPU check below is for.
        measured = statistics.median(gaps)
        span = (seen[have[-1]] - seen[have[0] - 1]) / (have[-1] - have[0] + 1)

        def off(m: float) -> bool:
            return abs(step_time_s - m) > TOLERANCE * max(step_time_s, m)

        if off(measured) and off(span):
            return (f"reported step time {step_time_s * 1000:.1f} ms, measured by the harness {measured * 1000:.1f} "
                    f"ms (median gap between iteration lines {warmup_steps + 1}..{warmup_steps + measured_steps}; "
                    f"{span * 1000:.1f} ms over the window's span); they differ by more than {TOLERANCE:.0%}: "
                    f"the log's times are not the process's")
    why = _cpu_check(seen, cpu_at, warmup_steps, measured_steps)
    if why:
        return why
    if twice:
        it, a, b = twice[0]
        return (f"iteration {it} was reported twice (at {a:.3f} s and {b:.3f} s after the launch): a second line "
                f"overrides the first, so the log's times are not the process's")
    return None


def _iterations(lines: list[bytes], clock: dict[str, Any]):
    """(iteration -> arrival of its line (the last one, as the parser reads it), iteration -> (sampled at, the
    group's CPU s) after its line or None, [(iteration, first arrival, second arrival)] for repeated lines)."""
    arrivals = clock["arrivals_s"]
    cpus = clock.get("cpu_s") or [None] * len(arrivals)
    cpu_ts = clock.get("cpu_t_s") or [None] * len(arrivals)
    seen: dict[int, float] = {}
    cpu_at: dict[int, tuple[float, float] | None] = {}
    twice: list[tuple[int, float, float]] = []
    for line, t, c, ct in zip(lines, arrivals, cpus, cpu_ts):
        m = _ITER.search(line)
        if m and _ITER_LINE in line:
            it = int(m.group(1))
            if it in seen:
                twice.append((it, seen[it], t))
            seen[it], cpu_at[it] = t, (None if c is None or ct is None else (ct, c))
    return seen, cpu_at, twice


def harness_line(stdout_path: Path, *, warmup_steps: int, measured_steps: int) -> str | None:
    """What the harness's own clock measured over the contract's window, as one evidence line for the trial's
    record (None without a clock): the step time as the runner saw it, beside the one the log reports."""
    clock = read_clock(stdout_path.parent)
    if clock is None:
        return None
    data = stdout_path.read_bytes() if stdout_path.is_file() else b""
    lines = pipe_lines(data)
    if len(lines) != len(clock["arrivals_s"]):
        return None
    seen, cpu_at, _ = _iterations(lines, clock)
    first = warmup_steps + 1 if warmup_steps > 0 else 2
    have = [i for i in range(first, warmup_steps + measured_steps + 1) if i in seen and i - 1 in seen]
    if not have:
        return None
    gap = statistics.median(seen[i] - seen[i - 1] for i in have)
    span = (seen[have[-1]] - seen[have[0] - 1]) / (have[-1] - have[0] + 1)
    its = [i for i in range(max(1, warmup_steps), warmup_steps + measured_steps + 1) if cpu_at.get(i) is not None]
    cpu = ""
    if len(its) >= 2 and cpu_at[its[-1]][0] > cpu_at[its[0]][0]:
        (ta, ca), (tb, cb) = cpu_at[its[0]], cpu_at[its[-1]]
        cpu = f"; its processes ran {(cb - ca) / (tb - ta):.0%} of a core"
    return (f"harness clock: iteration lines {have[0] - 1}..{have[-1]} arrived every {gap * 1000:.1f} ms (median; "
            f"{span * 1000:.1f} ms over the span){cpu}; wall {clock['wall_s']:.2f} s")


def _cpu_check(seen: dict[int, float], cpu_at: dict[int, tuple[float, float] | None], warmup: int,
               measured: int) -> str | None:
    """Why the measured window's lines were paced rather than computed (its processes barely ran), or None.
    The window runs from the first to the last iteration line in ``warmup .. warmup + measured`` that carry a
    CPU sample (timed by the sample itself); fewer than two: nothing to check."""
    its = [i for i in range(max(1, warmup), warmup + measured + 1) if i in seen and cpu_at.get(i) is not None]
    if len(its) < 2:
        return None
    (ta, ca), (tb, cb) = cpu_at[its[0]], cpu_at[its[-1]]
    wall, cpu = tb - ta, cb - ca
    if wall <= 0 or cpu >= MIN_CPU_FRACTION * wall:
        return None
    return (f"between iteration lines {its[0]} and {its[-1]} the trial's processes ran {cpu * 1000:.1f} ms on a CPU "
            f"in {wall * 1000:.1f} ms ({cpu / wall:.1%} of one core, under the {MIN_CPU_FRACTION:.0%} a training "
            f"step keeps busy): its lines were paced, not computed")
