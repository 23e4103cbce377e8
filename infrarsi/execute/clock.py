"""Time measured by the harness, not by the measured process.

A trial's step time is read from what its process prints ("elapsed time per iteration (ms): 812.3").
A process can print anything, so the harness keeps its own clock:

- the local executor reads the trial's stdout through a pipe (:class:`LineClock`), stamps each line with
  the moment it arrived (monotonic seconds since the launch) and writes it to ``trial_dir/stdout``;
- when the process has ended, ``trial_dir/clock.json`` gets the wall time, every line's arrival time and
  the sha256 of the bytes that came through the pipe. It is written after the process group is gone,
  so nothing the trial ran can write it.

:func:`referee` then compares, for the contract's measured window, the step time the log reports with
the median gap between the arrivals of consecutive iteration lines. A report off by more than
``TOLERANCE`` (relative to the larger) fails the trial as ``invalid`` with both numbers. There is no absolute
slack: any slack would let a log claim steps shorter than it and print its lines in a burst.
So does a stdout rewritten during the trial (its sha256 is not what came through the pipe), an
iteration line printed twice (a forged line after the real one), a process that left children holding
its stdout, and a log whose step times add up to more than the process ran.

Slurm trials have no clock file (the job writes its own output): only the wall-time bound applies.
Adapters whose step time is modelled, not measured (``Adapter.measured_time = False``, the simulated
clusters), are not checked against the clock.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import threading
import time
from pathlib import Path
from typing import IO, Any

from ..contract.seal import sealed_write

CLOCK_JSON = "clock.json"
# A reported median step time may differ from the median arrival gap by this fraction of the larger: the gap
# also holds the printing of the timer and memory lines (well under a millisecond), and a loaded machine
# delays a line now and then (the median of the window's gaps absorbs one). The forgeries it is there
# for are off by factors (a log that claims 8.9x), not by percent.
TOLERANCE = 0.25
_ITER = re.compile(rb"iteration\s+(\d+)\s*/\s*\d+\s*\|")


class LineClock:
    """Copies a pipe to a file line by line, stamping each line's arrival (a daemon thread)."""

    def __init__(self, pipe: IO[bytes], out_path: Path) -> None:
        self.pipe, self.out_path = pipe, Path(out_path)
        self.t0 = time.monotonic()
        self.started_unix = time.time()
        self.arrivals: list[float] = []  # seconds since the launch, one per line
        self._sha = hashlib.sha256()
        self._thread = threading.Thread(target=self._copy, daemon=True, name="line-clock")
        self._thread.start()

    def _copy(self) -> None:
        with open(self.out_path, "wb") as out:
            for line in iter(self.pipe.readline, b""):
                self.arrivals.append(time.monotonic() - self.t0)
                self._sha.update(line)
                out.write(line)
                out.flush()
        self.pipe.close()

    def finish(self, wall_s: float, *, grace_s: float = 5.0) -> dict[str, Any]:
        """Wait for the pipe to close (every writer gone), then write ``clock.json``; returns its body."""
        self._thread.join(grace_s)
        body = {"wall_s": wall_s, "started_unix": self.started_unix, "complete": not self._thread.is_alive(),
                "stdout_sha256": self._sha.hexdigest(), "arrivals_s": [round(t, 6) for t in self.arrivals]}
        trial_dir = self.out_path.parent
        # Sealed into the run's chain when the trial lives in a locked run (RUN_DIR/trials/<n>/).
        sealed_write(trial_dir.parent.parent, trial_dir / CLOCK_JSON, json.dumps(body))
        return body


def read_clock(trial_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(trial_dir) / CLOCK_JSON).read_text())
    except (FileNotFoundError, ValueError):
        return None


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
    lines = data.splitlines(keepends=True)
    arrivals = clock["arrivals_s"]
    if len(lines) != len(arrivals):
        return f"stdout has {len(lines)} lines but {len(arrivals)} came through the harness's pipe"
    seen: dict[int, float] = {}  # iteration -> arrival of its line (the last one, as the parser reads it)
    twice: list[tuple[int, float, float]] = []
    for line, t in zip(lines, arrivals):
        m = _ITER.search(line)
        if m and b"elapsed time per iteration" in line:
            it = int(m.group(1))
            if it in seen:
                twice.append((it, seen[it], t))
            seen[it] = t
    first = warmup_steps + 1 if warmup_steps > 0 else 2  # a gap needs the line before the step
    gaps = [seen[i] - seen[i - 1] for i in range(first, warmup_steps + measured_steps + 1)
            if i in seen and i - 1 in seen]
    if gaps:
        measured = statistics.median(gaps)
        if abs(step_time_s - measured) > TOLERANCE * max(step_time_s, measured):
            return (f"reported step time {step_time_s * 1000:.1f} ms, measured by the harness {measured * 1000:.1f} "
                    f"ms (median gap between iteration lines {warmup_steps + 1}..{warmup_steps + measured_steps}); "
                    f"they differ by more than {TOLERANCE:.0%}: the log's times are not the process's")
    if twice:
        it, a, b = twice[0]
        return (f"iteration {it} was reported twice (at {a:.3f} s and {b:.3f} s after the launch): a second line "
                f"overrides the first, so the log's times are not the process's")
    return None
    measured = statistics.median(gaps)
    if abs(step_time_s - measured) > TOLERANCE * max(step_time_s, measured):
        return (f"reported step time {step_time_s * 1000:.1f} ms, measured by the harness {measured * 1000:.1f} ms "
                f"(median gap between iteration lines {warmup_steps + 1}..{warmup_steps + measured_steps}); they "
                f"differ by more than {TOLERANCE:.0%}: the log's times are not the "
                f"process's")
    return None
