"""The knob catalog: names, per-framework spaces, domains fitted to the workload, and constraint
messages that show the arithmetic."""

import random

import pytest

from infrarsi.knobs.catalog import (
    KNOB_NAMES,
    build_knob_space,
    check_setting,
    knob,
    knobs_for,
    space_for_fixed,
)
from infrarsi.adapters.registry import spec

MG, TT = spec("megatron"), spec("torchtitan")
MEGATRON = dict(spelling=MG.spelling, framework=MG.title)  # what the Megatron adapter hands the catalog

REQUIRED = [
    "tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel", "expert_parallel",
    "data_parallel", "micro_batch_size", "sequence_parallel", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather",
    "tp_comm_overlap", "bf16", "fp8_recipe", "attention_backend", "moe_token_dispatcher", "moe_grouped_gemm",
    "cross_entropy_fusion", "manual_gc", "torch_compile", "async_tp", "fsdp_reshard_after_forward",
    "cpu_offload", "num_workers", "nccl_min_nchannels", "nccl_algo",
]

# Llama 3 8B on one node of 8 GPUs
LLAMA8B = dict(num_layers=32, num_attention_heads=32, num_query_groups=8, seq_length=8192,
               global_batch_size=128, world_size=8)


def test_catalog_has_the_agreed_names_and_domains():
    assert set(REQUIRED) <= set(KNOB_NAMES)
    assert knob("recompute_granularity").domain == ("none", "selective", "full")
    assert knob("recompute_granularity").default == "none"
    assert knob("fp8_recipe").default == "none"
    assert knob("virtual_pipeline").default == 1
    assert MG.spelling.get("tensor_parallel") == "--tensor-model-parallel-size"
    assert TT.spelling.get("tensor_parallel") == "parallelism.tensor_parallel_degree"
    assert knob("nccl_algo").env == "NCCL_ALGO" and MG.spelling.written(knob("nccl_algo")) == "env:NCCL_ALGO"
    assert TT.spelling.get("virtual_pipeline") is None and TT.spelling.written(knob("virtual_pipeline")) is None
    with pytest.raises(KeyError, match="no catalog knob 'tp'"):
        knob("tp")


def test_framework_spaces_hold_only_what_the_framework_can_say():
    mg = {k.name for k in knobs_for(MG.spelling)}
    tt = {k.name: k for k in knobs_for(TT.spelling)}
    assert "torch_compile" not in mg and "virtual_pipeline" in mg and "data_parallel" in mg
    assert "virtual_pipeline" not in tt and "torch_compile" in tt
    assert tt["bf16"].default is True  # torchtitan trains in bf16 unless told otherwise
    assert "delayed" not in tt["fp8_recipe"].domain and "rowwise" in tt["fp8_recipe"].domain


def test_domains_follow_the_workload():
    s = build_knob_space(**LLAMA8B, **MEGATRON)
    assert s["tensor_parallel"].domain == (1, 2, 4, 8)
    assert s["data_parallel"].default == 8  # tp = pp = cp = 1
    assert s["expert_parallel"].domain == (1,)  # dense model
    assert s["moe_token_dispatcher"].domain == ("allgather",)
    assert max(s["micro_batch_size"].domain) <= 16 and all(128 % m == 0 for m in s["micro_batch_size"].domain)
    moe = build_knob_space(num_layers=32, num_attention_heads=32, num_query_groups=8, num_experts=8,
                           seq_length=4096, global_batch_size=256, world_size=32, **MEGATRON)
    assert moe["expert_parallel"].domain == (1, 2, 4, 8)
    assert moe["moe_token_dispatcher"].domain == ("allgather", "alltoall", "flex")
    # a launch outside the usual values is kept in the domain, so its constraint can explain it
    odd = build_knob_space(**LLAMA8B, include={"tensor_parallel": 3})
    assert 3 in odd["tensor_parallel"].domain


@pytest.mark.parametrize("change, constraint, text", [
    (dict(tensor_parallel=3, data_parallel=1), "tp_divides_heads", "tensor parallel 3 does not divide 32 attention heads (32 % 3 = 2)"),
    (dict(tensor_parallel=3, data_parallel=1), "world_size_product", "tp(3) * pp(1) * cp(1) * dp(1) = 3 != world_size(8)"),
    (dict(tensor_parallel=1, pipeline_parallel=8, data_parallel=1, virtual_pipeline=3),
     "virtual_pipeline_fits", "32 layers are not divisible by pp * vp = 8 * 3 = 24 (32 % 24 = 8)"),
    (dict(context_parallel=8, data_parallel=1), "global_batch_divisible", None),
    (dict(sequence_parallel=True), "sequence_parallel_needs_tp", "sequence_parallel needs tensor_parallel > 1 (tp = 1)"),
    (dict(overlap_param_gather=True, overlap_grad_reduce=True), "overlap_param_gather_needs", "needs distributed_optimizer"),
    (dict(fp8_recipe="delayed", bf16=False), "fp8_needs_bf16", None),  # fp8 with fp32 params: both frameworks accept it
    (dict(micro_batch_size=16, data_parallel=8, recompute_granularity="full", recompute_num_layers=64),
     "recompute_layers_fit", "recompute_num_layers 64 is more than the 32 layers per (virtual) pipeline stage"),
])
def test_constraints_name_the_numbers(change, constraint, text):
    space = build_knob_space(**LLAMA8B, **MEGATRON, include=change)
    setting = space.default().replace(**change)
    found = {v.constraint: v.message for v in space.validate(setting)}
    if text is None:
        assert constraint not in found  # this change is legal
    else:
        assert constraint in found, found
        assert text in found[constraint]


