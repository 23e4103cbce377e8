"""The simulated cluster model: Megatron's FLOPs, its theoretical memory, the published H100 throughputs,
noise, the knob space's rules, exhaustive search against brute force, and the process that prints logs."""

import math
import statistics
import subprocess
import sys
import time

import pytest

from infrarsi.adapters.megatron.log import classify_failure, parse_log
from infrarsi.trial import TrialStatus
from infrarsi.workloads import simulated as sim
from infrarsi.workloads.simulated import ModelSpec, SimWorkload

GiB = 2**30


def gpt(L, h, heads, gbs, gpus, *, dropout=False, vocab=131072, seq=4096):
    """A Megatron-LM README GPT model: MHA, GeLU MLP of 4h, tied embeddings, vocab 131072, seq 4096."""
    m = ModelSpec(num_layers=L, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h, vocab_size=vocab,
                  seq_length=seq, global_batch_size=gbs, swiglu=False, untie_embeddings_and_output_weights=False,
                  dropout=dropout)
    return SimWorkload(name=f"gpt-{L}x{h}", model=m, gpu="H100", nodes=gpus // 8)


def readme_setting(tp, pp, gpus, vp=1):
    # the README's runs overlap DP (grad reduce, param gather) and TP communication
    return dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=vp, data_parallel=gpus // (tp * pp),
                sequence_parallel=tp > 1, tp_comm_overlap=tp > 1, distributed_optimizer=True,
                overlap_grad_reduce=True, overlap_param_gather=True)


# ------------------------------------------------------------------------------------------ FLOPs, params
def test_flops_follow_megatrons_closed_form():
    # 72 B s L h^2 (1 + s/(12h) + V/(12 h L)) for MHA, 4h GeLU MLP, causal attention counted at half
    w = gpt(24, 2048, 16, 192, 48)
    B, s, L, h, V = 192, 4096, 24, 2048, 131072
    expected = 72 * B * s * L * h * h * (1 + s / (12 * h) + V / (12 * h * L))
    assert sim.model_flops_per_iteration(w.model) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name, total, active", [
    ("dense8b-h100x8", 8.03e9, 8.03e9), ("dense70b-h100x64", 70.6e9, 70.6e9),
    ("moe47b-h100x64", 46.7e9, 12.9e9), ("moe16b-h100x32", 16.9e9, 2.83e9)])
def test_reference_workloads_have_the_advertised_sizes(name, total, active):
    pc = sim.param_counts(sim.WORKLOADS[name].model)
    assert pc["total"] == pytest.approx(total, rel=0.02)
    assert pc["active"] == pytest.approx(active, rel=0.05)


# ------------------------------------------------------------------------------------------ calibration
# Megatron-LM README "Training Speed and Scalability" (images/model_table.png): H100, seq 4096, vocab 131072.
README = [  # size, layers, hidden, heads, TP, PP, GPUs, global batch, TFLOP/s per GPU
    ("1.7B", 24, 2048, 16, 1, 1, 48, 192, 408.8),
    ("7.1B", 30, 4096, 32, 2, 1, 96, 192, 465.9),
    ("16B", 32, 6144, 48, 4, 1, 192, 192, 489.1),
    ("70B", 84, 8192, 64, 8, 2, 768, 384, 419.7),
]


@pytest.mark.parametrize("size, L, h, heads, tp, pp, gpus, gbs, published", README)
def test_calibration_megatron_readme(size, L, h, heads, tp, pp, gpus, gbs, published):
    w = gpt(L, h, heads, gbs, gpus)
    r = sim.simulate(w, readme_setting(tp, pp, gpus, vp=2 if pp > 1 else 1), noise_cv=0)
    assert not r.oom
    assert r.tflops_per_gpu == pytest.approx(published, rel=0.20), f"{size}: {r.tflops_per_gpu:.1f} vs {published}"
    assert r.mfu == pytest.approx(r.tflops_per_gpu * 1e12 / 989e12)


