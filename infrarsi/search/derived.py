"""derived_knobs: the knobs a space's other knobs determine (data parallel = world / (tp * pp * cp)). The models
leave them out: a determined knob is collinear with the ones that determine it and would smear their effects.

Which knob of a coupled group is left out matters to the models (any one of tp, pp, cp, dp is determined by the other
three, but the additive models' per-value effects and the GPs' per-knob rates are stated on the ones kept), and it
must not depend on the knobs' names or their order in the space: the one left out is the one that spans the most
values (the remainder of a product takes every divisor of it, while the split sizes are capped by a node, the layers,
the heads), and among equals the one whose default is its largest value (the default setting gives it the whole
product)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ..knobs import Knob, KnobSpace, Setting


def _order(space: KnobSpace) -> list[Knob]:
    """The knobs in the order they are checked (the first of a coupled group checked is the derived one): most values
    first, then those whose default is their largest value, then the last listed first."""
    def key(i_k: tuple[int, Knob]) -> tuple[int, bool, int]:
        i, k = i_k
        dom = list(k.domain)
        try:
            at_top = k.default == max(dom)
        except TypeError:  # values that do not compare
            at_top = False
        return (-len(dom), not at_top, -i)

    return [k for _, k in sorted(enumerate(space.knobs), key=key)]


def derived_knobs(space: KnobSpace, pool: Sequence[Setting], sample: int = 200) -> set[str]:
    """Knobs the others determine (data parallel = world / (tp * pp * cp)): for every pooled setting checked,
    no other value of the knob is valid, even letting the knobs already found derived follow. Checked in
    :func:`_order`, so of a coupled group the knob with the most values is the derived one."""
    derived: list[str] = []
    probe = list(pool[:sample])
    for k in _order(space):
        if len(k.domain) < 2 or not probe:
            continue
        follow = [space[d].domain for d in derived]

        def movable(s: Setting) -> bool:
            for v in k.domain:
                if v == s[k.name]:
                    continue
                for ws in itertools.product(*follow):
                    if space.is_valid(s.replace(**{k.name: v, **dict(zip(derived, ws))})):
                        return True
            return False

        if not any(movable(s) for s in probe):
            derived.append(k.name)
    return set(derived)

