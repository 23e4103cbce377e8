"""Setting: an immutable mapping knob name -> value (a kernel candidate is the value of a ``kernel_<op>`` knob)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any



class Setting(Mapping[str, Any]):
    """An immutable, hashable mapping knob -> value.

    Equality is equality of :meth:`key` (the JSON text), the same thing the hash is made of: ``{"sp": True}``
    and ``{"sp": 1}`` are different settings here (Python's ``True == 1`` would make them equal with
    different hashes, and a set would hold both). :meth:`KnobSpace.complete` normalizes values by the
    knob's kind, so settings built through the space compare as their knobs mean."""

    __slots__ = ("_items", "_key", "_hash")

    def __init__(self, values: Mapping[str, Any] | None = None, /, **kw: Any) -> None:
        d = dict(values or {})
        d.update(kw)
        self._items: dict[str, Any] = dict(sorted(d.items()))
        self._key = json.dumps(self._items, sort_keys=True, default=str)
        self._hash = hash(self._key)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Setting):
            return self._key == other._key
        if isinstance(other, Mapping):
            return self._key == Setting(other)._key
        return NotImplemented

    def __repr__(self) -> str:
        return f"Setting({self._items!r})"

    def replace(self, **changes: Any) -> "Setting":
        """A copy with some knobs changed."""
        return Setting({**self._items, **changes})

    def to_dict(self) -> dict[str, Any]:
        return dict(self._items)

    def key(self) -> str:
        """A stable text key (JSON, sorted keys): the identity of a setting on disk and in the bank."""
        return self._key
