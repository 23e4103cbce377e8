"""What a knob means (search/meaning.py): the catalog's names, a user's short spellings, the frameworks' flags, and
``Knob(means=...)``; what the search holds about a catalog knob then applies to the user's."""

import numpy as np
import pytest

from infrarsi.knobs import Knob, KnobSpace
from infrarsi.search import Tuner
from infrarsi.search.meaning import interactions, meanings, resolve

CAP = 80e9


def _knobs(names: dict[str, str | None]) -> list[Knob]:
    """tp / recompute / seq_par / mbs shaped knobs under the given names (and means)."""
    kinds = [dict(kind="int", domain=[1, 2, 4, 8]), dict(kind="categorical", domain=["none", "selective", "full"]),
             dict(kind="bool"), dict(kind="int", domain=[1, 2, 4])]
    return [Knob(name=n, means=m, **k) for (n, m), k in zip(names.items(), kinds)]


def test_catalog_names_short_spellings_and_framework_flags_resolve():
    assert resolve("tensor_parallel") == "tensor_parallel"
    assert resolve("tp") == resolve("TP") == resolve("--tensor-model-parallel-size") == "tensor_parallel"
    assert resolve("parallelism.pipeline_parallel_degree") == "pipeline_parallel"
    assert resolve("mbs") == "micro_batch_size" and resolve("seq_par") == "sequence_parallel"
    assert resolve("recompute") == "recompute_granularity" and resolve("--use-distributed-optimizer") == \
        "distributed_optimizer"
    assert resolve("k0") is None


def test_the_readme_example_knobs_mean_catalog_knobs_and_opaque_ones_do_not():
    space = KnobSpace(_knobs({"tp": None, "recompute": None, "seq_par": None, "mbs": None}))
    assert meanings(space) == {"tp": "tensor_parallel", "recompute": "recompute_granularity",
                               "seq_par": "sequence_parallel", "mbs": "micro_batch_size"}
    assert meanings(KnobSpace(_knobs({"k0": None, "k1": None, "k2": None, "k3": None}))) == {}


def test_means_names_what_an_opaque_knob_is_and_is_checked():
    space = KnobSpace(_knobs({"k0": "tensor_parallel", "k1": "recompute", "k2": None, "k3": "--micro-batch-size"}))
    assert meanings(space) == {"k0": "tensor_parallel", "k1": "recompute_granularity", "k3": "micro_batch_size"}
    with pytest.raises(ValueError, match=r"means='tensor_paralel' is not a catalog knob.*did you mean 'tensor_parallel'"):
        meanings(KnobSpace(_knobs({"k0": "tensor_paralel", "k1": None, "k2": None, "k3": None})))
    with pytest.raises(ValueError, match=r"means='tensor_parallel' \(tensor_parallel, an int knob.*is bool"):
        meanings(KnobSpace(_knobs({"k0": None, "k1": None, "k2": "tensor_parallel", "k3": None})))
    with pytest.raises(ValueError, match="another knob of the space already means"):
        meanings(KnobSpace(_knobs({"k0": "tp", "k1": None, "k2": None, "k3": "tensor_parallel"})[:1]
                           + [Knob(name="k9", kind="int", domain=[1, 2], means="tp")]))


def test_a_spelling_of_another_kind_or_taken_is_left_unmeant():
    space = KnobSpace([Knob(name="recompute", kind="bool"),  # the catalog's recompute is categorical
                       Knob(name="tensor_parallel", kind="int", domain=[1, 2]),
                       Knob(name="tp", kind="int", domain=[1, 2])])  # tensor_parallel is taken by its own name
    assert meanings(space) == {"tensor_parallel": "tensor_parallel"}


def test_a_meaning_carries_the_semantics_the_memory_structure_and_the_interactions():
    named = Tuner(KnobSpace(_knobs({"tensor_parallel": None, "recompute_granularity": None,
                                    "sequence_parallel": None, "micro_batch_size": None})),
                  memory_capacity_bytes=CAP, seed=0, config=None)
    meant = Tuner(KnobSpace(_knobs({"k0": "tp", "k1": "recompute", "k2": "seq_par", "k3": "mbs"})),
                  memory_capacity_bytes=CAP, seed=0)
    opaque = Tuner(KnobSpace(_knobs({"k0": None, "k1": None, "k2": None, "k3": None})),
                   memory_capacity_bytes=CAP, seed=0)
    rename = dict(zip(["tensor_parallel", "recompute_granularity", "sequence_parallel", "micro_batch_size"],
                      ["k0", "k1", "k2", "k3"]))
    # step-time semantics: the same beliefs, about the user's knob
    sem = lambda t: sorted((p.knob, p.value, p.time_mean) for p in t.priors if p.source == "semantic")  # noqa: E731
    assert sem(meant) == sorted((rename[k], v, m) for k, v, m in sem(named)) and sem(named)
    assert sem(opaque) == []
    # the memory structure's prior powers: the same, column for column; none without a meaning
    assert np.array_equal(meant.memory.prior, named.memory.prior) and np.abs(named.memory.prior).sum() > 0
    assert opaque.memory.prior is None or not np.abs(opaque.memory.prior).any()
    # the additive models' interaction columns (micro-batch x recompute, tp x sequence parallel)
    assert interactions(meant.encoder.model_space, meant.meanings) == [("k3", "k1"), ("k0", "k2")]
    assert interactions(opaque.encoder.model_space, opaque.meanings) == []
    assert len(meant.time_model.design.interaction_names) == len(named.time_model.design.interaction_names) > 0
