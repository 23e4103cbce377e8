"""The harness's clock of a job that writes its own output files (a Slurm job): clock.py's stamps, taken by reading
the files as they grow instead of a pipe."""

from __future__ import annotations

import hashlib
import threading
import time
from array import array
from pathlib import Path
from typing import Any

from ..rundir import RunDir
from .clock import MAX_BYTES, MAX_LINES, STREAMS


class TailClock:
    """The harness's clock of a job that writes its own output files (a Slurm job: slurmstepd writes its stdout and
    stderr on the node, on the file system the runner shares): a thread reads each file as it grows, every
    ``poll_s``, and stamps each line with the unix time of the read that brought it (``chunks``: the read's number,
    so lines of one read are one burst: steps shorter than ``poll_s`` are scored by the bound). At the end the
    stamps are made relative to the job's start as Slurm accounted it (StartTime), and the record's ``wall_s`` is
    Slurm's elapsed time: the bound a burst is scored by, and the one the log's steps must fit in. The sha256 is of
    the bytes read: a job that rewrites what it wrote is caught like a local one. What the runner keeps is bounded
    as for a pipe (MAX_LINES, MAX_BYTES)."""

    def __init__(self, trial_dir: Path, *, poll_s: float = 0.05, max_lines: int = MAX_LINES,
                 max_bytes: int = MAX_BYTES) -> None:
        self.trial_dir, self.poll_s = Path(trial_dir), poll_s
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self._files = {name: {"offset": 0, "rest": bytearray(), "sha": hashlib.sha256(), "arrivals": array("d"),
                              "chunks": array("q"), "dropped": ""} for name in STREAMS}
        self._reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tail-clock")
        self._thread.start()

    def dropped(self) -> str:
        return next((f"{name}: {f['dropped']}" for name, f in self._files.items() if f["dropped"]), "")

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read_all()

    def _read_all(self, *, last: bool = False) -> None:
        self._reads += 1
        now = time.time()
        for name, f in self._files.items():
            if f["dropped"]:
                continue
            try:
                with open(self.trial_dir / name, "rb") as fh:
                    fh.seek(f["offset"])
                    data = fh.read(self.max_bytes - f["offset"] + 1)
            except OSError:
                continue  # not there yet (the job has not started)
            if not data:
                continue
            lines = data.count(b"\n")
            if f["offset"] + len(data) > self.max_bytes or len(f["arrivals"]) + lines > self.max_lines:
                f["dropped"] = (f"printed more than the runner keeps of a stream ({self.max_bytes / 2**20:.0f} MiB, "
                                f"{self.max_lines} lines): {f['offset']} bytes and {len(f['arrivals'])} lines kept")
                continue
            f["offset"] += len(data)
            f["sha"].update(data)
            *done, tail = (bytes(f["rest"]) + data).split(b"\n")
            f["rest"] = bytearray(tail)
            for _ in done:
                f["arrivals"].append(now)
                f["chunks"].append(self._reads)
            if last and tail:  # the last line, without its \n
                f["arrivals"].append(now)
                f["chunks"].append(self._reads)
                f["rest"] = bytearray()

    def finish(self, *, started_unix: float, wall_s: float) -> dict[str, Any]:
        """Read what is left, then write the clock record (arrivals in seconds since ``started_unix``, the job's
        start as Slurm accounted it); returns its body."""
        self._stop.set()
        self._thread.join(5.0)
        self._read_all(last=True)

        def body(f):
            out = {"sha256": f["sha"].hexdigest(), "chunks": list(f["chunks"]),
                   "arrivals_s": [round(max(0.0, t - started_unix), 6) for t in f["arrivals"]],
                   "cpu_s": [None] * len(f["arrivals"]), "cpu_t_s": [None] * len(f["arrivals"])}
            if f["dropped"]:
                out["dropped"] = f["dropped"]
            return out

        o, e = body(self._files["stdout"]), body(self._files["stderr"])
        rec = {"wall_s": wall_s, "started_unix": started_unix, "complete": True, "source": "slurm",
               "stdout_sha256": o["sha256"], "arrivals_s": o["arrivals_s"], "chunks": o["chunks"],
               "cpu_s": o["cpu_s"], "cpu_t_s": o["cpu_t_s"], "stderr": e}
        if "dropped" in o:
            rec["dropped"] = o["dropped"]
        RunDir.write_clock_at(self.trial_dir, rec)
        return rec
