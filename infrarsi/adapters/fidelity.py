"""How faithful a launch's knob space is to its framework, counted on a launch: round trips and false refusals.

- Round trips: the launch's own setting, every valid one-knob neighbour and a sample of valid settings are
  emitted and compared with the user's launch by the framework's own config code (:mod:`.equivalence`); a
  round trip is equal when only the fields of the knobs the setting changed (and output locations) differ.
- False-invalid: settings drawn from the space (free knobs at random, derived knobs following) that the space
  refuses are put to the framework; one the framework accepts is a setting the search could never find.

Each framework's word is its own (``FrameworkSpec.fidelity``, in ``adapters/<framework>/fidelity.py``): Megatron's
is megatron-core's (``TransformerConfig``, process groups) plus ``validate_args``' asserts; torchtitan's is its
``ConfigManager``, ``ParallelDims`` (0.2.x in-process, 0.3.x from its target directory) and its pipeline split.

``scripts/check_launch_space.py --equivalence`` prints both counts for every launch fixture.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..knobs import KnobSpace, Setting


@dataclass
class Counts:
    round_trips: int = 0
    equal: int = 0
    sampled_refused: int = 0
    false_invalid: int = 0
    examples: list[str] = field(default_factory=list)


def draws(space: KnobSpace, rng: random.Random, n: int) -> list[Setting]:
    """``n`` distinct settings as the space proposes them: free knobs at random, derived knobs following."""
    out: dict[Setting, None] = {}
    for _ in range(20 * n):
        if len(out) >= n:
            break
        s = space.derive({k.name: rng.choice(k.domain) if k in space.free_knobs else k.default for k in space.knobs})
        out.setdefault(s, None)
    return list(out)


def moved(base: Mapping[str, Any], s: Mapping[str, Any]) -> str:
    """The knobs ``s`` moves from ``base``, as an example names them: ``{tensor_parallel=4, data_parallel=2}``."""
    return "{" + ", ".join(f"{k}={v}" for k, v in s.items() if base.get(k) != v) + "}"


def count(kind: str, p, space: KnobSpace, *, world: int | None, sample: int, refused_sample: int,
          seed: int = 0) -> Counts:
    """Round trips of the launch's own setting, its valid neighbours and ``sample`` valid settings; false
    refusals among ``refused_sample`` draws the space refuses. ``kind``: the framework (``workload.adapter``);
    ``world``: the ranks (None: the launch's own, ``p.world_size``)."""
    from .registry import spec

    counts = spec(kind).fidelity
    if counts is None:
        raise ValueError(f"{kind}: its spec has no fidelity count (FrameworkSpec.fidelity): it emits no launch to "
                         f"read back")
    rng = random.Random(seed)
    base = space.complete(p.setting)
    valid = [dict(p.setting)] + space.neighbors(base) + space.sample(rng, n=sample)
    refused: list[Setting] = []
    why: dict[Setting, str] = {}
    for s in draws(space, rng, 40 * refused_sample):
        if len(refused) >= refused_sample:
            break
        bad = space.validate(s)
        if bad:
            refused.append(s)
            why[s] = "; ".join(v.message for v in bad)
    return counts(p, valid, refused, world=world or p.world_size, why=why)
