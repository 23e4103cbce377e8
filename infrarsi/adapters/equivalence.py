"""Equivalence, not acceptance: an emitted launch must compute what the user's job computes.

The framework accepting an emitted launch is not enough: a launch that drops the user's replicate degree, a
flag, or a path the script wrote relative to ``${PWD}`` is accepted and trains another job. So every emitted
launch is read back by the framework's own configuration code (Megatron: its argument names and megatron-core's
``TransformerConfig``; torchtitan: ``ConfigManager`` and ``ParallelDims``, 0.2.x in-process, 0.3.x from its own
target directory) and compared field by field with the user's launch read the same way. Every field must be
equal except

- the fields of the knobs the setting changed and the fields they derive (a new tensor parallel degree changes
  the data parallel degree; fp8 changes the converter list),
- output locations the run points into the trial directory (checkpoints, TensorBoard, wandb, the dump folder).

The per-framework readers are :mod:`.megatron.equivalence` and :mod:`.torchtitan.equivalence`; this module
holds the comparison they share. A difference is a :class:`NotEquivalent` (a ``ValueError``): the run records
the trial as ``invalid`` with the differing fields and launches nothing; ``apply`` writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from .base import FrameworkRejected

_ADDR = re.compile(r" at 0x[0-9a-f]+")
MISSING = "(not set)"


class NotEquivalent(FrameworkRejected):
    """The emitted launch parses to another job than the user's; the message lists the differing fields."""


def comparable(value: Any) -> Any:
    """A value as the comparison sees it: plain data as it is, anything else as its repr without addresses."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): comparable(v) for k, v in value.items()}
    return _ADDR.sub("", repr(value))


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A parsed config (nested dataclasses) as ``{"section.field": comparable value}``; a nested config's class
    is kept under ``"section.__class__"`` (torchtitan 0.3 picks activation checkpointing by class)."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {f"{prefix}__class__": type(obj).__qualname__} if prefix else {}
        for f in dataclasses.fields(obj):
            out.update(flatten(getattr(obj, f.name), f"{prefix}{f.name}."))
        return out
    return {prefix[:-1]: comparable(obj)}


def differences(before: Mapping[str, Any], after: Mapping[str, Any], *, changed: Collection[str],
                owners: Mapping[str, Collection[str]], outputs: Collection[str] = ()) -> list[str]:
    """``field: before -> after`` for each field that differs and that no changed knob owns.

    ``owners`` maps a field to the knobs whose change may change it (its own knob and the knobs it derives
    from); a key ending in ``.`` owns every field under it. A field no knob owns must be equal; ``outputs`` are
    output locations, allowed to differ."""
    out = []
    changed = set(changed)
    prefixes = sorted((k for k in owners if k.endswith(".")), key=len, reverse=True)
    for key in sorted(set(before) | set(after)):
        a, b = comparable(before.get(key, MISSING)), comparable(after.get(key, MISSING))
        if a == b or key in outputs:
            continue
        own = owners.get(key) or next((owners[p] for p in prefixes if key.startswith(p)), ())
        if changed & set(own):
            continue
        out.append(f"{key}: {_short(a)} -> {_short(b)}")
    return out


def changed_knobs(original: Mapping[str, Any], setting: Mapping[str, Any]) -> set[str]:
    """The knobs whose value in ``setting`` differs from the launch's own (a knob the launch has no value for
    counts as changed when the setting gives one)."""
    return {k for k, v in setting.items() if v is not None and original.get(k) != v}


def raise_if_different(diffs: list[str], what: str) -> None:
    if diffs:
        shown = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        raise NotEquivalent(f"{what} does not compute the user's job: {shown}")


def _short(v: Any, n: int = 80) -> str:
    s = repr(v) if not isinstance(v, str) or v == MISSING else repr(v)
    return s if len(s) <= n else s[:n - 3] + "..."
