"""The eager terms of the cost model (infrarsi/workloads/simulated/eager.py), each on one small shape, by hand.

The shape: a 2-block llama (hidden 64, 2 heads of 32, 1 KV group, FFN 256, vocab 1000, seq 128, untied output) on
one A100 node, FSDP over its 8 GPUs, micro-batch 1 (T = 128 tokens), global batch 8: one micro-batch per step.
Per GPU: q = 64, kv = 32, f = 256, h = 64. A100: HBM 2.04e12 B/s, so eager kernels move 0.88 x 2.04e12 =
1.7952e12 B/s; 108 SMs; NVLink 230e9 B/s as NCCL reaches it.
"""

import pytest

from infrarsi.workloads import simulated as sim
from infrarsi.workloads.simulated import eager
from infrarsi.workloads.simulated.step_time import _layer_time

BW = 2.04e12 * 0.88  # 1.7952e12 B/s
MODEL = sim.ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=2, num_query_groups=1, ffn_hidden_size=256,
                      vocab_size=1000, seq_length=128, global_batch_size=8)


def _workload(kernels: str, optimizer: str = "fused") -> sim.SimWorkload:
    spec = sim.gpu("A100").model_copy(update={"small_work_terms": True})
    return sim.SimWorkload(name="tiny", model=MODEL, gpu="A100", nodes=1, gpu_spec=spec, dp_sharding="per_block",
                           selective_recompute="op", kernels=kernels, optimizer_implementation=optimizer)


def _phases(kernels: str, optimizer: str = "fused", rc: str = "selective") -> dict[str, float]:
    w = _workload(kernels, optimizer)
    return sim._step_time(w, sim._layout(w, {"data_parallel": 8, "micro_batch_size": 1,
                                             "recompute_granularity": rc}))[1]


def test_the_bytes_per_token_a_block_moves_beyond_the_fused_kernels():
    # forward: RoPE (20 - 4) x (64 + 32) = 1536, SwiGLU (10 - 6) x 256 = 1024: 2560
    # backward: RoPE (20 - 8) x 96 = 1152, SwiGLU (18 - 12) x 256 = 1536, 3 input-gradient adds x 6 x 64 = 1152: 3840
    assert eager.layer_bytes(64, 32, 256, 64) == (2560, 3840)


def test_a_blocks_eager_element_wise_time_and_its_recompute():
    w_eager, w_fused = _workload("eager"), _workload("fused")
    for rc, recomputed in (("none", 0), ("op", 2560), ("full", 2560)):  # op and full AC run the forward's again
        lay = sim._layout(w_eager, {"data_parallel": 8, "micro_batch_size": 1,
                                    "recompute_granularity": "selective" if rc == "op" else rc})
        _, e = _layer_time(w_eager, lay)
        _, f = _layer_time(w_fused, lay)
        # 128 tokens x (2560 + 3840) B = 819200 B at 1.7952e12 B/s = 4.5633e-7 s
        assert e["eager_elementwise"] == pytest.approx(128 * 6400 / BW) == pytest.approx(4.5633e-7, rel=1e-4)
        assert e["recompute"] - f["recompute"] == pytest.approx(128 * recomputed / BW)  # op: 1.8253e-7 s
        assert "eager_elementwise" not in f


def test_the_eager_cross_entropy_per_logit():
    # 128 tokens x 1000 logits x (48 - 20) B = 3.584e6 B: 1.9964e-6 s per micro-batch, one micro-batch
    diff = _phases("eager")["logits_loss"] - _phases("fused")["logits_loss"]
    assert diff == pytest.approx(128 * 1000 * 28 / BW) == pytest.approx(1.9964e-6, rel=1e-4)


def test_the_optimizer_by_implementation():
    # the shard: 251200 parameters (2 blocks of 61568, embedding and output of 64000, final norm 64) / 8 = 31400
    fused, foreach, base = (_phases(k, o)["optimizer"] for k, o in (("eager", "fused"), ("eager", "foreach"),
                                                                      ("fused", "fused")))
    assert fused - base == pytest.approx(31400 * 4 / BW)  # clipping's multiply: 12 B against the model's 8
    assert foreach - base == pytest.approx(31400 * (84 - 28 + 4) / BW) == pytest.approx(1.0495e-6, rel=1e-4)


def test_fsdp2s_copies_per_block_and_micro_batch():
    # per block (61568 parameters), 2 gathers (resharded after forward) and one reduce-scatter over 8 shards:
    # 2 x (4 x 61568 + 10 x 61568 / 8) + 6 x 61568 = 1015872 B
    assert eager.fsdp_copy_bytes(61568, 8, 2) == pytest.approx(1015872)
    assert eager.fsdp_copy_bytes(61568, 1, 2) == 0  # unsharded: no collectives, no copies
    # the embedding and the output (64000 each), one gather each: 4 x 64000 + 10 x 8000 + 6 x 64000 = 720000 B
    # 2 blocks x 1015872 + 2 x 720000 = 3471744 B: 1.9339e-6 s
    assert _phases("eager")["fsdp_copies"] == pytest.approx(3471744 / BW) == pytest.approx(1.9339e-6, rel=1e-4)


def test_the_sms_nccl_holds_slow_the_compute_beside_a_collective():
    assert eager.nccl_sm_share(sim.gpu("A100")) == pytest.approx(16 / 108)  # 2 SMs per NIC, 8 NICs, 108 SMs
    # each collective over 8 GPUs in a node: NCCL's ring latency 8.4 + 7 x 3.4 = 32.2 us, plus 7/8 of its bytes at
    # 230e9 B/s. gather: block 61568 x 2 B -> 3.26685e-5 s, embedding/output 64000 x 2 B -> 3.26870e-5 s; reduce
    # (fp32): block 3.31369e-5 s, embedding/output 3.31739e-5 s. Per micro-batch: 2 edge gathers + 2 blocks x 2
    # gathers + 2 block reduces + 2 edge reduces = 3.28670e-4 s; what is not exposed ran beside compute.
    comm = 2 * 3.26870e-5 + 4 * 3.26685e-5 + 2 * 3.31369e-5 + 2 * 3.31739e-5
    p = _phases("eager")
    beside = comm - p["dp_grad_sync"] - p["dp_param_gather"]
    assert 0 < beside < comm
    assert p["nccl_sm_share"] == pytest.approx(16 / 108 * beside, rel=1e-4)


def test_the_eager_terms_only_add_time_and_leave_fused_pricing_alone():
    e, f = _phases("eager"), _phases("fused")
    assert not {"eager_elementwise", "fsdp_copies", "nccl_sm_share"} & set(f)
    added = e["forward_backward"] - f["forward_backward"]
    assert added == pytest.approx(e["eager_elementwise"] + e["recompute"] - f["recompute"] + e["logits_loss"]
                                  - f["logits_loss"] + e["fsdp_copies"] + e["nccl_sm_share"], rel=1e-9)
