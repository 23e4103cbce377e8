"""The memory stop: a trial whose framework reports, while it runs, a peak already past the contract's capacity is
ended there (at step 1, where Megatron-LM and minigpt print their memory report; torchtitan prints its memory on
every step line), recorded ``oom`` with the figures, instead of running its whole contract on memory it would not
have on the job's devices.

The peak is the adapter's own reading of the lines printed since the last look (``Adapter.parse``: the same figure
the trial's record will carry, e.g. Megatron's "max reserved"), compared with ``hardware.memory_capacity_gib`` per
device. Where the capacity is also the process's enforced limit (a CPU trial's
RLIMIT_DATA) the process fails on its own first; the stop matters where the contract's capacity is under what the
machine has (a team's headroom on a GPU, an allocator that reserves past it). The log is read from the harness's
copies of the trial's streams (``trial_dir/stdout`` and ``stderr``, written by the clock), each byte once: the lines
that came since the last look are parsed, and only when they mention memory.

    watch = MemoryWatch(capacity_bytes=0.75 * 2**30, trial_dir=d, peak=lambda out, err: ...)
    watch.check() -> MemoryStop | None      # per poll; the same stop on every call once made
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .clock import MAX_BYTES

MiB = 2**20


@dataclass(frozen=True, kw_only=True)
class MemoryStop:
    """Why a trial was ended: its reported peak is over the capacity. Bytes."""

    peak_bytes: float
    capacity_bytes: float

    def line(self) -> str:
        return (f"stopped while it ran: its memory report says a peak of {self.peak_bytes / MiB:.0f} MiB > the "
                f"capacity {self.capacity_bytes / MiB:.0f} MiB per device (hardware.memory_capacity_gib "
                f"{self.capacity_bytes / 2**30:g}), over by {(self.peak_bytes - self.capacity_bytes) / MiB:.0f} MiB: "
                f"it would run out of memory on the job's devices; a setting that fits, or a larger capacity if the "
                f"devices have it")


class MemoryWatch:
    """Judges one running trial's memory from its log so far (module docstring). ``peak(stdout, stderr)``: the
    adapter's peak in bytes, or None where the log has none yet."""

    def __init__(self, *, capacity_bytes: float, trial_dir: Path, peak: Callable[[str, str], float | None]) -> None:
        self.capacity_bytes, self.trial_dir, self._peak = capacity_bytes, Path(trial_dir), peak
        self._read = {"stdout": 0, "stderr": 0}  # bytes of each stream judged so far (complete lines only)
        self.decision: MemoryStop | None = None

    def check(self) -> MemoryStop | None:
        if self.decision is not None:
            return self.decision
        new = {}
        for name, done in self._read.items():
            path = self.trial_dir / name
            try:
                size = min(path.stat().st_size, MAX_BYTES)
                if size <= done:  # a stat per poll; a stream is read only when it grew, from where it was judged
                    new[name] = ""
                    continue
                with open(path, "rb") as fh:
                    fh.seek(done)
                    data = fh.read(size - done)
            except OSError:
                new[name] = ""
                continue
            data = data[:data.rfind(b"\n") + 1]  # complete lines only: the rest is judged when its line ends
            self._read[name] = done + len(data)
            new[name] = data.decode(errors="replace")
        if "memory" not in (new["stdout"] + new["stderr"]).lower():
            return None
        try:  # the adapter's reading of the new lines (a report is one line: its peak is there)
            peak = self._peak(new["stdout"], new["stderr"])
        except Exception:  # noqa: BLE001 -- a parser that cannot read a fragment decides nothing (the record's will)
            return None
        if peak is not None and peak > self.capacity_bytes:
            self.decision = MemoryStop(peak_bytes=float(peak), capacity_bytes=self.capacity_bytes)
        return self.decision
