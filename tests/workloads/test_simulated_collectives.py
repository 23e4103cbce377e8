"""The cost model's collective latency: one constant per collective by default (the benchmark landscapes' model),
or NCCL's own ring/Simple latency model per ring step (``GPUSpec.collective_latency = "nccl"``)."""

import pytest

from infrarsi.workloads import simulated as sim
from infrarsi.workloads.simulated.step_time import _coll_bw, _nccl_ring_latency


def _nccl(w):
    """``w`` on its GPU with NCCL's latency model (a new workload: a copy would keep the cached spec)."""
    return sim.SimWorkload(name=w.name, model=w.model, gpu=w.gpu, nodes=w.nodes, baseline=w.baseline,
                           gpu_spec=w.spec.model_copy(update={"collective_latency": "nccl"}))


def test_ring_latency_is_nccls_tuning_model():
    # NVIDIA/nccl src/graph/tuning.cc: 8.4 us + steps x 3.4 us (NVLink) or 9.6 us (network), Ring/Simple
    h100 = sim.gpu("H100").model_copy(update={"collective_latency": "nccl"})
    assert _nccl_ring_latency(h100, 8, 1, "ar") == pytest.approx(8.4e-6 + 14 * 3.4e-6)  # 56 us, TP 8 all-reduce
    assert _nccl_ring_latency(h100, 8, 1, "rs") == pytest.approx(8.4e-6 + 7 * 3.4e-6)
    assert _nccl_ring_latency(h100, 16, 8, "rs") == pytest.approx(8.4e-6 + 15 * 9.6e-6)  # one rank per node
    assert _nccl_ring_latency(h100, 64, 1, "ar") == pytest.approx(8.4e-6 + 112 * 3.4e-6 + 14 * 9.6e-6)  # 8 nodes
    assert _coll_bw(h100, 8, 1, "ar")[1] == pytest.approx(56e-6)
    fixed = sim.gpu("H100")
    assert fixed.collective_latency == "fixed"
    assert _coll_bw(fixed, 8, 1, "ar")[1] == _coll_bw(fixed, 8, 1, "rs")[1] == sim.COLL_LATENCY_S


def test_nccl_latency_slows_small_work_per_gpu_and_leaves_large_work_alone():
    small = sim.SimWorkload(name="gpt-1024", gpu="H100", nodes=1, model=sim.ModelSpec(
        num_layers=24, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096, vocab_size=50304,
        seq_length=2048, global_batch_size=64, swiglu=False))
    s_small = {"tensor_parallel": 8, "data_parallel": 1, "sequence_parallel": True}
    large = sim.WORKLOADS["dense70b-h100x64"]
    s_large = large.baseline

    def ratio(w, s):
        fixed, nccl = sim.simulate(w, s, noise_cv=0), sim.simulate(_nccl(w), s, noise_cv=0)
        assert nccl.phases_s["tp_comm"] > fixed.phases_s["tp_comm"]
        return nccl.step_time_s / fixed.step_time_s

    r_small, r_large = ratio(small, s_small), ratio(large, s_large)
    assert r_small > 1.05 and r_large < 1.02 and r_small > r_large, (r_small, r_large)
