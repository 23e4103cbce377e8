"""The one transformer model: shapes from any framework's spelling, parameter counts, FLOPs, memory terms."""

from __future__ import annotations

import pytest

from infrarsi.bank import signature_from
from infrarsi.knobs import KnobSpace, catalog
from infrarsi.priors.offline import offline_priors
from infrarsi.report.mfu import flops_per_step
from infrarsi.transformer import (
    ALIASES,
    CAUSAL_MATMULS,
    FULL_ACTIVE,
    Layout,
    Training,
    Transformer,
    canonical,
    data_parallel,
    memory_terms,
    resolve,
)
from infrarsi.workloads import simulated as sim

LLAMA8B = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
               vocab_size=128256, seq_length=8192, global_batch_size=128, swiglu=True)


@pytest.mark.parametrize("name", sorted(sim.WORKLOADS))
def test_the_simulators_model_spec_has_the_same_counts_and_flops(name):
    spec = sim.WORKLOADS[name].model
    t = Transformer.from_args(spec.model_dump())
    assert t.param_counts() == sim.param_counts(spec)
    assert t.flops_per_iteration() == pytest.approx(sim.model_flops_per_iteration(spec), rel=1e-12)


def test_every_frameworks_spelling_gives_the_same_shape():
    torchtitan = dict(n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, vocab_size=128256, seq_len=8192,
                      global_batch_size=128, ffn_hidden_size=14336, swiglu=True)
    hf = dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
              intermediate_size=14336, vocab_size=128256, max_seq_len=8192, global_batch_size=128, swiglu=True)
    ref = Transformer.from_args(LLAMA8B)
    assert Transformer.from_args(torchtitan) == ref == Transformer.from_args(hf)
    assert ref.kv_groups == 8 and ref.kv_width == 1024
    # the bank signature and the offline memory priors read the same table: GQA is seen by both
    assert signature_from(hf).num_query_groups == 8 == signature_from(torchtitan).num_query_groups
    space = KnobSpace([catalog.knob("tensor_parallel"), catalog.knob("recompute_granularity")], [])
    hw = {"kind": "H100", "devices": 8}
    assert offline_priors(space, workload=hf, hardware=hw) == offline_priors(space, workload=LLAMA8B, hardware=hw)
    assert offline_priors(space, workload={**hf, "num_key_value_heads": 32}, hardware=hw) != \
        offline_priors(space, workload=hf, hardware=hw)


@pytest.mark.parametrize("args", [LLAMA8B, {**LLAMA8B, "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1024,
                                            "moe_shared_expert_intermediate_size": 2048}])
def test_megatron_args_round_trip(args):
    t = Transformer.from_args(args)
    assert Transformer.from_args(t.to_args()) == t
    assert signature_from(t) == signature_from(args)


def test_resolve_prefers_the_megatron_name_and_reports_the_spelling():
    found = resolve({"n_kv_heads": 4, "num_query_groups": 8, "n_embd": 64})
    assert found["num_query_groups"] == ("num_query_groups", 8) and found["hidden_size"] == ("n_embd", 64)
    assert canonical({"n_embd": 64, "lr": 1e-3}) == {"hidden_size": 64, "lr": 1e-3}
    assert len({s for names in ALIASES.values() for s in names}) == sum(len(v) for v in ALIASES.values())  # unambiguous
    with pytest.raises(ValueError, match=r"num_query_groups \(n_kv_heads='eight'\): expected an integer"):
        Transformer.from_args({"n_kv_heads": "eight"})


def test_flop_conventions_differ_by_the_causal_discount_and_the_counted_parameters():
    t = Transformer.from_args(dict(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100,
                                   seq_length=32, global_batch_size=2, untie_embeddings_and_output_weights=True))
    # per layer: attention 4 h^2 = 16384, GELU MLP 2 h 4h = 32768; output head h V = 6400
    n_mm = 2 * (16384 + 32768) + 6400
    assert t.matmul_params() == n_mm
    assert t.flops_per_token() == 6 * n_mm + 6 * 2 * 32 * 64  # causal: 12 L s h halved
    # torchtitan: every parameter but the input embedding (the untied head and the norms included), no discount
    n_tt = t.param_counts()["total"] - 64 * 100
    assert n_tt == n_mm + 2 * 2 * 64 + 64
    assert t.flops_per_token(convention=FULL_ACTIVE) == 6 * n_tt + 12 * 2 * 32 * 64
    assert t.flops_per_token(convention=CAUSAL_MATMULS) == t.flops_per_token()


def test_moe_counts_the_routed_experts_only_in_flops():
    dense = Transformer.from_args(LLAMA8B)
    moe = Transformer.from_args({**LLAMA8B, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert moe.is_moe and moe.topk == 2
    assert moe.matmul_params() - dense.matmul_params() == pytest.approx(32 * 3 * 4096 * 14336)  # one more expert
    assert moe.param_counts()["total"] > 5 * dense.param_counts()["total"] / 2
    # the report's MFU uses the same count the simulator logs
    assert flops_per_step({**LLAMA8B, "num_experts": 8, "moe_router_topk": 2}, "megatron")[0] == pytest.approx(
        moe.flops_per_iteration(), rel=1e-12)


def test_activation_terms_are_korthikantis_formula():
    # GELU, f = 4h, unfused attention, one micro-batch, no parallelism: s b h (34 + 5 a s / h) per layer
    s, h, a, L, V = 1024, 512, 8, 4, 1000
    t = Transformer(layers=L, hidden=h, heads=a, vocab=V, seq=s)
    tr = Training(flash_attention=False)
    one = memory_terms(t, Layout(), tr)
    assert one.activations == pytest.approx(L * s * h * (34 + 5 * a * s / h))
    # tensor parallel 2 without SP: 10 + 24/t + 5as/(ht)
    two = memory_terms(t, Layout(tp=2), tr)
    assert two.activations == pytest.approx(L * s * h * (10 + 24 / 2 + 5 * a * s / (h * 2)))
    # selective recompute drops the scores term; states are 18 bytes per parameter, 6 + 12/dp when sharded
    sel = memory_terms(t, Layout(), Training(flash_attention=False, recompute="selective"))
    assert sel.activations == pytest.approx(L * s * h * 34)
    n = L * 12 * h * h + V * h
    assert one.states == pytest.approx(18 * n)
    assert memory_terms(t, Layout(dp=4), Training(distributed_optimizer=True)).states == pytest.approx((6 + 3) * n)


def test_data_parallel_is_world_over_the_model_parallel_product():
    assert data_parallel(64, 4, 2, 2) == 4
    assert data_parallel(8, 3) is None
    assert data_parallel(8) == 8


def test_offline_shape_falls_back_to_the_7b_class_default_for_what_it_cannot_read():
    from infrarsi.priors.offline import shape_of

    t = shape_of({"hidden_size": "big", "n_layers": 8, "n_kv_heads": 4})
    assert (t.hidden, t.layers, t.groups, t.seq, t.vocab) == (4096, 8, 4, 4096, 32000)
