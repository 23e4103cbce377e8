"""KnobSpace: knobs plus cross-knob constraints; validation, sampling, enumeration, neighbours and
the feature encoding that the Bayesian models use.

A constraint is a callable ``(setting) -> None | str``: None when satisfied, else a message that
shows the numbers ("tensor parallel 3 does not divide 32 attention heads"). Wrap it in
:class:`Constraint` to give it a name for reports.

Feature encoding (``encode``): one column per non-default value of every knob, named
``"knob=value"``, equal to 1.0 when the setting takes that value. The default value is the reference
level, so a column's coefficient is "the effect of this value relative to the default" -- exactly
what a :class:`~infrarsi.trial.prior.Prior` states. ``encode_numeric`` adds log2 columns for int
knobs (for smooth trends and interactions).

Derived knobs (:class:`Derived`) follow their parents instead of vetoing them: data parallel is world /
(tp * pp * cp), torchtitan shards optimizer state exactly when FSDP's shard degree is above 1, a value the
framework ignores (``--sequence-parallel`` at TP 1) is its no-op value. ``derive`` applies the rules;
``complete`` and every way the space proposes settings (``sample``, ``enumerate``, ``candidates``,
``neighbors``) derive, so the space proposes a layout and derives the rest, and a layout is never called
invalid because a derived knob was not moved with it. ``validate`` judges a setting as stated.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .knob import Knob, value_problem
from .setting import Setting

REPAIR_DEPTH = 3  # most changes that mend a one-knob move (each fixes a rule, so the search stays small)
ConstraintFn = Callable[[Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class Constraint:
    """A named cross-knob rule. ``check(setting)`` returns None or a message with the numbers. ``fixed``: the values
    of the knobs a sub-space leaves out (:meth:`KnobSpace.restrict`), seen by ``check`` under the setting's."""

    name: str
    check: ConstraintFn
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, setting: Mapping[str, Any]) -> str | None:
        return self.check({**self.fixed, **setting} if self.fixed else setting)


@dataclass(frozen=True)
class Derived:
    """A knob that follows others. ``rule(setting)`` is its value for that setting, or None to leave the value
    as it is (the rule does not apply, or no value works: the constraints then say why). ``always``: the knob is
    never proposed on its own (data parallel under a fixed world size); otherwise the rule maps only the values
    the framework ignores (recompute options without recompute) and the knob is searched elsewhere."""

    name: str
    rule: Callable[[Mapping[str, Any]], Any]
    always: bool = True


@dataclass(frozen=True)
class Violation:
    """One broken rule: which constraint (or knob) and the message that explains it."""

    constraint: str
    message: str

    def __str__(self) -> str:
        return self.message


