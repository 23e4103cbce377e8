"""Time measured by the harness, not by the measured process: the harness's time is the step time a trial is scored by.

A trial's log reports step times ("elapsed time per iteration (ms): 812.3", torchtitan's "step: 12 loss: ..."). A
process can print anything and time itself with any clock, so the harness keeps its own:

- the local executor reads the trial's stdout AND stderr through pipes (:class:`LineClock`), stamps each line with
  the moment it arrived (monotonic seconds since the launch) and the read that brought it (``chunks``: lines written
  together arrive in one read), and copies each stream to ``trial_dir/stdout`` / ``trial_dir/stderr``;
- when the process has ended, the trial's clock record (RunDir.write_clock_at) gets the wall time, every line's
  arrival time and read, and the sha256 of the bytes that came through each pipe. It is written after the process
  group is gone, so nothing the trial ran can write it.

:func:`measure` then times the contract's measured window from the arrivals of the step lines (every framework's
spelling, :func:`step_of`, on every stream the parsers read), end to end: from the first copy of the line before the
window to the last copy of its last line, over its steps. A line arrives after its step was computed (it carries
its loss) but the trial chooses how much later, so the pattern of the gaps is the trial's to shape (lines held back,
then let go one by one at any pace); the window's length is not, unless the lines before it were held too, which
leaves a silence before the window longer than the window: the trial is then timed from the line before that
silence. That is the step time the trial is scored by (execute/runner.py); the median gap between lines is kept as
the per-step cross-check, the log's own number beside it as evidence, and a disagreement is reported, never held
against an honest trial (a loaded machine delays lines; it does not make a log lie). So:

- a trial that slows its own clock reports shorter steps, and is scored by the harness's window all the same;
- a trial that prints its step lines on stderr is clocked there;
- a trial that holds its lines back and lets them go paced is scored by the window they span, or from the line
  before the silence they left (an upper bound); extra copies of a line (one per process is allowed: torchtitan
  logs on every rank) only lengthen the window;
- a trial whose step lines arrive in bursts (buffered output, or held back and let go together) cannot be timed
  step by step: it is scored by the arrival of its last measured step line over that step's number (start-up
  included: an upper bound, never faster than the truth), with why in its evidence.

A trial is invalid only for what the machine's load cannot cause: a stdout or stderr rewritten during the trial
(its sha256 is not what came through the pipe), a step line printed more often than the trial has processes (a
forged line after the real one; torchtitan logs each step on every rank), a process that left children holding a
pipe, a log whose step times add up to more than the process ran, and a measured window whose processes slept. The
clock samples the CPU time of the trial's process group right after each step line arrives (a sampler thread, each
sample stamped with its own time; nanoseconds on a CPU, ``/proc/<pid>/task/<tid>/schedstat``, summed over every
thread of every process in the group). A measured window whose processes spent less than ``MIN_CPU_FRACTION`` of
one core is a window of sleeping, not of training steps. A trial that computes every step before its first step
line, then lets the lines go paced while it burns CPU, looks here like a trial with a long start-up (as a
``torch.compile`` does): its figure is held to its wall time by end_to_end.py.

What the runner keeps of a trial's output is bounded (MAX_LINES stamps, MAX_BYTES per stream): past it, or when
the disk refuses the copy, the rest is read and dropped and the trial is recorded invalid with the figures.

Slurm trials (the job writes its own output) are clocked by tail_clock.py's :class:`TailClock`: the runner reads the job's files as
they grow, and the stamps are taken from the job's start as Slurm accounted it, with Slurm's elapsed time as the
record's wall time.
Adapters whose step time is modelled, not measured (``Adapter.measured_time = False``, the simulated clusters),
keep the model's time (their lines are clocked all the same).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import statistics
import threading
import time
from array import array
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Callable
from typing import IO, Any

from ..rundir import RunDir
from .executor import create_new

# A reported median step time may differ from the harness's by this fraction of the larger before the record says
# they disagree (the harness's time is scored either way, so this only decides what the evidence mentions): the gap
# also holds the printing of the timer and memory lines (well under a millisecond), and a loaded machine delays a line
# now and then. A clock slowed by 20% is mentioned.
TOLERANCE = 0.10
# A training step keeps at least this fraction of one core busy in its own processes: the Python that launches
# the kernels, the optimizer, the timers' synchronize (a CUDA wait spins by default). A process that sleeps
# between its lines spends well under 1% (a print and a wake-up per line). Summed over all the trial's processes.
MIN_CPU_FRACTION = 0.05
# ... judged over at least one period of the CPU sampler (SAMPLE_EVERY_S). A runnable process on a loaded machine can
# get no CPU at all for tens of milliseconds (the scheduler serves each runnable task once per period, and the period
# grows with their number), so a window of two 40 ms steps says nothing (a megatron-core pipeline trial was judged
# 'paced' at load 3.5 on 2 cores: 0.0 ms in 80 ms). A shorter measured window is widened to every step line of its
# rank; shorter still, it is not judged here (the end-to-end check, end_to_end.py, still bounds its time).
MIN_CPU_WINDOW_S = 0.2
STREAMS = ("stdout", "stderr")  # the files the parsers read, each copied from its own pipe

# The step lines the parsers read: Megatron's (and minigpt's) "iteration N/ M | ... elapsed time per iteration",
# torchtitan's "step: N  loss: ..." (colour codes between the words; "validate step:" is not a training step);
# either may carry torchrun's "[rankK]:" prefix.
_ITER = re.compile(rb"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")  # "iteration i/ M |": the step, the last step
_ITER_LINE = b"elapsed time per iteration"
_TT_STEP = re.compile(rb"(?<!validate )step:\s*(\d+)\s+loss:")
_RANK = re.compile(rb"^\[(?:rank|default)(\d+)\]:")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")


def step_of(line: bytes) -> tuple[int, int] | None:
    """(rank, step) of a training-step line in any framework's spelling, or None (rank 0 without a prefix)."""
    if _ITER_LINE in line:
        m = _ITER.search(line)
    elif b"step:" in line:
        line = _ANSI.sub(b"", line)
        m = _TT_STEP.search(line)
    else:
        return None
    if m is None:
        return None
    r = _RANK.match(line)
    return (int(r.group(1)) if r else 0), int(m.group(1))


