"""History: the trials told to a :class:`~.tuner.Tuner`, in order, as (setting, outcome) pairs; what the models fit on.

Every status is data: an OOM says the peak was above capacity, a trial that ran (``ok``, or ``numerics_drift``: it ran
every step and broke the loss check) says it was at most that, and its peak, when reported, says where.

    h = History()
    h.add(setting, Outcome("ok", step_time_s=1.2, peak_memory_bytes=7e10))
    len(h), h[0], s in h             # a sequence of (setting, outcome); ``in`` asks whether a setting was told
    h.ok()                           # [(setting, outcome)] of the trials that gave a step time
    h.memory_rows()                  # the trials that say something about memory
    h.best(), h.fastest(5)           # the fastest trial that ran; the settings of the k fastest
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from ..knobs import Setting
from ..trial.status import TrialStatus
from .outcome import Outcome


class History(Sequence[tuple[Setting, Outcome]]):
    """The told trials, oldest first; ``version`` counts them (a model fitted at version v saw the first v)."""

    def __init__(self) -> None:
        self._rows: list[tuple[Setting, Outcome]] = []
        self._told: set[Setting] = set()

    def add(self, setting: Setting, outcome: Outcome) -> None:
        if not isinstance(outcome, Outcome):
            raise TypeError(f"tell() needs an Outcome, got {type(outcome).__name__}")
        self._rows.append((setting, outcome))
        self._told.add(setting)

    @overload
    def __getitem__(self, i: int) -> tuple[Setting, Outcome]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[Setting, Outcome]]: ...

    def __getitem__(self, i):
        return self._rows[i]

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[tuple[Setting, Outcome]]:
        return iter(self._rows)

    def __contains__(self, setting: object) -> bool:
        """Whether ``setting`` was told (a setting, not a (setting, outcome) pair)."""
        return setting in self._told

    @property
    def version(self) -> int:
        return len(self._rows)

    @property
    def settings(self) -> list[Setting]:
        return [s for s, _ in self._rows]

    def ok(self) -> list[tuple[Setting, Outcome]]:
        """The trials that gave a step time (status ok)."""
        return [(s, o) for s, o in self._rows if o.status is TrialStatus.OK]

    def ran(self) -> list[tuple[Setting, Outcome]]:
        """The trials that ran every step (ok or numerics_drift)."""
        return [(s, o) for s, o in self._rows if o.status.ran()]

    def memory_rows(self, *, from_runs_without_peak: bool = True) -> list[tuple[Setting, Outcome]]:
        """The trials that say something about memory: OOMs, settings skipped on their estimate (censored like an OOM)
        and every trial that ran (``from_runs_without_peak`` False: only those that reported a peak)."""
        return [(s, o) for s, o in self._rows if o.status.is_memory_evidence()
                and (o.status.over_capacity() or from_runs_without_peak or o.peak_memory_bytes)]

    def lower_bounds(self) -> list[tuple[Setting, Outcome]]:
        """The trials pruned for being slower than the incumbent: their step time is a lower bound (censored)."""
        return [(s, o) for s, o in self._rows if o.status is TrialStatus.PRUNED]

    def best(self) -> tuple[Setting, Outcome] | None:
        """The fastest trial that ran (status ok), the earlier one on a tie; None before any."""
        ok = self.ok()
        return min(ok, key=lambda so: so[1].step_time_s) if ok else None

    def fastest(self, k: int) -> list[Setting]:
        """The settings of the ``k`` fastest trials that ran, by measured step time (ties: the earlier trial)."""
        ok = sorted((o.step_time_s, i) for i, (_, o) in enumerate(self._rows) if o.status is TrialStatus.OK)
        return [self._rows[i][0] for _, i in ok[:k]]


def as_history(rows: Sequence[tuple[Setting, Outcome]]) -> History:
    """A History of ``rows`` (a list of pairs, as a benchmark keeps them)."""
    h = History()
    for s, o in rows:
        h.add(s, o)
    return h