class KnobSpace:
    """A set of knobs and the constraints between them.

    Usage::

        space = KnobSpace(knobs=[Knob(name="tp", kind="int", domain=[1, 2, 4])],
                          constraints=[lambda s: None if s["tp"] <= 2 else "tp must be <= 2"])
        space.validate({"tp": 4})   # -> [Violation(constraint="constraint[0]", message="tp must be <= 2")]
    """

    def __init__(self, knobs: Sequence[Knob], constraints: Iterable[ConstraintFn | Constraint] = (),
                 derived: Iterable[Derived] = ()) -> None:
        names = [k.name for k in knobs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"KnobSpace: knob names repeated: {sorted(dup)}")
        self.knobs: tuple[Knob, ...] = tuple(knobs)
        self._by_name = {k.name: k for k in self.knobs}
        self.constraints: tuple[Constraint, ...] = tuple(
            c if isinstance(c, Constraint) else Constraint(_name_of(c, i), c)
            for i, c in enumerate(constraints)
        )
        self.derived: tuple[Derived, ...] = tuple(d for d in derived if d.name in self._by_name)
        self._always = {d.name for d in self.derived if d.always}
        self.feature_names: list[str] = [
            f"{k.name}={v}" for k in self.knobs for v in k.domain if v != k.default
        ]
        self._col = {name: i for i, name in enumerate(self.feature_names)}

    # ----------------------------------------------------------------- access
    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def __getitem__(self, name: str) -> Knob:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.knobs)

    def size(self) -> int:
        """Number of points in the Cartesian product (before constraints)."""
        return math.prod(len(k.domain) for k in self.knobs)

    def default(self) -> Setting:
        return Setting({k.name: k.default for k in self.knobs})

    def complete(self, partial: Mapping[str, Any]) -> Setting:
        """Fill knobs the mapping does not mention with their defaults; values are normalized by the knob's
        kind (``sp=1`` of a bool knob is ``sp=True``), so a resumed or bank-seeded setting is the same
        setting, with the same hash, as the one the tuner proposes; derived knobs follow (:meth:`derive`)."""
        return self.derive({k.name: k.normalize(partial.get(k.name, k.default)) for k in self.knobs})

    def derive(self, setting: Mapping[str, Any]) -> Setting:
        """``setting`` with every derived knob set by its rule, in order (a rule sees the ones before it)."""
        s = dict(setting)
        for d in self.derived:
            v = d.rule(s)
            if v is not None:
                s[d.name] = self._by_name[d.name].normalize(v)
        return Setting(s)

    @property
    def free_knobs(self) -> tuple[Knob, ...]:
        """The knobs the space proposes values for (all but those a rule always derives)."""
        return tuple(k for k in self.knobs if k.name not in self._always)

    def restrict(self, domains: Mapping[str, Sequence[Any]], *, keep: Iterable[str] | None = None) -> "KnobSpace":
        """A sub-space: only knobs named in ``keep`` (default: those in ``domains``), each restricted to
        its domain there. Constraints are kept; they see the other knobs at their defaults."""
        keep_names = list(keep) if keep is not None else list(domains)
        unknown = [n for n in keep_names if n not in self._by_name]
        if unknown:
            raise ValueError(f"unknown knob(s) {unknown}; known: {self.names}")
        knobs = [self._by_name[n].with_domain(domains[n]) if n in domains else self._by_name[n] for n in keep_names]
        fixed = {k.name: k.default for k in self.knobs if k.name not in keep_names}
        merged: dict[int, Mapping[str, Any]] = {}  # one object per distinct earlier `fixed`: validate() merges once
        cons = [Constraint(c.name, c.check, merged.setdefault(id(c.fixed), {**c.fixed, **fixed}))
                for c in self.constraints]
        derived = [Derived(d.name, _with_fixed(d.rule, fixed), d.always) for d in self.derived if d.name in keep_names]
        return KnobSpace(knobs, cons, derived)

    # ------------------------------------------------------------- validation
    def validate(self, setting: Mapping[str, Any]) -> list[Violation]:
        """Every problem with ``setting``: unknown knobs, missing knobs, values outside a domain,
        broken constraints. An empty list means valid."""
        out: list[Violation] = []
        for name in setting:
            if name not in self._by_name:
                out.append(Violation("unknown_knob", f"unknown knob {name!r}; known: {', '.join(self.names)}"))
        for k in self.knobs:
            if k.name not in setting:
                out.append(Violation("missing_knob", f"knob {k.name!r} has no value; its default is {k.default!r}"))
            elif (bad := value_problem(k.name, k.kind, setting[k.name])) is not None:
                out.append(Violation("type", bad))
            elif setting[k.name] not in k.domain:
                out.append(Violation("domain", f"{k.name}={setting[k.name]!r} is not in its domain {list(k.domain)}"))
        if out:
            return out
        seen: dict[int, Mapping[str, Any]] = {}  # the setting under each sub-space's fixed values, merged once
        for c in self.constraints:
            full = setting
            if c.fixed:
                if id(c.fixed) not in seen:
                    seen[id(c.fixed)] = {**c.fixed, **setting}
                full = seen[id(c.fixed)]
            try:
                msg = c.check(full)
            except Exception as e:  # a constraint that crashes is a broken rule, not a crash of the tuner
                msg = f"constraint {c.name} failed to evaluate: {type(e).__name__}: {e}"
            if msg:
                out.append(Violation(c.name, msg))
        return out

    def is_valid(self, setting: Mapping[str, Any]) -> bool:
        return not self.validate(setting)

    # ---------------------------------------------------------------- drawing
    def sample(self, rng: random.Random | int | None = None, n: int = 1, *, max_tries: int = 10_000) -> list[Setting]:
        """``n`` distinct valid settings drawn uniformly from the product, rejecting invalid ones
        (fewer if the valid space is smaller or too sparse to find in ``max_tries`` draws)."""
        r = rng if isinstance(rng, random.Random) else random.Random(rng)
        seen: set[Setting] = set()
        out: list[Setting] = []
        for _ in range(max_tries):
            if len(out) >= n:
                break
            s = self.derive({k.name: r.choice(k.domain) if k.name not in self._always else k.default
                             for k in self.knobs})
            if s in seen:
                continue
            seen.add(s)
            if self.is_valid(s):
                out.append(s)
        return out

    def enumerate(self, limit: int = 100_000) -> Iterator[Setting]:
        """Valid settings of the product in a fixed order, at most ``limit`` of them considered."""
        names = self.names
        seen: set[Setting] = set()
        doms = [k.domain if k.name not in self._always else (k.default,) for k in self.knobs]
        for i, values in enumerate(itertools.product(*doms)):
            if i >= limit:
                return
            s = self.derive(dict(zip(names, values)))
            if s in seen:
                continue
            seen.add(s)
            if self.is_valid(s):
                yield s

    def candidates(self, n: int, rng: random.Random | int | None = None, *, max_steps: int | None = None) -> list[Setting]:
        """Up to ``n`` distinct valid settings: all of them when the product is small enough, else a sample.

        Rejection alone starves on a sparse space: with the parallel sizes tied to the world size, about
        1 product point in 100 is valid, so 10,000 draws find ~100. The sample is then grown by a random
        walk over the valid settings (re-draw 1-3 knobs, move if the result is valid). The proposal is
        symmetric and a move is accepted exactly when valid, so the walk's stationary law is uniform
        over the valid settings it can reach, like rejection sampling, at a fraction of its cost; short walks
        restarted from the rejection draws keep it from lingering where it started."""
        if math.prod(len(k.domain) for k in self.free_knobs) <= n:
            return list(self.enumerate(limit=n))
        r = rng if isinstance(rng, random.Random) else random.Random(rng)
        out = self.sample(r, n)
        if not out or len(out) >= n:
            return out
        seen = set(out)
        starts = list(out)  # uniform draws: restarting from them keeps the walk from lingering in one corner
        state = r.choice(starts)
        for step in range(max_steps if max_steps is not None else 50 * n):
            if len(out) >= n:
                break
            if step % 20 == 0:
                state = r.choice(starts)
            free = self.free_knobs
            change = {k.name: r.choice(k.domain) for k in r.sample(free, min(len(free), r.randint(1, 3)))}
            s = self.derive(state.replace(**change))
            if s in seen:
                state = s
            elif self.is_valid(s):
                seen.add(s)
                out.append(s)
                state = s
        return out

    def neighbors(self, setting: Mapping[str, Any], *, repair: bool = False) -> list[Setting]:
        """Valid settings that differ from ``setting`` in exactly one knob.

        ``repair=True`` adds moves that mend what a one-knob change breaks: up to ``REPAIR_DEPTH`` more
        changes, each of which must fix at least one broken rule (halving pipeline parallel is only valid
        when data parallel doubles; TP 2 -> 1 also needs sequence parallel and TP comm overlap off and DP
        doubled)."""
        base = self.complete(setting)
        out: list[Setting] = []
        broken: list[tuple[Setting, str, int]] = []
        moved: set[Setting] = {base}
        for k in self.free_knobs:
            for v in k.domain:
                if v != base[k.name]:
                    s = self.derive(base.replace(**{k.name: v}))
                    if s in moved:
                        continue  # a no-op (a value the framework ignores) or a move already made
                    moved.add(s)
                    n_bad = len(self.validate(s))
                    if n_bad:
                        broken.append((s, k.name, n_bad))
                    else:
                        out.append(s)
        if repair:
            seen = set(out) | {base}
            for depth in range(REPAIR_DEPTH):
                still: list[tuple[Setting, str, int]] = []
                for s, changed, n_bad in broken:
                    for k in self.free_knobs:
                        if k.name == changed:
                            continue
                        for v in k.domain:
                            if v == s[k.name] or base[k.name] != s[k.name]:
                                continue
                            t = self.derive(s.replace(**{k.name: v}))
                            if t in seen:
                                continue
                            m = len(self.validate(t))
                            if m == 0:
                                seen.add(t)
                                out.append(t)
                            elif m < n_bad:
                                still.append((t, changed, m))
                broken = list({t: (t, c, m) for t, c, m in still}.values())
        return out

    # --------------------------------------------------------------- encoding
    def encode(self, settings: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> np.ndarray:
        """One-hot of non-default values: shape (n_settings, len(feature_names)), float64."""
        rows = [settings] if isinstance(settings, Mapping) else list(settings)
        x = np.zeros((len(rows), len(self.feature_names)))
        for i, s in enumerate(rows):
            for k in self.knobs:
                v = s.get(k.name, k.default)
                if v != k.default:
                    j = self._col.get(f"{k.name}={v}")
                    if j is not None:
                        x[i, j] = 1.0
        return x

    def numeric_names(self) -> list[str]:
        return [f"log2({k.name})" for k in self.knobs if k.kind == "int" and all(v > 0 for v in k.domain)]

    def encode_numeric(self, settings: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """log2(value / default) for every positive int knob: shape (n, len(numeric_names()))."""
        ks = [k for k in self.knobs if k.kind == "int" and all(v > 0 for v in k.domain)]
        x = np.zeros((len(settings), len(ks)))
        for i, s in enumerate(settings):
            for j, k in enumerate(ks):
                x[i, j] = math.log2(s.get(k.name, k.default) / k.default)
        return x


def _name_of(fn: ConstraintFn, i: int) -> str:
    name = getattr(fn, "__name__", "")
    return name if name and name != "<lambda>" else f"constraint[{i}]"


def _with_fixed(c: Callable[[Mapping[str, Any]], Any], fixed: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Any]:
    def check(s: Mapping[str, Any]) -> str | None:
        return c({**fixed, **dict(s)})

    return check
