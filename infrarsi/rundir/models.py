"""The search record's ``models`` block: what the tuner's models fitted, typed; written by the search
(search/record.py, at the end of the search) and only read by the report.

Every effect is on the log scale, relative to its knob's default, with its central 90% posterior interval
(``lo``, ``hi``); percent = 100 (exp(x) - 1). The effects are the additive models' (models/time.py,
models/memory.py: one column per knob value); ``time_priced_by`` and ``memory_priced_by`` name the model that
ranked step time and priced P(OOM) at the end of the search, which need not be the additive one (a GP on top of
it, or the structured power-law terms): the report says so.

A run directory written before this block existed holds the same fields at the top of ``search.json``
(schema 1): :meth:`ModelsRecord.lift` moves them here when it is read, so an old run still reports.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = 2  # 1: the same fields flat in search.json, no priced_by


class EffectRecord(BaseModel):
    """One column's posterior (models.revision.Effect): ``mean``/``lo``/``hi`` log scale, 90% interval."""

    model_config = ConfigDict(extra="ignore")

    feature: str  # "knob=value", or "a=x*b=y" for an interaction
    target: str = ""  # "time" | "memory"
    mean: float
    lo: float
    hi: float
    prior_mean: float = 0.0
    prior_sd: float | None = None
    source: str = ""  # where the prior came from: llm | offline | bank | uninformative
    text: str = ""  # the effect in words, as the model prints it


class RevisionRecord(BaseModel):
    """A prior next to the posterior the trials gave it (models.revision.PriorRevision; log scale, 90%)."""

    model_config = ConfigDict(extra="ignore")

    feature: str
    target: str
    source: str
    rationale: str | None = None
    prior_mean: float
    prior_lo: float
    prior_hi: float
    post_mean: float
    post_lo: float
    post_hi: float
    miscalibrated: bool
    direction: str  # consistent | wrong sign | stronger than believed | weaker than believed
    text: str = ""


class FittedRecord(BaseModel):
    """Per setting the tuner was told (keyed by ``Setting.key()``): its posterior predictive as the search's own
    parts give it (report/fit.py reads it; nothing is refit)."""

    model_config = ConfigDict(extra="ignore")

    time: dict[str, tuple[float, float]] = {}  # log step seconds: (mean, sd), the run-to-run scatter included
    memory: dict[str, tuple[float, float, float]] = {}  # log peak bytes (offsets included): (mean, sd), P(OOM)
    estimate: dict[str, tuple[float, str]] = {}  # the pre-flight estimate priced with: (bytes per rank, basis)


class ModelsRecord(BaseModel):
    """What the tuner's models fitted, in the units the report prints (see the module doc)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    schema_: int = Field(SCHEMA, alias="schema")
    time_priced_by: str = "not recorded"  # the model that ranked step time at the end of the search
    memory_priced_by: str = "not recorded"  # the model that priced P(OOM) at the end of the search
    fitted: FittedRecord | None = None
    memory_estimate: bool = False  # the memory model took the pre-flight estimate as its offset
    time_effects: list[EffectRecord] = []
    time_revisions: list[RevisionRecord] = []
    time_sigma: float | None = None  # log scale: the time model's run-to-run scatter
    memory_effects: list[EffectRecord] = []  # whole effects: the estimate's projection plus the correction
    memory_corrections: list[EffectRecord] = []  # the memory model's own coefficients ([] without an estimate)
    estimate_projection_rms: float | None = None  # log scale: misfit of the estimate's additive projection
    memory_revisions: list[RevisionRecord] = []
    capacity_bytes: float | None = None

    @staticmethod
    def lift(body: dict[str, Any]) -> dict[str, Any]:
        """``body`` (a ``search.json`` as read) with a schema-1 run's flat fields moved under ``models`` (None
        when it holds none of them: the search had not fitted anything)."""
        if "models" in body or not any(k in body for k in SCHEMA_1_FIELDS):
            return body
        rest = {k: v for k, v in body.items() if k not in SCHEMA_1_FIELDS}
        flat = {k: body[k] for k in SCHEMA_1_FIELDS if body.get(k) is not None}
        return {**rest, "models": {**flat, "schema": 1} if set(flat) - {"schema"} else None}


# The schema-1 names, flat at the top of search.json.
SCHEMA_1_FIELDS = ("schema", "fitted", "memory_estimate", "time_effects", "time_revisions", "time_sigma",
                   "memory_effects", "memory_corrections", "estimate_projection_rms", "memory_revisions",
                   "capacity_bytes")
