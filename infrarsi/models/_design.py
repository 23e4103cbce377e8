"""Design matrix and coefficient priors shared by the time and memory models.

Columns, in order:

1. main effects -- exactly ``KnobSpace.feature_names`` (one-hot of non-default values; the default
   is the reference level), so a column's coefficient is what a :class:`Prior` states;
2. interactions -- for each knob tuple in ``interactions``, the products of each knob's
   *interaction basis*: a positive int knob contributes one column ``log2(value / default)``, any
   other knob its one-hot non-default columns. ``("micro_batch_size", "recompute_granularity")``
   with recompute in {none, selective, full} gives two columns,
   ``log2(micro_batch_size)*recompute_granularity=selective`` and ``...=full``: how much the
   recompute effect changes per doubling of the micro-batch (log scale).

Priors: a main-effect column gets Normal(prior mean, prior sd) from the matching Prior (time_* or
mem_* fields, by target), else Normal(0, ``main_sd``); an interaction column gets Normal(0,
``interaction_sd`` = 0.1) per unit of its product: second-order effects are small.

Ordered knobs (an int knob with three or more increasing values: TP 1/2/4/8, micro-batch) are coded
by *steps*: the column of value v is 1 for every setting at v or beyond it (away from the default),
so its coefficient is the step from v's neighbour toward the default to v, and a value's effect is
the sum of the steps on the way. Independent priors on steps make neighbouring values' effects move
together: learning that TP 8 is much slower than TP 4 says little about TP 2 against TP 1, while
independent one-hot effects, tied only through the intercept, let such data drag an untried default
value's effect around. A step's prior is the difference of its two values' priors, its variance the
difference of their variances (at least a quarter of the value's own). ``to_levels`` maps
coefficients to per-value effects (what a Prior states and a report shows); ``level_prior_mean`` and
``level_prior_sd`` are the priors as given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..knobs.knob import Knob
from ..knobs.setting import Setting
from ..knobs.space import KnobSpace
from ..trial.prior import Prior

Target = Literal["time", "memory"]

# Interactions a training-infrastructure engineer expects; each is used when all its knobs exist.
#  - micro-batch x recompute: activation memory (and recompute's extra forward) scale with the micro-batch
#  - TP x sequence parallel: SP splits the activations TP would otherwise replicate
#  - PP x virtual pipeline x micro-batch: bubble fraction (pp - 1) / (n_microbatches * vpp)
#  - EP x MoE token dispatcher: all-gather moves (and holds) every EP rank's tokens, so its time and
#    buffers grow with EP where all-to-all's do not (Megatron recommends all-to-all once EP > 1)
DEFAULT_INTERACTIONS: tuple[tuple[str, ...], ...] = (
    ("micro_batch_size", "recompute_granularity"),
    ("tensor_parallel", "sequence_parallel"),
    ("pipeline_parallel", "virtual_pipeline"),
    ("pipeline_parallel", "virtual_pipeline", "micro_batch_size"),
    ("expert_parallel", "moe_token_dispatcher"),
)


ROW_CACHE_MAX = 200_000  # design rows kept per Design (x p floats each)


class Design:
    """Encodes settings into the model's columns and holds the per-column Normal priors.

    ``names``: column names (p of them); ``prior_mean``/``prior_sd``: shape (p,), log scale;
    ``prior_source``: where each column's prior came from ("uninformative" when none was given);
    ``unused_priors``: priors whose feature is not a column of this space (ignored, kept for reports).
    """

    def __init__(
        self,
        space: KnobSpace,
        *,
        target: Target,
        priors: Sequence[Prior] | None = None,
        interactions: Sequence[Sequence[str]] | None = None,
        main_sd: float = 1.0,
        interaction_sd: float = 0.1,
        ordinal: bool = True,
    ) -> None:
        if not isinstance(space, KnobSpace):
            raise TypeError(f"space must be a KnobSpace, got {type(space).__name__}")
        if main_sd <= 0 or interaction_sd <= 0:
            raise ValueError(f"main_sd ({main_sd}) and interaction_sd ({interaction_sd}) must be > 0")
        self.space = space
        self.target: Target = target
        if interactions is None:
            self.interactions = tuple(t for t in DEFAULT_INTERACTIONS if all(k in space for k in t))
        else:
            self.interactions = tuple(tuple(t) for t in interactions)
            for t in self.interactions:
                if len(t) < 2 or len(set(t)) != len(t):
                    raise ValueError(f"interaction {t!r}: give two or more distinct knob names")
                unknown = [k for k in t if k not in space]
                if unknown:
                    raise ValueError(
                        f"interaction {t!r} names unknown knob(s) {unknown}; known: {', '.join(space.names)}"
                    )

        # Per knob: value -> row of its main-effect one-hot block and of its interaction basis.
        self._knobs = list(space.knobs)
        self._main_cols: dict[str, list[int]] = {}
        self._basis: dict[str, tuple[list[str], dict[Any, np.ndarray]]] = {}
        col = {n: i for i, n in enumerate(space.feature_names)}
        for k in self._knobs:
            self._main_cols[k.name] = [col[f"{k.name}={v}"] for v in k.domain if v != k.default]
            if k.kind == "int" and all(v > 0 for v in k.domain):
                self._basis[k.name] = (
                    [f"log2({k.name})"],
                    {v: np.array([math.log2(v / k.default)]) for v in k.domain},
                )
            else:
                nd = [v for v in k.domain if v != k.default]
                self._basis[k.name] = (
                    [f"{k.name}={v}" for v in nd],
                    {v: np.array([1.0 if v == u else 0.0 for u in nd]) for v in k.domain},
                )

        self.main_names: list[str] = list(space.feature_names)
        inter_names: list[str] = []
        for t in self.interactions:
            parts = [self._basis[k][0] for k in t]
            for combo in _product(parts):
                inter_names.append("*".join(combo))
        self.interaction_names = inter_names
        self.names: list[str] = self.main_names + inter_names
        p_main = len(self.main_names)

        self.prior_mean = np.zeros(len(self.names))
        self.prior_sd = np.concatenate([np.full(p_main, main_sd), np.full(len(inter_names), interaction_sd)])
        self.prior_source = ["uninformative"] * len(self.names)
        self.unused_priors: list[Prior] = []
        self._rows: dict[Setting, np.ndarray] = {}  # design rows of Settings already encoded (see matrix)
        seen: dict[str, Prior] = {}
        for pr in priors or ():
            if not isinstance(pr, Prior):
                raise TypeError(f"priors must be Prior objects, got {type(pr).__name__}")
            f = pr.feature
            j = col.get(f)
            if j is None:
                self.unused_priors.append(pr)
                continue
            if f in seen:
                raise ValueError(
                    f"two priors for {f} (sources {seen[f].source!r} and {pr.source!r}); merge them into one "
                    "before building the model"
                )
            seen[f] = pr
            self.prior_mean[j] = pr.time_mean if target == "time" else pr.mem_mean
            self.prior_sd[j] = pr.time_sd if target == "time" else pr.mem_sd
            self.prior_source[j] = pr.source

        # Step coding of ordered knobs: steps[k] = [(column, column of the neighbour toward the default or
        # None)], and to_levels (p, p) with level effect = to_levels @ coefficients.
        self.level_prior_mean = self.prior_mean.copy()
        self.level_prior_sd = self.prior_sd.copy()
        self.to_levels = np.eye(self.p)
        self._steps: dict[str, list[tuple[int, int | None]]] = {}
        for k in self._knobs if ordinal else ():
            if not is_ordered(k):
                continue
            dom = list(k.domain)
            d = dom.index(k.default)
            cols = dict(zip([i for i in range(len(dom)) if i != d], self._main_cols[k.name]))
            steps = []
            for i in cols:
                toward = i - 1 if i > d else i + 1
                steps.append((cols[i], cols.get(toward)))
                # the level effect of dom[i] sums the steps from dom[i] back to the default
                j = i
                while j != d:
                    self.to_levels[cols[i], cols[j]] = 1.0
                    j = j - 1 if j > d else j + 1
            self._steps[k.name] = steps
            for c, prev in steps:
                m_prev = 0.0 if prev is None else self.level_prior_mean[prev]
                v_prev = 0.0 if prev is None else self.level_prior_sd[prev] ** 2
                v = self.level_prior_sd[c] ** 2
                self.prior_mean[c] = self.level_prior_mean[c] - m_prev
                self.prior_sd[c] = math.sqrt(max(v - v_prev, v / 4))

    @property
    def p(self) -> int:
        return len(self.names)

    def matrix(self, settings: Sequence[Mapping[str, Any]] | Mapping[str, Any], *, what: str = "settings") -> np.ndarray:
        """Shape (n, p) float64. Missing knobs take their default; a value outside a knob's domain is
        an error naming the row, the knob and its domain. Rows of :class:`Setting` are cached (the search
        scores the same pool on every ask)."""
        rows = [settings] if isinstance(settings, Mapping) else list(settings)
        if rows and all(isinstance(r, Setting) for r in rows):
            cache = self._rows
            todo = list(dict.fromkeys(r for r in rows if r not in cache))
            if todo:
                if len(cache) + len(todo) > ROW_CACHE_MAX:
                    cache.clear()
                for r, row in zip(todo, self._matrix(todo, what=what)):
                    cache[r] = row
            return np.array([cache[r] for r in rows]).reshape(len(rows), self.p)
        return self._matrix(rows, what=what)

    def _matrix(self, rows: list[Mapping[str, Any]], *, what: str) -> np.ndarray:
        # plain dicts: dict.get is C-level, Setting.get goes through Python (10,000 rows x 10 knobs)
        rows = [r.to_dict() if isinstance(r, Setting) else r for r in rows]
        n = len(rows)
        x = np.zeros((n, self.p))
        basis_rows: dict[str, np.ndarray] = {}
        for k in self._knobs:
            index = {v: i for i, v in enumerate(k.domain)}
            try:
                idx = np.fromiter((index[r.get(k.name, k.default)] for r in rows), dtype=np.int64, count=n)
            except (KeyError, TypeError):
                for i, r in enumerate(rows):
                    v = r.get(k.name, k.default)
                    if v not in index:
                        raise ValueError(
                            f"{what}[{i}] has {k.name}={v!r}, outside its domain {list(k.domain)}"
                        ) from None
                raise
            # one-hot block: domain index -> column (default has none)
            nd = [i for i, v in enumerate(k.domain) if v != k.default]
            if k.name in self._steps:  # steps: 1 at this value and beyond it, away from the default
                d = k.domain.index(k.default)
                for c, di in zip(self._main_cols[k.name], nd):
                    x[:, c] = (idx >= di) if di > d else (idx <= di)
            else:
                for c, di in zip(self._main_cols[k.name], nd):
                    x[:, c] = idx == di
            if any(k.name in t for t in self.interactions):
                table = np.stack([self._basis[k.name][1][v] for v in k.domain])  # (|domain|, width)
                basis_rows[k.name] = table[idx]  # (n, width)
        c = len(self.main_names)
        for t in self.interactions:
            block = basis_rows[t[0]]
            for k in t[1:]:
                b = basis_rows[k]
                block = (block[:, :, None] * b[:, None, :]).reshape(n, block.shape[1] * b.shape[1])
            x[:, c : c + block.shape[1]] = block
            c += block.shape[1]
        return x


def is_ordered(knob: Knob) -> bool:
    """An ordered knob: an int with three or more increasing values (TP 1/2/4/8, micro-batch). The design codes it by
    steps; the search's GPs count the steps between two of its values."""
    dom = list(knob.domain)
    return knob.kind == "int" and len(dom) >= 3 and all(b > a for a, b in zip(dom, dom[1:]))


def _product(parts: list[list[str]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [()]
    for names in parts:
        out = [o + (n,) for o in out for n in names]
    return out