# ------------------------------------------------------------------------------------------ memory vs Megatron
def megatron_weights_and_optimizer(w, tp, pp, dp, distributed_optimizer):
    """Megatron's compute_weight_and_optimizer_memory (dense, tied embeddings), re-derived: the most loaded
    shard is the first stage (1/pp of the layers + the embedding), split over TP."""
    m = w.model
    h, L, V = m.hidden_size, m.num_layers, m.vocab_size
    layer = 2 * h * h * 2 + 2 * h * m.ffn_hidden_size + 2 * h * 2  # attention + MLP + 2 LayerNorms (with bias)
    params = (layer * L / pp + h * V) / tp
    per_param = 6 + 12 / dp if distributed_optimizer else 18
    return params * per_param


def megatron_activations_sp_selective(w, tp, pp, vp, mbs, nmb):
    """Megatron's compute_activation_memory (SP + selective recompute; Korthikanti Table 2: 34 s b h / t per
    layer for a 4h MLP), first stage, in bytes."""
    m = w.model
    s, b, h, L, V = m.seq_length, mbs, m.hidden_size, m.num_layers, m.vocab_size
    act = s * b * h * (18 + 4 * m.ffn_hidden_size / h) * L
    act += 8 * s * b * pp + s * b * h * pp  # token ids and embedding dropout mask, pp micro-batches
    if vp > 1:
        act *= 1 + (pp - 1) / (pp * vp)
    elif pp > 1:
        act *= min(1, nmb / pp)
    if pp == 1:
        act += s * b * h * 4 * (1 + V / h)  # output layer inputs and fp32 logits
    return act / tp


def megatron_activations_no_sp(w, tp, pp, mbs, nmb):
    """Megatron's compute_activation_memory_without_sp for pp > 1, non-interleaved: s b h (10 + 24/t) per
    layer, x 1.05 for temporaries."""
    m = w.model
    s, b, h, L = m.seq_length, mbs, m.hidden_size, m.num_layers
    act = s * b * h * (10 + 24 / tp) * L + 8 * s * b * pp + s * b * h * pp
    act *= min(1, nmb / pp)
    return act * 1.05


@pytest.mark.parametrize("L, h, heads, gbs, gpus, tp, pp, vp, do", [
    (30, 4096, 32, 192, 96, 2, 1, 1, True),   # 7.1B, TP 2
    (32, 6144, 48, 192, 192, 4, 1, 1, False),  # 16B, TP 4, plain Adam
    (84, 8192, 64, 384, 768, 8, 2, 1, True),   # 70B, TP 8 PP 2
    (84, 8192, 64, 384, 768, 8, 2, 3, True),   # 70B, interleaved
])
def test_memory_agrees_with_megatrons_theoretical_formula(L, h, heads, gbs, gpus, tp, pp, vp, do):
    w = gpt(L, h, heads, gbs, gpus, dropout=True)  # the formula counts dropout masks
    dp = gpus // (tp * pp)
    s = dict(tensor_parallel=tp, pipeline_parallel=pp, virtual_pipeline=vp, data_parallel=dp, sequence_parallel=True,
             recompute_granularity="selective", distributed_optimizer=do)
    mem = sim.memory(w, s)
    nmb = gbs // dp
    assert mem.stage == "first"
    assert mem.weights_and_optimizer == pytest.approx(megatron_weights_and_optimizer(w, tp, pp, dp, do), rel=0.01)
    assert mem.activations == pytest.approx(megatron_activations_sp_selective(w, tp, pp, vp, 1, nmb), rel=0.03)


