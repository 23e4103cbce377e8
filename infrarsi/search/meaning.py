"""Meaning: which catalog knob (``knobs/catalog.py``) each knob of a space is, whatever the space calls it.

What the search holds about a knob before any trial (the step-time semantics, :mod:`.semantics`; which knobs split or
scale memory, :mod:`.structured`; the additive models' interaction columns, ``models/_design.py``; the pipeline bubble,
:mod:`.bubble`) is stated for the catalog's knobs. A space's knob has a meaning when

1. it says so: ``Knob(name="tp", kind="int", domain=[1, 2, 4, 8], means="tensor_parallel")`` (a catalog name or any
   spelling below; an unknown one is an error that names the close matches);
2. its name is a catalog name (``tensor_parallel``);
3. its name, lower-cased with dashes and dots as underscores, is a common spelling (:data:`ALIASES`: ``tp``, ``pp``,
   ``mbs``, ``recompute``, ``seq_par``...) or one of the frameworks' own (``--tensor-model-parallel-size``,
   ``parallelism.tensor_parallel_degree``) -- when the knob's kind is the catalog knob's and no other knob took it.

A knob with none is learned from trials alone, as every knob is: a meaning is a prior that helps, never a requirement
(``bench_search.py --names opaque`` scores the search with none at all). Categorical values are matched as the catalog
spells them (``"selective"``, ``"full"``).

    m = meanings(space)            # {knob name: catalog name} for the knobs that have one
    by = named(m)           # {catalog name: knob name}: where a statement about "tensor_parallel" lands
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from functools import cache

from ..knobs import KnobSpace, catalog
from ..models import DEFAULT_INTERACTIONS

# Short spellings users write, and what they mean (the frameworks' own flags and fields are added from their
# spelling tables, each framework's spec's).
ALIASES: dict[str, str] = {
    **dict.fromkeys(("tp", "tp_size", "tensor_parallel_size", "tensor_model_parallel_size", "tensor_parallel_degree"),
                    "tensor_parallel"),
    **dict.fromkeys(("pp", "pp_size", "pipeline_parallel_size", "pipeline_model_parallel_size",
                     "pipeline_parallel_degree"), "pipeline_parallel"),
    **dict.fromkeys(("vpp", "vp", "virtual_pipeline_stages", "virtual_pipeline_model_parallel_size",
                     "num_virtual_stages_per_pipeline_rank"), "virtual_pipeline"),
    **dict.fromkeys(("cp", "cp_size", "context_parallel_size", "context_parallel_degree"), "context_parallel"),
    **dict.fromkeys(("ep", "ep_size", "expert_parallel_size", "expert_model_parallel_size", "expert_parallel_degree"),
                    "expert_parallel"),
    **dict.fromkeys(("dp", "dp_size", "data_parallel_size", "data_parallel_degree", "data_parallel_shard_degree"),
                    "data_parallel"),
    **dict.fromkeys(("mbs", "micro_batch", "microbatch", "micro_bs", "microbatch_size", "local_batch_size"),
                    "micro_batch_size"),
    **dict.fromkeys(("sp", "seq_par", "seq_parallel", "sequence_parallelism", "enable_sequence_parallel"),
                    "sequence_parallel"),
    **dict.fromkeys(("recompute", "recomputation", "activation_checkpointing", "activation_checkpoint", "act_ckpt",
                     "ac", "ac_mode", "activation_checkpoint_mode"), "recompute_granularity"),
    **dict.fromkeys(("dist_opt", "distopt", "distributed_optim", "use_distributed_optimizer", "zero1"),
                    "distributed_optimizer"),
    **dict.fromkeys(("fp8", "fp8_mode", "float8", "float8_recipe"), "fp8_recipe"),
    **dict.fromkeys(("bfloat16", "use_bf16"), "bf16"),
    **dict.fromkeys(("tp_overlap", "tp_comm", "tp_comm_overlap_enabled"), "tp_comm_overlap"),
    **dict.fromkeys(("overlap_grad", "overlap_grad_reduction", "grad_overlap"), "overlap_grad_reduce"),
    **dict.fromkeys(("overlap_param", "overlap_params", "param_overlap", "overlap_param_allgather"),
                    "overlap_param_gather"),
    **dict.fromkeys(("dispatcher", "token_dispatcher", "moe_dispatcher", "moe_token_dispatcher_type"),
                    "moe_token_dispatcher"),
    **dict.fromkeys(("grouped_gemm", "moe_grouped"), "moe_grouped_gemm"),
}


def spell(name: str) -> str:
    """A name as the alias table keys it: lower case, no leading dashes, dashes and dots as underscores."""
    return name.strip().lstrip("-").lower().replace("-", "_").replace(".", "_")


@cache
def table() -> dict[str, str]:
    """Every spelling -> catalog name: the catalog's names, :data:`ALIASES`, each registered framework's flag or field
    (whole, and its last dotted part when that has two words or more; the frameworks' tables, read once, on first
    use) and each environment knob's variable."""
    from ..adapters.registry import specs

    tables = [s.spelling for s in specs()]
    out = {spell(k): v for k, v in ALIASES.items()}
    for k in catalog.knobs_for(None):
        out[k.name] = k.name
        for sp in [*(t.get(k.name) for t in tables), k.env]:
            if not sp:
                continue
            out.setdefault(spell(sp), k.name)
            last = sp.rsplit(".", 1)[-1]
            if "_" in last:
                out.setdefault(spell(last), k.name)
    return out


