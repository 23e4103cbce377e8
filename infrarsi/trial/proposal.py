"""Proposal: why the tuner proposed a setting -- the step that chose it, what the models priced it at, the memory savers
it was paired with, and the trial it re-runs.

It reaches disk as a JSON object in three places: ``proposals.pending.json`` and each trial's ``proposal.json`` (by
setting key and by trial id, rundir/run.py), ``search.json``'s ``proposals`` (rundir/records.py: ``SearchRecord``) and
each verified candidate's ``why`` (:mod:`.verified`). On disk it is :meth:`Proposal.to_dict`: the fields in the order
below, those that are None or empty left out. A record may hold keys this model does not name (an older run's, a test
fixture's): they are kept, in their order after the fields, and written back as read.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer


class Proposal(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    kind: str  # initial | design | acquisition | local | thompson | paired | probe | resumed | rerun
    ei: float | None = None  # expected improvement on log step time, at the pick
    p_oom: float | None = None  # the memory model's P(out of memory)
    p_drift: float | None = None  # 1 - P(pass the loss check), when some trial has broken it
    predicted_s: float | None = None  # the time model's step time, seconds
    paired_from: dict[str, Any] | None = None  # kind "paired": the setting it was paired from
    savers: list[str] = []  # kind "paired": the "knob=value" changes that made it fit
    rerun_of: int | None = None  # the id of the trial a Ctrl-C cut short that this one runs again

    @model_serializer(mode="wrap")
    def _written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """What a record holds: the fields that are None or empty left out; the keys the model does not name as read."""
        return {k: v for k, v in handler(self).items() if k not in _FIELDS or (v is not None and v != [])}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def read(cls, data: dict[str, Any]) -> Proposal:
        """A proposal as a record holds it; keys the model does not name are kept (:meth:`to_dict` writes them back)."""
        return cls.model_validate(data)


_FIELDS = frozenset(Proposal.model_fields)
