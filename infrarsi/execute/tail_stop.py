"""The end at the last step: a trial is ended by the harness once every line it is measured by has come, instead of
being left to run its shutdown (torchtitan's own 2 s sleep, the process groups' teardown, the interpreters' exit,
a checkpoint save), which no figure of its record reads and which every trial pays in device time.

What a trial is measured by comes from its output before its shutdown: the step lines of the contract's window
(``warmup + measured``), the losses and gradient norms of the loss check's steps (``compare_steps``), the memory
figures the adapter reads (Megatron's and minigpt's memory report, printed right after the last iteration's line;
torchtitan's on every step line) and the timer lines printed after a step's line. So the harness waits for:

1. the line of the last step: the window's end and the loss check's last step, or the process's own last step where
   its lines state it (Megatron's ``iteration i/ M``), from every rank that prints step lines, as many copies as it
   printed of each step before (torchtitan logs a step on every rank, without a rank prefix);
2. then a quiet spell: the adapter's reading of the output so far (``Adapter.parse``, the one the trial's record will
   carry) unchanged for ``max(QUIET_S, QUIET_STEPS x one step)``, one step being the mean gap between the step
   lines so far (a rank printing its memory report after the step line of another is a fraction of a step behind:
   on a loaded machine the steps and the wait grow together).

A launch that runs more steps than the contract reads and does not state its last step in its lines (torchtitan's
``training.steps`` past the window) is ended at the first quiet spell after the contract's last step (each step line
changes the reading): steps further apart than the spell, and their memory figures, are not run (every trial alike,
the baseline's too). The runner ends a trial as it stops a
pruned one, with SIGKILL at once on this machine (LocalExecutor.end: nothing a polite signal would let it do is
read) and ``scancel`` for a running Slurm job (SlurmExecutor.end).

The decision names the bytes of each stream read so far: the trial's record is the adapter's reading of exactly those
(what a signal makes a launcher print as it ends is not the trial's output), with the exit status of a finished
trial. A trial whose last step line never comes (it failed, hung, or printed its lines at exit) is not ended here: it
ends as it would have. Nothing read is timed by this watch: the harness's clock (clock.py) times the window, and the
end-to-end check (end_to_end.py) holds every trial, the baseline's included, ended the same way.

The doctor's warm-up run (role ``warmup``: it warms the machine's caches, imports and bytecode before the measured
baseline runs, and no figure of it is data) is measured by less: the line of its first step, from every rank that
prints step lines, then the same quiet spell (``first_only``: the process's own stated last step is not waited for).
By then what it exists for is done: the interpreters and the imports, the dataset, the first step's allocations and
compilation. Its record (:func:`warmed_up`) is ``ok`` with what step 1 says: the adapter's reading of the output so
far over a window of step 1 alone (:func:`first_step_window`), step 1's time as its log reports it (start-up costs
included: not a measurement), its loss; no peak (a peak at step 1 is not the window's) and no per-step figures.
Nothing reads a warm-up's figures as data: the noise, the time and memory models, the re-baselining and the
verification read the doctor's measured runs; the report lists it with its reason and leaves it out of the fastest
trial and the step-time plot; the bank keeps it and leaves it out of what it learns. What it is still used for: its
device time (the doctor's phase of the report's cost), the machine's load while it ran, and its presence (a doctor
resumed does not warm the machine twice). With ``budget.end_at_last_step`` off it runs whole, as every trial does.

    watch = TailWatch(trial_dir=d, last_step=4, parse=lambda out, err: adapter.parse(contract, out, err, 0))
    watch.check() -> TailStop | None      # per poll; the same stop on every call once made
    TailWatch(trial_dir=d, last_step=1, first_only=True, parse=...)   # a warm-up: its first step line
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..contract.model import Contract
from ..trial import TrialStatus
from ..trial.parsed import ParsedRun
from .clock import MAX_BYTES, STREAMS, stated_last_step, step_of

QUIET_S = 1.0  # seconds the adapter's reading must stay the same after the last step's line (at least)
QUIET_STEPS = 0.25  # ... or this fraction of one step, when steps are longer than 4 s
ENDED = "ended by the harness after"  # how a trial's evidence line says it was ended here (the report counts them)


@dataclass(frozen=True, kw_only=True)
class TailStop:
    """Why a trial was ended: every line it is measured by had come. ``bytes``: of each stream, what was read (the
    record is read from these); seconds on the runner's monotonic clock."""

    step: int  # the last step whose line it waited for
    bytes: dict[str, int]
    quiet_s: float  # the quiet spell it waited after the last change of the adapter's reading
    at_unix: float  # when it was decided (time.time())
    first_only: bool = False  # a warm-up ended after its first step line (module docstring)

    def line(self, last_line_s: float | None, wall_s: float, stopped_s: float | None = None) -> str:
        """The evidence line: when its last step line came by the harness's clock, when the harness stopped it
        (``stopped_s``, seconds after the launch) and when the process was gone (``wall_s``)."""
        stop = f"stopped at {stopped_s:.1f} s, " if stopped_s is not None else ""
        if self.first_only:  # a warm-up: what it is for (imports, data, step 1's allocations, compilation) is done
            came = f"came {last_line_s:.1f} s after the launch, then" if last_line_s is not None else "and"
            return (f"{ENDED} its first step line, a warm-up: step {self.step}'s line {came} a quiet spell of "
                    f"{self.quiet_s:.1f} s with no change to what its record reads; {stop}the process was gone at "
                    f"{wall_s:.1f} s; the imports, the data and step {self.step}'s allocations and compilation were "
                    f"done, the rest of its window and its shutdown were not run")
        if last_line_s is None:
            return (f"{ENDED} step {self.step}'s line and {self.quiet_s:.1f} s without a change "
                    f"to what its record reads; {stop}the process was gone {wall_s:.1f} s after its launch")
        return (f"{ENDED} its last measured step line: step {self.step}'s line came {last_line_s:.1f} s after the "
                f"launch, then a quiet spell of {self.quiet_s:.1f} s with no change to what its record reads; "
                f"{stop}the process was gone at {wall_s:.1f} s, {wall_s - last_line_s:.1f} s after the line; its "
                f"shutdown was not run")


