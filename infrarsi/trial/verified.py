"""VerifiedCandidate: one candidate of the search re-run in A/B pairs with the baseline, and the verdict on it.

The verification (verify/reverify.py) makes one per candidate, the run directory keeps them in ``verification.json``
(rundir/records.py: ``Verification``), the report and apply read them. A pair is ``(baseline trial id, candidate
trial id)``, run back to back; trial ids are the folder names under ``trials/``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator

from .proposal import Proposal

Pair = tuple[int, int]


class Disturbed(BaseModel):
    """The pairs another job disturbed (set aside and run again), and why."""

    model_config = ConfigDict(extra="forbid")

    trials: list[Pair]
    reason: str


class VerifiedCandidate(BaseModel):
    """One candidate's interleaved re-runs and the verdict. Speedup = baseline time / candidate time."""

    model_config = ConfigDict(extra="forbid")

    setting: dict[str, Any]
    why: Proposal | None = None  # why the tuner proposed it; None (``{}`` on disk): this tuner did not propose it
    trials: list[Pair] = []  # the pairs the verdict uses
    disturbed: Disturbed | None = None
    unisolated: list[int] = []  # ids of the pairs' trials that ran without isolation (execute/isolation.py)
    end_to_end: list[str] = []  # pairs whose candidate was scored by its end-to-end bound (execute/end_to_end.py)
    promoted: bool
    reason: str
    speedup: float | None = None
    ci95: tuple[float, float] | None = None
    pairs: int | None = None
    baseline_s: list[float] | None = None
    candidate_s: list[float] | None = None
    peak_memory_bytes: float | None = None
    baseline_peak_memory_bytes: float | None = None
    mfu: float | None = None
    baseline_mfu: float | None = None
    level: float | None = None  # the confidence of ci95: 0.95 (speedup.LEVEL); records before it held the look's own
    decision: str | None = None  # "promote" | "reject" | "outranked" | "budget" (verify/speedup.py's Decision.state)
    explanation: str = ""  # a candidate that did not reproduce, in words: search and A/B figures, conditions of each

    @field_validator("why", mode="before")
    @classmethod
    def _no_proposal(cls, v: Any) -> Any:
        return None if v == {} else v

    @field_serializer("why")
    def _why(self, v: Proposal | None) -> dict[str, Any]:
        return {} if v is None else v.to_dict()