def resolve(word: str) -> str | None:
    """The catalog name a spelling stands for, or None."""
    return table().get(spell(word))


def meanings(space: KnobSpace) -> dict[str, str]:
    """{knob name: catalog name} for the knobs of ``space`` that have a meaning (module docstring); a knob's ``means``
    that is no catalog knob, or whose catalog knob is of another kind, is a ValueError naming the fix."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for k in space.knobs:  # 1. what the knobs say
        if k.means is None:
            continue
        m = resolve(k.means)
        if m is None:
            close = difflib.get_close_matches(spell(k.means), sorted(table()), n=3)
            raise ValueError(f"knob {k.name!r}: means={k.means!r} is not a catalog knob or a known spelling of one"
                             f"{'; did you mean ' + ' or '.join(map(repr, close)) if close else ''} (catalog: "
                             f"{', '.join(x.name for x in catalog.knobs_for(None))})")
        kind = catalog.knob(m).kind
        if kind != k.kind:
            raise ValueError(f"knob {k.name!r}: means={k.means!r} ({m}, {'an' if kind == 'int' else 'a'} {kind} knob in "
                             f"the catalog) but {k.name!r} is {k.kind}; give it kind={kind!r} or drop means")
        if m in taken:
            raise ValueError(f"knob {k.name!r}: means={k.means!r}, which another knob of the space already means ({m})")
        out[k.name] = m
        taken.add(m)
    for exact in (True, False):  # 2. catalog names, 3. spellings
        for k in space.knobs:
            if k.name in out:
                continue
            m = k.name if exact and table().get(k.name) == k.name else None if exact else resolve(k.name)
            if m is None or m in taken or catalog.knob(m).kind != k.kind:
                continue
            out[k.name] = m
            taken.add(m)
    return out


def named(meaning: Mapping[str, str]) -> dict[str, str]:
    """{catalog name: knob name}: the inverse of :func:`meanings`."""
    return {m: k for k, m in meaning.items()}


def interactions(space: KnobSpace, meaning: Mapping[str, str]) -> list[tuple[str, ...]]:
    """The additive models' interaction columns (``models.DEFAULT_INTERACTIONS``, stated for catalog knobs) whose
    knobs all have a meaning in ``space``, in the space's names."""
    by = named(meaning)
    return [tuple(by[m] for m in t) for t in DEFAULT_INTERACTIONS if all(m in by and by[m] in space for m in t)]
