"""A live line while something long runs: what is running, for how long, and (when known) an ETA.

On a terminal it is one rich status line, redrawn every second, with the stage's own lines printed above it. When
stdout is not a terminal (a log file, a pipe, CI) it prints a plain line, no control codes, every
``plain_every_s`` seconds (60 by default), so a log still shows the run is alive and where it is.

    with Heartbeat(console, "doctor: baseline run 1 of 3") as beat:
        ...                                        # work
        beat.note("doctor: baseline run 2 of 3", eta="ETA ~1:10")   # the subject changed

Each tick shows the subject, the time since it changed and since the start, and the ETA given with it."""

from __future__ import annotations

import threading
import time
from rich.console import Console
from rich.markup import escape


def clock(seconds: float) -> str:
    """Seconds as 0:42, 3:10 or 1:02:05 (h:mm:ss)."""
    s = int(max(0.0, seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def eta(done: int, total: int, elapsed_s: float) -> str:
    """'ETA ~4 min' from the mean time per finished unit so far; '' until one has finished."""
    if done <= 0 or total <= done:
        return ""
    left = elapsed_s / done * (total - done)
    return f"ETA ~{clock(left)}" if left < 3600 else f"ETA ~{left / 3600:.1f} h"


def eta_at_most(done: int, left: int, elapsed_s: float) -> str:
    """'ETA at most ~4:10' for work that may end early (verification's pairs: the rule may decide at any look), from
    the mean time per finished unit so far and the most units ``left``; '' until one has finished."""
    if done <= 0 or left <= 0:
        return ""
    return eta(done, done + left, elapsed_s).replace("ETA ~", "ETA at most ~")


class Heartbeat:
    """See the module docstring. The subject and its ETA may change from any thread (``note``)."""

    def __init__(self, console: Console, subject: str, *, plain_every_s: float = 60.0, tick_s: float = 1.0,
                 announce: bool = False) -> None:
        """``announce``: without a terminal, print the subject at once too (a long single step, e.g. estimate)."""
        self.console, self.subject, self.eta, self.announce = console, subject, "", announce
        self.plain_every_s, self.tick_s = plain_every_s, tick_s
        self.started = self.since = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = None

    def note(self, subject: str, eta: str = "") -> None:
        """A new subject (a new trial started): its own clock restarts."""
        self.subject, self.eta, self.since = subject, eta, time.monotonic()

    def line(self) -> str:
        now = time.monotonic()
        return (f"{self.subject}: running {clock(now - self.since)}; elapsed {clock(now - self.started)}"
                + (f"; {self.eta}" if self.eta else ""))

    def __enter__(self) -> "Heartbeat":
        if self.console.is_terminal:
            self._status = self.console.status(escape(self.line()))
            self._status.start()
        elif self.announce:
            self.console.print(f"{escape(self.subject)} ...", highlight=False, soft_wrap=True)
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        last_plain = time.monotonic()
        while not self._stop.wait(self.tick_s):
            try:
                if self._status is not None:
                    self._status.update(escape(self.line()))
                elif time.monotonic() - last_plain >= self.plain_every_s:
                    last_plain = time.monotonic()
                    self.console.print(f"  ... {escape(self.line())}", highlight=False, soft_wrap=True)
            except Exception:  # noqa: BLE001 - a progress line never stops the work it reports on
                pass

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._status is not None:
            self._status.stop()