def test_moe_weight_memory_agrees_with_megatrons_formula():
    # compute_weight_and_optimizer_memory with experts: attention + shared experts split over TP, routed
    # experts over expert-TP (= TP) x EP with the distributed optimizer sharded over the expert-data-parallel group
    w = sim.WORKLOADS["moe16b-h100x32"]
    m = w.model
    tp, ep, dp = 2, 8, 16
    edp = 32 // (tp * ep)
    h, L, V, E = m.hidden_size, m.num_layers, m.vocab_size, m.num_experts
    attn = 4 * h * h
    shared = 3 * h * m.moe_shared_expert_intermediate_size
    routed = 3 * h * m.expert_ffn * E
    tp_params = ((attn + shared) * L + 2 * V * h) / tp  # untied embedding and output layer (pp = 1)
    replicated = (2 * h + h * E) * L + h
    expert = routed * L / (tp * ep)
    expected = (tp_params + replicated) * (6 + 12 / dp) + expert * (6 + 12 / edp)
    mem = sim.memory(w, dict(tensor_parallel=tp, expert_parallel=ep, data_parallel=dp, sequence_parallel=True,
                             distributed_optimizer=True))
    assert mem.weights_and_optimizer == pytest.approx(expected, rel=1e-6)


def test_memory_without_sequence_parallel_agrees_with_megatron():
    w = gpt(84, 8192, 64, 384, 768, dropout=True)
    s = dict(tensor_parallel=8, pipeline_parallel=2, data_parallel=48, distributed_optimizer=True)
    mem = sim.memory(w, s)
    assert mem.activations == pytest.approx(megatron_activations_no_sp(w, 8, 2, 1, 8), rel=0.06)
    with_sp = sim.memory(w, {**s, "sequence_parallel": True})
    assert with_sp.activations < 0.5 * mem.activations  # SP shards the 10 s b h part


def test_recompute_and_distributed_optimizer_trade_memory_as_expected():
    w = sim.WORKLOADS["dense8b-h100x8"]
    base = dict(tensor_parallel=2, data_parallel=4, sequence_parallel=True)
    none, full = sim.memory(w, base), sim.memory(w, {**base, "recompute_granularity": "full"})
    assert full.activations < 0.2 * none.activations
    plain, do = sim.memory(w, base), sim.memory(w, {**base, "distributed_optimizer": True})
    # 18 bytes/param vs 6 + 12/4 = 9 bytes/param
    assert do.weights_and_optimizer / plain.weights_and_optimizer == pytest.approx(9 / 18, rel=0.01)
    t_none = sim.simulate(w, {**base, "distributed_optimizer": True}, noise_cv=0)
    t_full = sim.simulate(w, {**base, "distributed_optimizer": True, "recompute_granularity": "full"}, noise_cv=0)
    assert 1.15 < t_full.step_time_s / t_none.step_time_s < 1.45  # one extra forward: ~ +1/3 of compute


# ------------------------------------------------------------------------------------------ landscape
_OVERLAP = {"distributed_optimizer": True, "overlap_grad_reduce": True, "overlap_param_gather": True}
TUNED = {  # what an engineer who knows Megatron would write: overlaps on, no recompute where it fits
    "dense8b-h100x8": {"tensor_parallel": 2, "data_parallel": 4, "sequence_parallel": True, "tp_comm_overlap": True,
                       **_OVERLAP},
    "dense70b-h100x64": {"tensor_parallel": 4, "pipeline_parallel": 4, "virtual_pipeline": 5, "context_parallel": 2,
                         "data_parallel": 2, "sequence_parallel": True, "tp_comm_overlap": True, **_OVERLAP},
    "moe47b-h100x64": {"pipeline_parallel": 8, "virtual_pipeline": 4, "expert_parallel": 8, "data_parallel": 8,
                       "moe_grouped_gemm": True, "moe_token_dispatcher": "alltoall", **_OVERLAP},
    "moe16b-h100x32": {"expert_parallel": 4, "data_parallel": 32, "moe_grouped_gemm": True, **_OVERLAP},
}