class TailWatch:
    """Watches one running trial's output (module docstring): ``trial_dir/stdout`` and ``stderr``, the harness's copies
    of a local trial's pipes or a Slurm job's own files. ``parse(stdout, stderr)``: the adapter's reading of the output
    so far (any value that compares equal while nothing the record reads has changed); ``last_step``: the contract's
    last step (max of the window's end and the loss check's steps); ``first_only``: a warm-up, ended after
    ``last_step`` whatever last step the process's lines state (module docstring)."""

    def __init__(self, *, trial_dir: Path, last_step: int, parse: Callable[[str, str], object],
                 now: Callable[[], float] = time.monotonic, first_only: bool = False) -> None:
        self.trial_dir, self.last_step, self._parse, self._now = Path(trial_dir), last_step, parse, now
        self.first_only = first_only
        self._data = {name: bytearray() for name in STREAMS}  # complete lines read so far
        self._read = dict.fromkeys(STREAMS, 0)  # bytes read of each stream (complete lines only)
        self._copies: dict[tuple[str, int], Counter] = {}  # (stream, rank) -> step -> lines of it
        self._total = 0  # the process's own last step, where its lines state it
        self._first: float | None = None  # when the first step line was read, and the last
        self._last: tuple[int, float] | None = None
        self._reading: object = None  # the adapter's reading at the last change, and when it changed
        self._changed: float | None = None
        self.decision: TailStop | None = None

    def _grow(self) -> bool:
        """Reads what each stream gained (complete lines); True when something came."""
        came = False
        for name in STREAMS:
            path, done = self.trial_dir / name, self._read[name]
            try:
                size = min(path.stat().st_size, MAX_BYTES)
                if size <= done:
                    continue
                with open(path, "rb") as fh:
                    fh.seek(done)
                    data = fh.read(size - done)
            except OSError:
                continue
            data = data[:data.rfind(b"\n") + 1]
            if not data:
                continue
            came = True
            self._read[name] = done + len(data)
            self._data[name] += data
            t = self._now()
            for line in data.splitlines():
                key = step_of(line)
                if key is None:
                    continue
                rank, step = key
                self._copies.setdefault((name, rank), Counter())[step] += 1
                self._total = max(self._total, stated_last_step(line) or 0)
                if self._first is None:
                    self._first = t
                if self._last is None or step > self._last[0]:
                    self._last = (step, t)
        return came

    def _all_in(self, step: int) -> bool:
        """Every (stream, rank) that prints step lines has printed ``step``'s (or a later one's) as many times as any
        earlier step's."""
        if not self._copies:
            return False
        for counts in self._copies.values():
            have = sum(n for s, n in counts.items() if s >= step)
            want = max((n for s, n in counts.items() if s < step), default=1)
            if have < want:
                return False
        return True

    def quiet_s(self) -> float:
        """The quiet spell: QUIET_S, or QUIET_STEPS of the mean gap between the step lines so far."""
        if self._first is None or self._last is None or self._last[0] <= 1:
            return QUIET_S
        step_s = (self._last[1] - self._first) / max(1, self._last[0] - 1)
        return max(QUIET_S, QUIET_STEPS * step_s)

    def check(self) -> TailStop | None:
        if self.decision is not None:
            return self.decision
        came = self._grow()
        last = self.last_step if self.first_only else max(self.last_step, self._total)
        if not self._all_in(last):
            return None
        now = self._now()
        if came or self._changed is None:
            try:
                reading = self._parse(self._data["stdout"].decode(errors="replace"),
                                      self._data["stderr"].decode(errors="replace"))
            except Exception:  # noqa: BLE001 -- a parser that cannot read it yet decides nothing (the record's will)
                self._changed = now
                return None
            if self._changed is None or reading != self._reading:
                self._reading, self._changed = reading, now
        quiet = self.quiet_s()
        if now - self._changed < quiet:
            return None
        self.decision = TailStop(step=last, bytes=dict(self._read), quiet_s=quiet, at_unix=time.time(),
                                 first_only=self.first_only)
        return self.decision

    def text(self) -> tuple[str, str]:
        """(stdout, stderr) as read when the decision was made: what the trial's record is read from."""
        return (self._data["stdout"].decode(errors="replace"), self._data["stderr"].decode(errors="replace"))


