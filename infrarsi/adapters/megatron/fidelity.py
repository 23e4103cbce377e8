"""Megatron's fidelity count (:mod:`infrarsi.adapters.fidelity`): round trips read back by Megatron's argument names
and megatron-core's config (:mod:`.equivalence`); a refused setting put to megatron-core (``TransformerConfig``,
process groups) and ``validate_args``' asserts (:func:`.check.megatron_args_check`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...knobs import Setting
from ..fidelity import Counts, moved


def counts(p, settings: list[Mapping[str, Any]], refused: list[Mapping[str, Any]], *, world: int | None,
           why: Mapping[Setting, str] | None = None) -> Counts:
    """``p``: the parsed launch (``MegatronLaunch``). ``world`` is unused: the launch states its own
    (``p.world_size``), which the checks read."""
    from .check import check_megatron, megatron_args_check
    from .emit import emit_megatron
    from .equivalence import compare, reading

    c = Counts()
    before = reading(p.argv(), p.env)
    for s in settings:
        spec = emit_megatron(p, s)
        d = compare(p, spec.argv, spec.env, s, before=before)
        c.round_trips += 1
        c.equal += not d
        if d:
            c.examples.append(f"round trip {moved(p.setting, s)}: {d[0]}")
    for s in refused:
        c.sampled_refused += 1
        words = check_megatron(p, s) + megatron_args_check(p.fixed, s, world_size=p.world_size)
        if p.world_size and s.get("data_parallel") is None:
            words.append("world not divisible")
        if not words:
            c.false_invalid += 1
            c.examples.append(f"false-invalid {moved(p.setting, s)}: the space says {(why or {}).get(s, '?')}")
    return c