@pytest.mark.parametrize("name", list(sim.WORKLOADS))
def test_reference_landscape_has_ooms_and_room_to_tune(name):
    w = sim.WORKLOADS[name]
    space = sim.space_for(w)
    base = sim.simulate(w, w.baseline, noise_cv=0)
    assert not base.oom and base.step_time_s > 0
    assert sim.simulate(w, {}, noise_cv=0).oom  # Megatron's defaults (tp = pp = 1, plain Adam) do not fit
    tuned = TUNED[name]
    assert space.is_valid(space.complete(tuned))
    t = sim.simulate(w, tuned, noise_cv=0)
    assert not t.oom
    assert base.step_time_s > 1.25 * t.step_time_s


def test_exhaustive_optimum_of_dense8b_beats_the_baseline_clearly():
    w = sim.WORKLOADS["dense8b-h100x8"]
    space = sim.space_for(w)
    no_fp8 = space.restrict({"fp8_recipe": ["none"]}, keep=space.names)
    t0 = time.perf_counter()
    opt = sim.exhaustive_optimum(w, no_fp8)
    assert time.perf_counter() - t0 < 20
    assert opt.n_valid > 5000 and 0 < opt.n_oom < opt.n_valid
    base = sim.simulate(w, w.baseline, noise_cv=0).step_time_s
    assert base > 1.4 * opt.step_time_s
    r = sim.simulate(w, opt.setting, noise_cv=0)
    assert r.step_time_s == pytest.approx(opt.step_time_s) and not r.oom
    with_fp8 = sim.exhaustive_optimum(w, space.restrict({"fp8_recipe": ["none", "delayed"], "tensor_parallel": [2]},
                                                        keep=space.names))
    assert with_fp8.step_time_s < opt.step_time_s  # fp8 GEMMs help where the GPU has them


def test_exhaustive_matches_brute_force_on_a_small_space():
    w = sim.WORKLOADS["moe16b-h100x32"]
    space = sim.space_for(w).restrict({
        "tensor_parallel": [1, 2], "pipeline_parallel": [1, 2], "context_parallel": [1], "virtual_pipeline": [1, 2],
        "expert_parallel": [4, 8], "micro_batch_size": [1, 2], "recompute_granularity": ["none", "full"],
        "fp8_recipe": ["none"], "moe_token_dispatcher": ["allgather", "alltoall"], "data_parallel": [8, 16, 32],
        "distributed_optimizer": [True], "tp_comm_overlap": [False], "overlap_grad_reduce": [True],
    }, keep=sim.space_for(w).names)  # 3,072 points, a few hundred valid
    opt = sim.exhaustive_optimum(w, space)
    valid = list(space.enumerate(limit=10**6))
    results = [(sim.simulate(w, s, noise_cv=0), s) for s in valid]
    ok = [(r.step_time_s, s) for r, s in results if not r.oom]
    assert opt.n_valid == len(valid) and opt.n_oom == len(valid) - len(ok)
    assert 0 < opt.n_oom < opt.n_valid
    best_t, best_s = min(ok, key=lambda x: x[0])
    assert opt.step_time_s == pytest.approx(best_t) and dict(opt.setting) == dict(best_s)
    assert sorted(map(dict, sim.iter_valid(space)), key=str) == sorted(map(dict, valid), key=str)


# ------------------------------------------------------------------------------------------ model behaviour
def test_pipeline_bubble_shrinks_with_interleaving():
    w = sim.WORKLOADS["dense70b-h100x64"]
    s = dict(tensor_parallel=8, pipeline_parallel=4, data_parallel=2, sequence_parallel=True,
             distributed_optimizer=True, recompute_granularity="full")
    b1 = sim.simulate(w, s, noise_cv=0).phases_s["pipeline_bubble"]
    b2 = sim.simulate(w, {**s, "virtual_pipeline": 2}, noise_cv=0).phases_s["pipeline_bubble"]
    assert b2 == pytest.approx(b1 / 2, rel=0.05)