R = TypeVar("R", bound=ParsedRun)  # the adapter's reading, or the runner's verdict on it
WARMUP_REASON = "warm-up, ended after step 1: its step time is step 1's (start-up included), not a measurement"


def first_step_window(contract: Contract) -> Contract:
    """``contract`` with a timing window of step 1 alone: what the adapter reads a warm-up ended after it with."""
    timing = contract.invariants.timing.model_copy(update={"warmup_steps": 0, "measured_steps": 1})
    return contract.model_copy(update={"invariants": contract.invariants.model_copy(update={"timing": timing})})


def warmed_up(v: R) -> R:
    """The record of a warm-up ended after its first step line (module docstring), and what its watch waits on to be
    still (lines of later steps change nothing of it): an ok reading keeps step 1's time (its log's), loss and
    gradient norm, and says why in its reason; the figures of a window it did not run (the peak, the per-step rates,
    the phases) are dropped. Any other reading (a failure) is kept as it is."""
    if v.status is not TrialStatus.OK:
        return v
    m = v.metrics
    m = m.model_copy(update={"steps_run": 1, "step_times_s": m.step_times_s[:1], "losses": m.losses[:1],
                             "grad_norms": m.grad_norms[:1], "tokens_per_s": None, "mfu": None,
                             "tflops_per_device": None, "peak_memory_bytes": None, "peak_memory_by_rank": {},
                             "phases_s": {}})
    return v.model_copy(update={"metrics": m, "reason": WARMUP_REASON})
