"""The memory stop: a trial whose framework reports, while it runs, a peak already past the contract's capacity is
ended there (at step 1, where Megatron-LM and minigpt print their memory report; torchtitan prints its memory on
every step line), recorded ``oom`` with the figures, instead of running its whole contract on memory it would not
have on the job's devices.

The peak is the adapter's own reading of the log so far (``Adapter.parse`` on what the trial printed up to now:
the same figure its record will carry, e.g. Megatron's "max reserved"), compared with
``hardware.memory_capacity_gib`` per device. Where the capacity is also the process's enforced limit (a CPU trial's
RLIMIT_DATA) the process fails on its own first; the stop matters where the contract's capacity is under what the
machine has (a team's headroom on a GPU, an allocator that reserves past it). The log is read from the harness's
copies of the trial's streams (``trial_dir/stdout`` and ``stderr``, written by the clock), and parsed only when new
text mentions memory.

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
        self._sizes = (0, 0)
        self.decision: MemoryStop | None = None

    def check(self) -> MemoryStop | None:
        if self.decision is not None:
            return self.decision
        paths = [self.trial_dir / "stdout", self.trial_dir / "stderr"]
        sizes = tuple(min(p.stat().st_size, MAX_BYTES) if p.is_file() else 0 for p in paths)
        if sizes == self._sizes:  # a stat per poll; the files are read only when they grew
            return None
        data = []
        for p, n in zip(paths, sizes):
            try:
                with open(p, "rb") as fh:
                    data.append(fh.read(n))
            except OSError:
                data.append(b"")
        # what is new, from a few bytes back (a word the last read cut in two)
        new = b"".join(d[max(0, old - 16):] for d, old in zip(data, self._sizes))
        self._sizes = sizes
        if b"memory" not in new.lower():
            return None
        try:
            peak = self._peak(data[0].decode(errors="replace"), data[1].decode(errors="replace"))
        except Exception:  # noqa: BLE001 -- a parser reading a log cut mid-line decides nothing; the record's parse will
            return None
        if peak is not None and peak > self.capacity_bytes:
            self.decision = MemoryStop(peak_bytes=float(peak), capacity_bytes=self.capacity_bytes)
        return self.decision
