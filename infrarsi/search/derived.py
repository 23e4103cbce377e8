"""derived_knobs: the knobs a space's other knobs determine (data parallel = world / (tp * pp * cp)). The models
leave them out: a determined knob is collinear with the ones that determine it and would smear their effects."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ..knobs import KnobSpace, Setting


def derived_knobs(space: KnobSpace, pool: Sequence[Setting], sample: int = 200) -> set[str]:
    """Knobs the others determine (data parallel = world / (tp * pp * cp)): for every pooled setting checked,
    no other value of the knob is valid, even letting the knobs already found derived follow. Checked from the
    last knob back, so the one listed last of a coupled group is the derived one."""
    derived: list[str] = []
    probe = list(pool[:sample])
    for k in reversed(space.knobs):
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