def test_moe_dispatch_imbalance_and_grouped_gemm():
    w = sim.WORKLOADS["moe47b-h100x64"]
    assert sim._imbalance(w.model, 1) == 1.0 < sim._imbalance(w.model, 2) < sim._imbalance(w.model, 8)
    s = dict(tensor_parallel=1, pipeline_parallel=8, expert_parallel=8, data_parallel=8, distributed_optimizer=True,
             recompute_granularity="full")
    ag = sim.simulate(w, {**s, "moe_token_dispatcher": "allgather"}, noise_cv=0)
    a2a = sim.simulate(w, {**s, "moe_token_dispatcher": "alltoall"}, noise_cv=0)
    assert a2a.phases_s["moe_dispatch"] < ag.phases_s["moe_dispatch"]  # top-2 of 8: a2a moves 2/8 of the bytes
    fine = sim.WORKLOADS["moe16b-h100x32"]
    f = dict(tensor_parallel=1, expert_parallel=4, data_parallel=32, distributed_optimizer=True)
    seq_gemm = sim.simulate(fine, f, noise_cv=0).step_time_s
    grouped = sim.simulate(fine, {**f, "moe_grouped_gemm": True}, noise_cv=0).step_time_s
    assert grouped < seq_gemm  # 16 local experts: one grouped GEMM beats 16 small ones


def test_hardware_table_orders_gpus():
    m = sim.WORKLOADS["dense8b-h100x8"].model
    s = dict(tensor_parallel=2, data_parallel=4, sequence_parallel=True, distributed_optimizer=True,
             recompute_granularity="full")
    t = {g: sim.simulate(SimWorkload(name=g, model=m, gpu=g, nodes=1), s, noise_cv=0) for g in sim.HARDWARE}
    assert t["B200"].step_time_s < t["H200"].step_time_s <= t["H100"].step_time_s < t["A100"].step_time_s
    big = dict(tensor_parallel=1, data_parallel=8, distributed_optimizer=True)
    assert sim.simulate(SimWorkload(name="h", model=m, gpu="H100"), big, noise_cv=0).oom
    assert not sim.simulate(SimWorkload(name="h2", model=m, gpu="H200"), big, noise_cv=0).oom
    with pytest.raises(ValueError, match="fp8_recipe='delayed' is not in its domain"):
        sim.simulate(SimWorkload(name="a", model=m, gpu="A100"), {**s, "fp8_recipe": "delayed"})


# ------------------------------------------------------------------------------------------ noise, speed
def test_noise_is_lognormal_with_the_configured_cv_and_reproducible():
    w = sim.WORKLOADS["moe16b-h100x32"]
    s = w.baseline
    exact = sim.simulate(w, s, noise_cv=0).step_time_s
    draws = [sim.simulate(w, s, seed=i, noise_cv=0.05).step_time_s for i in range(600)]
    assert statistics.mean(draws) == pytest.approx(exact, rel=0.01)
    assert statistics.stdev(draws) / statistics.mean(draws) == pytest.approx(0.05, rel=0.15)
    assert min(draws) > 0
    assert sim.simulate(w, s, seed=7).step_time_s == sim.simulate(w, s, seed=7).step_time_s
    assert sim.simulate(w, s, seed=7).step_time_s != sim.simulate(w, s, seed=8).step_time_s


def test_one_trial_takes_under_5_ms():
    w = sim.WORKLOADS["moe47b-h100x64"]
    space = sim.space_for(w)
    settings = space.sample(3, n=50)
    t0 = time.perf_counter()
    for i, s in enumerate(settings):
        sim.simulate(w, s, seed=i)
    assert (time.perf_counter() - t0) / len(settings) < 5e-3