def test_other_rules_with_numbers():
    s = build_knob_space(num_layers=30, num_attention_heads=32, num_query_groups=8, num_experts=8,
                         seq_length=4097, global_batch_size=100, world_size=24, include={"expert_parallel": 3})
    base = dict(s.default())
    msgs = [v.message for v in s.validate({**base, "pipeline_parallel": 4, "data_parallel": 6})]
    assert any("pipeline parallel 4 does not divide 30 layers (30 % 4 = 2)" in m for m in msgs)
    msgs = [v.message for v in s.validate({**base, "context_parallel": 2, "data_parallel": 12})]
    assert any("seq_length divisible by 2*cp = 4 (4097 % 4 = 1)" in m for m in msgs)
    msgs = [v.message for v in s.validate({**base, "expert_parallel": 3, "data_parallel": 24})]
    assert any("expert parallel 3 does not divide 8 experts (8 % 3 = 2)" in m for m in msgs)
    msgs = [v.message for v in s.validate({**base, "micro_batch_size": 2, "data_parallel": 24})]
    assert any("global batch 100 is not divisible by micro batch 2 * data parallel 24 = 48 (100 % 48 = 4)" in m for m in msgs)
    # uneven first/last stages lift the PP-divides-layers rule
    s2 = space_for_fixed({"num_layers": 30, "num_attention_heads": 32, "decoder_first_pipeline_num_layers": 6},
                         world_size=4)
    assert not [v for v in s2.validate({**dict(s2.default()), "pipeline_parallel": 4, "data_parallel": 1})
                if v.constraint == "pp_divides_layers"]


def test_fp16_workload_forbids_bf16_and_unknown_dp_is_skipped():
    s = space_for_fixed({"num_layers": 96, "num_attention_heads": 96, "fp16": True}, world_size=None, **MEGATRON)
    viol = check_setting(s, {**dict(s.default()), "bf16": True, "data_parallel": None})
    assert [v.constraint for v in viol] == ["bf16_not_with_fp16"]


def test_sampled_settings_are_valid_and_default_is_valid():
    space = build_knob_space(**LLAMA8B, **MEGATRON)
    assert space.is_valid(space.default())
    got = space.sample(random.Random(0), n=20)
    assert len(got) == 20 and all(space.is_valid(s) for s in got)
    prod = {s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"] * s["data_parallel"] for s in got}
    assert prod == {8}


def test_fp8_recipes_follow_the_contracts_device():
    """mxfp8 needs SM100: an H100 contract never offers it; B200 does; an unknown device narrows nothing."""
    h100 = space_for_fixed({"num_layers": 32, "num_attention_heads": 32}, world_size=8, **MEGATRON,
                           device="H100-80GB")
    assert "mxfp8" not in h100["fp8_recipe"].domain and "delayed" in h100["fp8_recipe"].domain
    b200 = space_for_fixed({"num_layers": 32, "num_attention_heads": 32}, world_size=8, **MEGATRON,
                           device="B200")
    assert "mxfp8" in b200["fp8_recipe"].domain
    a100 = space_for_fixed({"num_layers": 32, "num_attention_heads": 32}, world_size=8, **MEGATRON,
                           device="A100", include={"fp8_recipe": "delayed"})
    assert a100["fp8_recipe"].domain == ("none", "delayed")  # the launch's own value stays, and the rule says why
    msgs = [v.message for v in a100.validate(a100.default().replace(fp8_recipe="delayed"))]
    assert any("needs a GPU of compute capability SM89 or later; the contract's A100 is SM80" in m for m in msgs)
    unknown = space_for_fixed({"num_layers": 32, "num_attention_heads": 32}, world_size=8, **MEGATRON)
    assert "mxfp8" in unknown["fp8_recipe"].domain


def test_attention_backend_local_only_with_the_local_spec():
    te = space_for_fixed({"num_layers": 32, "num_attention_heads": 32}, world_size=8, **MEGATRON)
    assert "local" not in te["attention_backend"].domain
    local = space_for_fixed({"num_layers": 32, "num_attention_heads": 32, "spec": "local"}, world_size=8,
                            **MEGATRON)
    assert "local" in local["attention_backend"].domain
    assert local.is_valid(local.default().replace(attention_backend="local"))


def test_a_rules_message_names_the_framework_and_its_flag_as_handed_in():
    """The rules name no framework of their own: the framework's title and its flags come with its spelling table
    (the adapter's call); without them the message says the same arithmetic and fix in general words."""
    wl = {"num_layers": 32, "num_attention_heads": 32}
    selective = dict(recompute_granularity="selective", recompute_method="block")
    gather = dict(overlap_param_gather=True, distributed_optimizer=False)

    def messages(space, **change):
        return [v.message for v in space.validate(space.default().replace(**change))]

    mg = space_for_fixed(wl, world_size=8, include={"attention_backend": "local"}, **MEGATRON)
    assert messages(mg, **selective) == [
        "recompute_method with selective recompute is refused by Megatron; they act with recompute_granularity "
        "full; keep recompute_method = 'uniform'"]
    assert messages(mg, **gather) == ["overlap_param_gather needs distributed_optimizer (--use-distributed-optimizer)"]
    assert messages(mg, attention_backend="local") == [
        "attention_backend 'local' needs the local layer spec (Megatron: \"--attention-backend local requires --spec "
        "local\"); keep attention_backend auto, flash, fused or unfused"]
    plain = space_for_fixed(wl, world_size=8, include={"attention_backend": "local"})
    assert messages(plain, **selective) == [
        "recompute_method with selective recompute is refused by the framework; they act with "
        "recompute_granularity full; keep recompute_method = 'uniform'"]
    assert messages(plain, **gather) == ["overlap_param_gather needs distributed_optimizer"]
    assert messages(plain, attention_backend="local") == [
        "attention_backend 'local' needs the local layer spec; keep attention_backend auto, flash, fused or unfused"]
