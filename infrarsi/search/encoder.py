"""Encoder: every numeric form of a setting the search's models and steps read, with one cache.

The models see only the knobs that carry information (``model_space``): a knob the others determine (data parallel =
world / (tp * pp * cp), :mod:`.derived`) would be collinear with them and smear their effects. Per setting:

- ``codes``: each model knob's value index, (n, K) ints: the GPs' coordinates (``ordered``: (K,) bool, the knobs whose
  values are ordered numbers, TP 1/2/4/8, where the GPs count steps between values);
- ``onehot``: ``space.encode`` over every knob of the space, (n, F): distances between settings (diversity, batches);
- ``features``: :func:`.structured.features` of the model knobs, (n, q): ln value of a numeric knob, 0/1 of a bool,
  one-hot otherwise (the structured memory model's power-law inputs).

A setting's rows never change, and the same ~4,000 candidates are scored on every ask: each setting is encoded once,
all three forms together, and kept.

    enc = Encoder(space, pool)
    enc.codes(settings), enc.onehot(settings), enc.features(settings)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..knobs import KnobSpace, Setting
from ..models import is_ordered
from .derived import derived_knobs
from .structured import features as structured_features


class Encoder:
    def __init__(self, space: KnobSpace, pool: Sequence[Setting]) -> None:
        self.space = space
        self.derived: set[str] = derived_knobs(space, pool)
        self.model_space = KnobSpace([k for k in space.knobs if k.name not in self.derived])
        self._index = [(k.name, {v: i for i, v in enumerate(k.domain)}) for k in self.model_space.knobs]
        self.ordered = np.array([is_ordered(k) for k in self.model_space.knobs], dtype=bool)
        self._k = len(self._index)
        self._f = len(space.feature_names)
        self._q = structured_features(self.model_space, [space.default()]).shape[1]
        self._rows: dict[Setting, np.ndarray] = {}  # setting -> [codes | onehot | features], one row

    def _encode(self, settings: list[Setting]) -> np.ndarray:
        codes = np.array([[ix[s[name]] for name, ix in self._index] for s in settings],
                         dtype=float).reshape(len(settings), self._k)
        return np.hstack([codes, self.space.encode(settings), structured_features(self.model_space, settings)])

    def rows(self, settings: Sequence[Setting]) -> np.ndarray:
        """(n, K + F + q): every form of each setting, encoded once and kept."""
        new = [s for s in dict.fromkeys(settings) if s not in self._rows]
        if new:
            self._rows.update(zip(new, self._encode(new)))
        if not len(settings):
            return np.zeros((0, self._k + self._f + self._q))
        return np.stack([self._rows[s] for s in settings])

    def codes(self, settings: Sequence[Setting]) -> np.ndarray:
        """Value index per model knob: (n, K) ints."""
        return self.rows(settings)[:, :self._k].astype(np.int64)

    def onehot(self, settings: Sequence[Setting]) -> np.ndarray:
        """``space.encode``: (n, len(space.feature_names))."""
        return self.rows(settings)[:, self._k:self._k + self._f]

    def features(self, settings: Sequence[Setting]) -> np.ndarray:
        """:func:`.structured.features` over the model knobs: (n, q)."""
        return self.rows(settings)[:, self._k + self._f:]