def stated_last_step(line: bytes) -> int | None:
    """The last step a step line states (Megatron's and minigpt's ``iteration i/ M |``: M), or None."""
    m = _ITER.search(line) if _ITER_LINE in line else None
    return int(m.group(2)) if m else None


RESCAN_S = 1.0  # how often the CPU sampler looks for new processes of the group in /proc (a full scan costs ms)
# How often the CPU sampler samples between step lines: a thread's CPU since the last sample goes with it when it ends
# (schedstat is per live thread), so a process that prints its last step line and exits before the line's own sample
# (the sampler is late under load) loses at most this much of its CPU, not everything since the line before. A sample
# reads one schedstat file per thread: ~0.9 ms for 61 threads here, so ~0.5% of a core at this period.
SAMPLE_EVERY_S = 0.2


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


# What the runner keeps of one stream of one trial, whatever it prints: past either, the rest is read and dropped
# (the trial is stopped and recorded invalid, LocalExecutor.poll): a flood of short lines grew the runner's memory
# (a stamp per line), a line without end its copy of that line. ~16 bytes of stamps per line while it runs.
MAX_LINES = 200_000
MAX_BYTES = 64 * 2**20  # also the most of a log the runner reads back (runner._read_text)


class _Stream:
    """One pipe copied to one file, each line stamped with its arrival and the read that brought it."""

    def __init__(self, pipe: IO[bytes], out_path: Path, *, max_lines: int = MAX_LINES,
                 max_bytes: int = MAX_BYTES) -> None:
        self.pipe, self.out_path = pipe, Path(out_path)
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self.arrivals = array("d")  # seconds since the launch, one per line (when its \n came)
        self.chunks = array("q")  # per line, the number of the read that completed it (same number: same burst)
        # Per step line (its index): seconds of CPU the group had used, and when that was sampled (seconds since the
        # launch); none for other lines, nor for a step line that came while the sampler was busy.
        self.cpu: dict[int, tuple[float, float]] = {}
        self.sha = hashlib.sha256()
        self.steps: list[tuple[int, int, float, int]] = []  # (rank, step, arrival, read) of each step line so far
        self.kept = 0  # bytes copied to the file (the sha256 is theirs)
        self.read = 0  # bytes that came through the pipe
        self.dropped = ""  # why the rest was not kept ("" while all is)
        # exists from the launch on (tail -f it), not from the first line; a new file (O_EXCL | O_NOFOLLOW): nothing a
        # trial put there is followed
        self.out = create_new(self.out_path)  # a raw fd: nothing buffered that a full disk could refuse at close
        self.thread: threading.Thread | None = None

    def body(self) -> dict[str, Any]:
        n = len(self.arrivals)
        cpu = [self.cpu.get(i) for i in range(n)]
        out = {"sha256": self.sha.hexdigest(), "arrivals_s": [round(t, 6) for t in self.arrivals],
               "chunks": list(self.chunks), "cpu_s": [c and c[0] for c in cpu], "cpu_t_s": [c and c[1] for c in cpu]}
        if self.dropped:
            out["dropped"] = f"{self.dropped}; {self.read - self.kept} more bytes came through the pipe, not kept"
        return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class LineClock:
    """Copies the trial's pipes (stdout, and stderr when given) to files line by line, stamping each line's arrival
    (a daemon thread per pipe, raw reads: a line's read number tells lines written together from lines paced)."""

    def __init__(self, pipe: IO[bytes], out_path: Path, *, pgid: int | None = None,
                 members: Callable[[], list[int]] | None = None, err_pipe: IO[bytes] | None = None,
                 err_path: Path | None = None, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> None:
        # members: the trial's processes (its cgroup's list, which setsid cannot leave); else the process group
        self.out_path, self.pgid, self.members = Path(out_path), pgid, members
        self.t0 = time.monotonic()
        self.started_unix = time.time()
        limits = {"max_lines": max_lines, "max_bytes": max_bytes}
        self._streams = [_Stream(pipe, out_path, **limits)]
        if err_pipe is not None and err_path is not None:
            self._streams.append(_Stream(err_pipe, err_path, **limits))
        # The CPU is the sum, over samples, of each thread's increase since the previous sample (a thread that ended
        # takes its last part with it). A sampler thread takes the samples, so the readers' stamps never wait for a
        # /proc scan.
        self._cpu_total_ns = 0
        self._cpu_prev: dict[int, int] = {}
        self._pids: list[int] = []
        self._scanned = -RESCAN_S
        self._want: tuple[_Stream, int] | None = None  # the line waiting for a sample
        self._done = False
        self._cv = threading.Condition()
        self._sampler = threading.Thread(target=self._sample, daemon=True, name="cpu-sampler")
        if pgid is not None:
            self._sampler.start()
        for st in self._streams:
            st.thread = threading.Thread(target=self._copy, args=(st,), daemon=True, name="line-clock")
            st.thread.start()

    @property
    def arrivals(self) -> list[float]:
        return list(self._streams[0].arrivals)

    def dropped(self) -> str:
        """Why part of the trial's output was not kept (one line, with the figures), or ""."""
        return next((f"{st.out_path.name}: {st.dropped}" for st in self._streams if st.dropped), "")

    def _copy(self, st: _Stream) -> None:
        fd, n, rest = st.pipe.fileno(), 0, bytearray()
        try:
            while True:
                data = os.read(fd, 1 << 16)
                now = time.monotonic() - self.t0
                if not data:
                    break
                n += 1
                st.read += len(data)
                if st.dropped:
                    continue  # read and dropped: the trial never blocks on a full pipe, the runner keeps nothing
                lines = data.count(b"\n")
                if st.kept + len(data) > st.max_bytes or len(st.arrivals) + lines > st.max_lines:
                    st.dropped = (f"printed more than the runner keeps of a stream ({st.max_bytes / 2**20:.0f} MiB, "
                                  f"{st.max_lines} lines): {st.kept} bytes and {len(st.arrivals)} lines kept")
                    continue
                try:
                    _write_all(st.out, data)
                except OSError as e:  # the disk is full (a trial filled it): what came is kept up to here
                    with contextlib.suppress(OSError):  # a write cut short leaves no part of its read behind
                        os.ftruncate(st.out, st.kept)
                    st.dropped = f"could not be kept: {e.strerror or e} after {st.kept} bytes"
                    continue
                st.kept += len(data)
                st.sha.update(data)
                if not lines:  # a line goes on (a progress bar, or a line without end): no copy of it per read
                    rest += data
                    continue
                *done, tail = (bytes(rest) + data).split(b"\n")
                rest = bytearray(tail)
                for line in done:
                    self._stamp(st, line, now, n)
            if rest:  # the last line, without its \n
                self._stamp(st, bytes(rest), time.monotonic() - self.t0, n)
        finally:
            os.close(st.out)
            st.pipe.close()

    def _stamp(self, st: _Stream, line: bytes, now: float, chunk: int) -> None:
        st.arrivals.append(now)
        st.chunks.append(chunk)
        key = step_of(line)
        if key is not None:
            st.steps.append((*key, now, chunk))
        if self.pgid is not None and key is not None:
            with self._cv:
                self._want = (st, len(st.arrivals) - 1)
                self._cv.notify()

    def _sample(self) -> None:
        while True:
            with self._cv:
                if self._want is None and not self._done:
                    self._cv.wait(SAMPLE_EVERY_S)
                if self._want is None and self._done:
                    return
                want, self._want = self._want, None
            now = time.monotonic() - self.t0
            if want is not None and now - self._scanned >= RESCAN_S:  # the processes as a step line finds them
                self._pids = self.members() if self.members is not None else group_pids(self.pgid)
                self._scanned = now
            cpu = threads_cpu_ns(self._pids)
            if not cpu:
                continue
            self._cpu_total_ns += sum(max(0, ns - self._cpu_prev.get(tid, 0)) for tid, ns in cpu.items())
            self._cpu_prev = cpu
            if want is not None:  # the sample right after a step line (else one between lines: the total goes on)
                st, i = want
                st.cpu[i] = (round(self._cpu_total_ns / 1e9, 6), round(now, 6))

    def step_lines(self) -> list[tuple[str, int, int, float, int]]:
        """The step lines so far, while the trial runs: (stream, rank, step, arrival seconds, read) in arrival order
        per stream (what execute/prune.py judges a running trial by; the record is the clock file's)."""
        return [(st.out_path.name, *x) for st in self._streams for x in list(st.steps)]

    def cpu_total_s(self) -> float:
        """Seconds of CPU the trial's processes had used at the last sample."""
        return self._cpu_total_ns / 1e9

    def finish(self, wall_s: float, *, grace_s: float = 5.0) -> dict[str, Any]:
        """Wait for the pipes to close (every writer gone), then write the clock record; returns its body."""
        deadline = time.monotonic() + grace_s
        for st in self._streams:
            st.thread.join(max(0.0, deadline - time.monotonic()))
        with self._cv:
            self._done = True
            self._cv.notify()
        if self.pgid is not None:
            self._sampler.join(grace_s)
        out, *err = self._streams
        o = out.body()
        body = {"wall_s": wall_s, "started_unix": self.started_unix,
                "complete": not any(st.thread.is_alive() for st in self._streams),
                "stdout_sha256": o["sha256"], "arrivals_s": o["arrivals_s"], "chunks": o["chunks"],
                "cpu_s": o["cpu_s"], "cpu_t_s": o["cpu_t_s"]}
        if "dropped" in o:
            body["dropped"] = o["dropped"]
        if err:
            body["stderr"] = err[0].body()
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


@dataclass(frozen=True)
class Line:
    """A step line as the harness saw it (the last copy of its step, as the parsers read it)."""

    arrival_s: float  # seconds since the launch
    chunk: tuple[str, int]  # (stream, read number): lines with the same one came together
    cpu: tuple[float, float] | None  # (sampled at, the group's CPU seconds) right after it, or None
    first_s: float | None = None  # when the step's first copy arrived (None: ``arrival_s``, it came once)

    @property
    def earliest_s(self) -> float:
        return self.arrival_s if self.first_s is None else self.first_s


@dataclass(frozen=True)
class Timing:
    """What the harness's clock says of a trial's measured window. Seconds."""

    step_s: float  # the step time the trial is scored by: ``window_s``, or ``bound_s`` (see ``held``)
    gap_s: float | None  # median gap between consecutive step lines that arrived in different reads (per step)
    bound_s: float | None  # an upper bound the trial is scored by instead (``held`` says why), or None
    first: int  # the window's first and last step
    last: int
    stream: str
    paced: int  # gaps measured (consecutive lines in different reads) of ``gaps``
    gaps: int
    cpu_fraction: float | None  # cores the trial's processes kept busy over the window
    window_s: float | None = None  # the window timed end to end: first copy of its line ``first - 1`` to the last
    # copy of line ``last``, over its steps (None when its lines came in bursts)
    held: str = ""  # why the trial is scored by ``bound_s`` ("" when it is scored by ``window_s``)
    steps_seen: int | None = None  # the last step this rank printed a line of (the steps the process ran, at least)

    @property
    def timed(self) -> bool:
        return self.bound_s is None

    def line(self) -> str:
        """One evidence line: what the harness measured."""
        cpu = "" if self.cpu_fraction is None else f"; its processes ran {self.cpu_fraction:.0%} of a core"
        gap = "" if self.gap_s is None else f" (one by one: every {self.gap_s * 1000:.1f} ms, median of {self.paced} gaps)"
        if self.timed:
            apart = ""
            if self.gap_s is not None and self.gap_s < (1 - TOLERANCE) * self.window_s:
                apart = (f"; its lines came faster than its steps ({self.gap_s * 1000:.1f} ms apart, "
                         f"{self.window_s * 1000:.1f} ms per step end to end): the end-to-end time is the record")
            return (f"harness clock: step lines {self.first - 1}..{self.last} on {self.stream} took "
                    f"{self.window_s * 1000:.1f} ms per step end to end{gap}{cpu}{apart}")
        return (f"harness clock: step lines {self.first - 1}..{self.last} on {self.stream}: {self.held}; scored by "
                f"{self.bound_s * 1000:.1f} ms per step (an upper bound, never faster than the truth){cpu}")


class ClockProblem(ValueError):
    """What the machine's load cannot cause: the log or its pipes were tampered with (the trial is invalid)."""


def measure(trial_dir: Path, *, warmup_steps: int, measured_steps: int, copies: int = 1) -> Timing | None:
    """The harness's timing of the window ``warmup+1 .. warmup+measured`` (None without a clock, or without the
    window's step lines); raises :class:`ClockProblem` for a tampered record. ``copies``: :func:`_step_lines`.

    A line arrives after its step was computed, never before (it carries the step's loss), but a trial chooses how
    late. So the window is timed end to end from the FIRST copy of the line before it to the LAST copy of its last
    line (a copy printed early or late only lengthens it), and that is the score, not the gaps' pattern (which the
    trial shapes: lines held back, then let go one by one, arrive at any pace it likes). Lines held back from before
    the window leave a silence before it that is longer than the window: the steps were computed in that silence, so
    the trial is scored from the line before it. Of every rank that printed the window, the slowest is scored."""
    clock = read_clock(trial_dir)
    if clock is None:
        return None
    steps, twice = _step_lines(Path(trial_dir), clock, copies=copies)
    if twice:
        (rank, it), a, b = twice[0]
        raise ClockProblem(f"iteration {it} was reported twice (at {a:.3f} s and {b:.3f} s after the launch): a "
                           f"second line overrides the first, so the log's times are not the process's")
    first = warmup_steps + 1 if warmup_steps > 0 else 2  # a gap needs the line before the step
    last = warmup_steps + measured_steps
    out: Timing | None = None
    ranks = {rank: {i: ln for (r, i), ln in steps.items() if r == rank} for rank in sorted({r for r, _ in steps})}
    for seen in ranks.values():
        t = _rank_timing(seen, first, last, max(1, warmup_steps))
        if t is not None and (out is None or t.step_s > out.step_s):
            out = t
    if out is None:  # no rank has two consecutive lines in the window (one line carrying several steps' text)
        for seen in ranks.values():
            t = _sparse_timing(seen, first, last)
            if t is not None and (out is None or t.step_s > out.step_s):
                out = t
    return out


def _rank_timing(seen: dict[int, Line], first: int, last: int, warmup: int) -> Timing | None:
    """One rank's :class:`Timing` of steps ``first..last`` (its lines ``first - 1 .. last``), or None."""
    have = [i for i in range(first, last + 1) if i in seen and i - 1 in seen]
    if not have:
        return None
    start, end = have[0] - 1, have[-1]
    gaps = [(seen[i].arrival_s - seen[i - 1].arrival_s, seen[i].chunk != seen[i - 1].chunk) for i in have]
    paced = [g for g, apart in gaps if apart]
    cpu = _cpu_fraction(seen, warmup, last)
    stream = seen[end].chunk[0]
    common = dict(first=have[0], last=end, stream=stream, paced=len(paced), gaps=len(gaps), cpu_fraction=cpu,
                  steps_seen=max(seen))
    if len(paced) * 2 < len(gaps):  # most lines came together: held back and let go at once (a stalled reader merges
        # a few, no more); the last line's arrival over its steps, start-up included
        bound = seen[end].arrival_s / end
        return Timing(step_s=bound, gap_s=None, bound_s=bound, window_s=None, held=(
            f"arrived in bursts ({len(gaps) - len(paced)} of {len(gaps)} gaps inside one read: buffered output), so "
            f"the steps cannot be timed one by one: the arrival of step {end}'s line over its {end} steps, start-up "
            f"included"), **common)
    gap = statistics.median(paced)
    window = (seen[end].arrival_s - seen[start].earliest_s) / (end - start)
    # the longest silence between consecutive step lines before the window (from the first step line on)
    lead = [(seen[i].earliest_s - seen[i - 1].arrival_s, i - 1) for i in range(min(seen) + 1, start + 1)
            if i in seen and i - 1 in seen]
    silence, before = max(lead, default=(0.0, start))
    span = seen[end].arrival_s - seen[start].earliest_s
    if silence > span:
        bound = (seen[end].arrival_s - seen[before].arrival_s) / (end - before)
        return Timing(step_s=bound, gap_s=gap, bound_s=bound, window_s=window, held=(
            f"{silence:.3f} s passed without a step line between steps {before} and {before + 1}, longer than the "
            f"{span:.3f} s the window's {end - start} steps then took (held back, then let go): timed from step "
            f"{before}'s line, {end - before} steps in {seen[end].arrival_s - seen[before].arrival_s:.3f} s"),
            **common)
    return Timing(step_s=window, gap_s=gap, bound_s=None, window_s=window, **common)


def _sparse_timing(seen: dict[int, Line], first: int, last: int) -> Timing | None:
    """The window seen from the lines around it when it has no two consecutive step lines: from the last line before
    it (or the launch) to the first line at or after its end, over the steps between (the launch's start-up
    included when no line came before: an upper bound); None without a line at or after the window's end."""
    end = min((i for i in seen if i >= last), default=None)
    if end is None:
        return None
    start = max((i for i in seen if i < first), default=0)
    t0 = seen[start].earliest_s if start else 0.0
    step = (seen[end].arrival_s - t0) / (end - start)
    held = ("" if start else "no step line came before the window: timed from the launch, start-up included, ")
    held += (f"the window's lines were not seen one by one (step lines {start or 'launch'}..{end} only): "
             f"{seen[end].arrival_s - t0:.3f} s over {end - start} steps")
    return Timing(step_s=step, gap_s=None, bound_s=step, window_s=None, held=held, first=start + 1, last=end,
                  stream=seen[end].chunk[0], paced=0, gaps=0, cpu_fraction=None, steps_seen=max(seen))


def referee(trial_dir: Path, *, step_time_s: float | None, step_times_s: list[float], warmup_steps: int,
            measured_steps: int, wall_s: float, measured_time: bool = True, copies: int = 1) -> str | None:
    """Why the trial's record cannot be believed at all (one line with the numbers), or None. Only what the
    machine's load cannot cause: a disagreement between the log's step time and the harness's is not here (the
    harness's is scored, :func:`measure`).

    ``step_time_s`` is the reported median over iterations ``warmup+1 .. warmup+measured``; ``step_times_s``
    every reported step; ``wall_s`` the process's wall time as the executor measured it."""
    if step_time_s is None:
        return None
    if measured_time and step_times_s and sum(step_times_s) > wall_s * 1.05 + 1.0:
        return (f"the log reports {sum(step_times_s):.3f} s of steps but the process ran {wall_s:.3f} s "
                f"(harness wall time): the reported step times are not this process's")
    clock = read_clock(trial_dir)
    if clock is None or not measured_time:
        return None
    try:
        steps, twice = _step_lines(Path(trial_dir), clock, copies=copies)
    except ClockProblem as e:
        return str(e)
    if not clock.get("complete", True):
        return "a process of the trial outlived it and kept its stdout or stderr open (left running outside its group)"
    why = _cpu_check(steps, warmup_steps, measured_steps)
    if why:
        return why
    if twice:
        (rank, it), a, b = twice[0]
        return (f"iteration {it} was reported twice (at {a:.3f} s and {b:.3f} s after the launch): a second line "
                f"overrides the first, so the log's times are not the process's")
    return None


def disagreement(reported_s: float, t: Timing) -> str | None:
    """One line when the log's step time and the harness's differ by more than ``TOLERANCE`` (the harness's is
    scored; this is evidence, never a verdict), or None."""
    if abs(reported_s - t.step_s) <= TOLERANCE * max(reported_s, t.step_s):
        return None
    return (f"the log reports {reported_s * 1000:.1f} ms per step, the harness measured {t.step_s * 1000:.1f} ms "
            f"({t.step_s / reported_s - 1:+.0%}): the harness's time is the trial's record")


def _stream_lines(trial_dir: Path, name: str, sha: str, arrivals: list[float]) -> list[bytes]:
    path = trial_dir / name
    data = path.read_bytes() if path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != sha:
        raise ClockProblem(f"{name} was rewritten during the trial: its bytes are not what the process printed "
                           f"through the harness's pipe (sha256 differs)")
    lines = pipe_lines(data)
    if len(lines) != len(arrivals):
        raise ClockProblem(f"{name} has {len(lines)} lines but {len(arrivals)} came through the harness's pipe")
    return lines


def _step_lines(trial_dir: Path, clock: dict[str, Any], *, copies: int = 1):
    """((rank, step) -> its :class:`Line` (the last one, as the parsers read it), [((rank, step), first arrival,
    arrival of the line past ``copies``)] for repeated lines), over every clocked stream. ``copies``: the trial's
    processes; each may print a step's line without a rank prefix (torchtitan logs on every rank), so a step is
    repeated only past that many lines. The last line is the one timed: a line printed early cannot make a step
    look faster."""
    streams = [("stdout", clock["stdout_sha256"], clock)]
    if clock.get("stderr"):
        streams.append(("stderr", clock["stderr"]["sha256"], clock["stderr"]))
    found: list[tuple[float, tuple[int, int], Line]] = []
    for name, sha, st in streams:
        arrivals = st["arrivals_s"]
        lines = _stream_lines(trial_dir, name, sha, arrivals)
        n = len(arrivals)
        chunks = st.get("chunks") or list(range(1, n + 1))  # a clock before reads were numbered: every line apart
        cpus, cpu_ts = st.get("cpu_s") or [None] * n, st.get("cpu_t_s") or [None] * n
        for line, t, k, c, ct in zip(lines, arrivals, chunks, cpus, cpu_ts):
            key = step_of(line)
            if key is not None:
                found.append((t, key, Line(t, (name, k), None if c is None or ct is None else (ct, c))))
    steps: dict[tuple[int, int], Line] = {}
    seen: dict[tuple[int, int], list[float]] = {}
    twice = []
    for t, key, ln in sorted(found, key=lambda x: x[0]):
        seen.setdefault(key, []).append(t)
        if len(seen[key]) == copies + 1:
            twice.append((key, seen[key][0], t))
        steps[key] = ln if len(seen[key]) == 1 else replace(ln, first_s=seen[key][0])
    return steps, twice


def _all_step_lines(trial_dir: Path) -> dict[tuple[int, int], Line] | None:
    """Every step line of the trial, every copy kept (None without a clock or an intact record)."""
    clock = read_clock(trial_dir)
    if clock is None:
        return None
    try:
        return _step_lines(Path(trial_dir), clock, copies=MAX_LINES)[0]
    except (ClockProblem, OSError):
        return None


def first_step_s(trial_dir: Path) -> float | None:
    """Seconds from the launch to the first step line's arrival, any rank, any stream: the trial's start-up as the
    harness's clock sees it (interpreter and imports, dataset, model build, compile, and the first step itself, which
    carries the first-step costs a framework defers). None without a clock, a step line, or an intact record."""
    steps = _all_step_lines(trial_dir)
    return None if steps is None else min((ln.earliest_s for ln in steps.values()), default=None)


def last_step_s(trial_dir: Path) -> float | None:
    """Seconds from the launch to the last step line's arrival (its last copy), any rank, any stream: where the
    trial's steps end and its shutdown begins, as the harness's clock sees it. None as :func:`first_step_s`."""
    steps = _all_step_lines(trial_dir)
    return None if steps is None else max((ln.arrival_s for ln in steps.values()), default=None)


def own_cpu_s(trial_dir: Path) -> float | None:
    """CPU seconds the trial's processes had used at the clock's last sample (None without a sampled clock)."""
    clock = read_clock(trial_dir)
    if clock is None:
        return None
    xs = [c for c in (clock.get("cpu_s") or []) + ((clock.get("stderr") or {}).get("cpu_s") or []) if c is not None]
    return max(xs) if xs else None


def _window_cpu(seen: dict[int, Line], warmup: int, measured: int):
    its = [i for i in range(max(1, warmup), warmup + measured + 1) if i in seen and seen[i].cpu is not None]
    if len(its) < 2:
        return None
    (ta, ca), (tb, cb) = seen[its[0]].cpu, seen[its[-1]].cpu
    return its[0], its[-1], tb - ta, cb - ca


def _cpu_fraction(seen: dict[int, Line], first: int, last: int) -> float | None:
    w = _window_cpu(seen, first, last - first)
    return None if w is None or w[2] <= 0 else w[3] / w[2]


def _cpu_check(steps: dict[tuple[int, int], Line], warmup: int, measured: int) -> str | None:
    """Why the measured window's lines were paced rather than computed (its processes barely ran), or None.
    The window runs from the first to the last step line in ``warmup .. warmup + measured`` that carry a
    CPU sample (timed by the sample itself); under ``MIN_CPU_WINDOW_S`` it is widened to all the rank's step lines;
    fewer than two lines, or still too short: nothing to check."""
    for rank in sorted({r for r, _ in steps}):
        seen = {i: ln for (r, i), ln in steps.items() if r == rank}
        w = _window_cpu(seen, warmup, measured)
        if w is not None and w[2] < MIN_CPU_WINDOW_S:
            w = _window_cpu(seen, 1, max(seen))
        if w is None or w[2] < MIN_CPU_WINDOW_S:
            continue
        a, b, wall, cpu = w
        if cpu >= MIN_CPU_FRACTION * wall:
            return None
        return (f"between iteration lines {a} and {b} the trial's processes ran {cpu * 1000:.1f} ms on a CPU "
                f"in {wall * 1000:.1f} ms ({cpu / wall:.1%} of one core, under the {MIN_CPU_FRACTION:.0%} a training "
                f"step keeps busy): its lines were paced, not computed")
    return None