# ------------------------------------------------------------------------------------------ space rules
def test_space_rules_show_the_numbers():
    w = sim.WORKLOADS["moe16b-h100x32"]
    space = sim.space_for(w)
    assert space["tensor_parallel"].domain == (1, 2, 4, 8)
    assert space["expert_parallel"].domain == (1, 2, 4, 8, 16, 32)
    msgs = lambda s: " | ".join(v.message for v in space.validate(space.complete(s)))  # noqa: E731
    assert "tp(2) * pp(1) * cp(1) * dp(32) = 64 != world_size(32)" in msgs({"tensor_parallel": 2, "data_parallel": 32})
    assert "sequence_parallel needs tensor_parallel > 1" in msgs({"sequence_parallel": True})
    assert "virtual_pipeline 2 needs pipeline_parallel > 1" in msgs({"virtual_pipeline": 2})
    assert "global batch 512 is not divisible" in msgs({"tensor_parallel": 1, "pipeline_parallel": 1, "data_parallel": 32,
                                                          "micro_batch_size": 32}) or "micro_batch_size" in msgs(
        {"micro_batch_size": 32})
    assert "expert grid" in msgs({"tensor_parallel": 4, "expert_parallel": 16, "data_parallel": 8})
    dense = sim.space_for("dense8b-h100x8")
    assert "expert_parallel" not in dense and "moe_grouped_gemm" not in dense
    with pytest.raises(ValueError, match="tp_comm_overlap needs"):
        sim.simulate("dense8b-h100x8", {"tensor_parallel": 2, "data_parallel": 4, "tp_comm_overlap": True})


def test_workloads_from_contract_args():
    w = sim.workload_from_args({"reference": "dense8b-h100x8", "gpu": "H200", "nodes": 2, "seed": 1})
    assert w.world_size == 16 and w.spec.name == "H200" and w.model.hidden_size == 4096
    c = sim.workload_from_args({"num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "ffn_hidden_size": 13824,
                                "vocab_size": 32000, "seq_length": 4096, "global_batch_size": 256, "gpu": "A100",
                                "nodes": 4})
    assert c.world_size == 32 and sim.param_counts(c.model)["total"] == pytest.approx(13.0e9, rel=0.03)
    with pytest.raises(ValueError, match="unknown key"):
        sim.workload_from_args({"reference": "dense8b-h100x8", "hiden_size": 1})
    with pytest.raises(ValueError, match="needs reference"):
        sim.workload_from_args({"num_layers": 2})
    with pytest.raises(ValueError, match="not in the hardware table"):
        sim.workload_from_args({"reference": "dense8b-h100x8", "gpu": "V100"})


# ------------------------------------------------------------------------------------------ the process
def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "infrarsi.workloads.simulated", *args], capture_output=True,
                          text=True, timeout=60)


def test_process_prints_megatron_lines_and_real_ooms():
    w = sim.WORKLOADS["dense8b-h100x8"]
    import json
    p = run_cli("--workload", "dense8b-h100x8", "--setting", json.dumps(w.baseline), "--seed", "3",
                "--train-iters", "6", "--noise-cv", "0.01")
    assert p.returncode == 0, p.stderr
    log = parse_log(p.stdout)
    assert [it.iteration for it in log.iterations] == list(range(1, 7))
    exact = sim.simulate(w, w.baseline, noise_cv=0).step_time_s * 1000
    steady = [it.step_ms for it in log.iterations[2:]]
    assert all(abs(x / exact - 1) < 0.06 for x in steady)
    assert log.iterations[0].step_ms > 2 * exact  # warm-up
    assert log.max_reserved_mb[0] * 2**20 == pytest.approx(sim.memory(w, w.baseline).reserved, rel=1e-3)
    assert len({round(it.loss, 3) for it in log.iterations}) == 6 and all(math.isfinite(it.loss) for it in log.iterations)

    oom = run_cli("--workload", "dense8b-h100x8", "--setting", '{"tensor_parallel": 1, "data_parallel": 8}')
    assert oom.returncode == 1 and "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in oom.stderr
    assert parse_log(oom.stdout).iterations == []
    status, _, evidence = classify_failure(oom.stderr)
    assert status is TrialStatus.OOM and evidence
