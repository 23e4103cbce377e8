"""Step time per iteration: GEMMs, flash attention and element-wise work per layer, TP/CP/EP communication,
recompute, the pipeline (bubble and p2p), data-parallel gradient sync and parameter gather with their
overlap, and the optimizer step. All seconds."""

from __future__ import annotations

from . import eager, fsdp
from .hardware import GPUSpec
from .layout import _imbalance, _Layout, param_counts
from .memory import _stage_params
from .small_work import gemm_memory_s, layer_kernel_overhead_s, microbatch_kernel_overhead_s, occupancy, pipeline_sync_s
from .workload import SimWorkload

# Constants of the model that are not hardware facts (fitted once against Megatron-LM's published
# H100 table, see tests/workloads/test_simulated.py::test_calibration_megatron_readme).
GEMM_M0 = 64.0  # rows at which a GEMM reaches half its row efficiency: eff ~ M / (M + M0)
GEMM_N0 = 128.0  # same for the N and K dims (thin TP slices)
GEMM_F0 = 4e9  # FLOPs at which a GEMM reaches half its size efficiency (wave quantisation, tails)
ELEM_EFF = 0.45  # element-wise kernels (norms, residuals, activations, casts) reach this fraction of HBM bandwidth
TP_OVERLAP_EXPOSED = 0.15  # share of TP communication left exposed by tp_comm_overlap
TP_OVERLAP_GEMM_SLOWDOWN = 0.04  # GEMMs share SMs with the overlapped collectives
COLL_LATENCY_S = 12e-6  # per collective launch inside a node
IB_LATENCY_S = 25e-6
OPT_BYTES_PER_PARAM = 36  # Adam step: read p, g, m, v (fp32), write p, m, v, bf16 copy
FIXED_ITER_S = 4e-3  # data loader, loss all-reduce, logging, Python per iteration
FP8_GEMM_EFF = {"delayed": 0.80, "tensorwise": 0.78, "blockwise": 0.66, "mxfp8": 0.80}  # x bf16 eff at 2x peak
FP8_CAST_PASSES = {"delayed": 1.0, "tensorwise": 1.6, "blockwise": 1.8, "mxfp8": 1.3}


def _gemm_eff(spec: GPUSpec, mm: float, n: float, k: float) -> float:
    """Achieved / peak for an (mm x k) @ (k x n) GEMM: each thin dimension loses efficiency, and a small
    GEMM (few waves of tiles over the SMs) loses more; with the small-work terms, a GEMM of less than one wave
    of tiles also leaves SMs idle (small_work.occupancy)."""
    size = 2 * mm * n * k
    eff = (spec.gemm_eff * (mm / (mm + GEMM_M0)) * (n / (n + GEMM_N0)) * (k / (k + GEMM_N0))
           * (size / (size + GEMM_F0)))
    return eff * occupancy(spec.sm_count, mm, n) if spec.small_work_terms else eff


def _gemm_s(spec: GPUSpec, mm: float, n: float, k: float, peak: float, scale: float, a: int) -> float:
    """Forward seconds of an (mm x k) @ (k x n) GEMM at ``peak`` x ``scale`` FLOP/s; with the small-work terms
    never under the time to move its operands at HBM bandwidth."""
    t = 2 * mm * n * k / (peak * _gemm_eff(spec, mm, n, k) * scale)
    return max(t, gemm_memory_s(mm, n, k, a, spec.hbm_bytes_per_s)) if spec.small_work_terms else t


# NCCL's own latency model for the ring algorithm with the Simple protocol (the one it picks for messages of a MB
# and more): NVIDIA/nccl src/graph/tuning.cc (commit 01afd20, 2020), ``baseLat`` Ring/Simple 8.4 us once per
# collective, ``hwLat`` Ring/Simple 3.4 us per ring step over NVLink and 9.6 us per step over the network. A ring
# all-reduce takes 2(n-1) steps, a reduce-scatter or all-gather n-1, of which 2(nodes-1) (resp. nodes-1) cross the
# network. Used where ``GPUSpec.collective_latency == "nccl"``; the default ("fixed") keeps one latency per
# collective (COLL_LATENCY_S inside a node, IB_LATENCY_S across), which the benchmark landscapes were built with.
NCCL_RING_BASE_LAT_S = 8.4e-6
NCCL_RING_STEP_NVLINK_S = 3.4e-6
NCCL_RING_STEP_NET_S = 9.6e-6


def _nccl_ring_latency(spec: GPUSpec, n: int, stride: int, op: str) -> float:
    """Seconds of latency of a ring ``op`` ("ar", "rs" or "ag") over ``n`` ranks ``stride`` apart, NCCL's model."""
    nodes = 1 if n * stride <= spec.gpus_per_node else min(n, -(-n * stride // spec.gpus_per_node))
    per_step = 2 if op == "ar" else 1
    steps, inter = per_step * (n - 1), per_step * (nodes - 1)
    return NCCL_RING_BASE_LAT_S + (steps - inter) * NCCL_RING_STEP_NVLINK_S + inter * NCCL_RING_STEP_NET_S


def _coll_bw(spec: GPUSpec, n: int, stride: int, op: str = "rs") -> tuple[float, float]:
    """(bus bandwidth, latency) of a collective ``op`` ("ar", "rs", "ag") over ``n`` ranks spaced ``stride`` apart
    in rank order. Inside one node: NVLink. Across nodes: each node's share of the group drives that many NICs.
    The latency is one constant per collective, or NCCL's ring model (``spec.collective_latency``)."""
    per_node = spec.gpus_per_node
    inside = n * stride <= per_node
    if spec.collective_latency == "nccl" or spec.small_work_terms:
        lat = _nccl_ring_latency(spec, n, stride, op)
    else:
        lat = COLL_LATENCY_S if inside else IB_LATENCY_S
    if inside:
        return spec.nvlink_bytes_per_s, lat
    in_node = max(1, min(n, per_node // stride)) if stride < per_node else 1
    return min(spec.nvlink_bytes_per_s, in_node * spec.ib_bytes_per_s), lat


def _layer_time(w: SimWorkload, lay: _Layout) -> tuple[float, dict[str, float]]:
    """Forward + backward seconds of one layer for one micro-batch on one GPU, and its parts."""
    m, spec = w.model, w.spec
    h, a, tp = m.hidden_size, lay.a, lay.tp
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.groups
    T = lay.mbs * m.seq_length / lay.cp
    spd = tp if lay.sp else 1
    fp8 = lay.fp8 != "none"
    peak = spec.peak_bf16_flops if a == 2 else spec.peak_bf16_flops / 2  # fp32 runs as TF32
    gemm_peak = spec.peak_fp8_flops if fp8 else peak
    fp8_scale = FP8_GEMM_EFF[lay.fp8] if fp8 else 1.0
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    g = 2 if m.swiglu else 1

    def gemm(mm: float, n: float, k: float) -> tuple[float, float]:
        """(forward seconds, fp8 cast seconds) of an (mm x k) @ (k x n) GEMM; backward is 2x forward."""
        t = _gemm_s(spec, mm, n, k, gemm_peak, fp8_scale, a)
        cast = (mm * k * (a + 1) * FP8_CAST_PASSES[lay.fp8] / hbm) if fp8 else 0.0
        return t, cast

    gemms = [gemm(T, (q + 2 * kv) / tp, h), gemm(T, h, q / tp)]
    exp_fwd = 0.0
    n_tp_coll = 2  # collectives per layer per direction: after attention and after the MLP
    elem = T * h * 10 * a / spd + T * (q + kv) * 2 * a / tp  # norms, residuals / RoPE on q, k
    launch = spec.launch_bound_s
    a2a = 0.0
    if m.moe:
        n_tp_coll = 1
        f, E, k_top = m.expert_ffn, m.num_experts, m.moe_router_topk
        imb = _imbalance(m, lay.ep)
        n_local = E // lay.ep
        rows_e = T * k_top * lay.ep / E  # tokens per local expert (expert TP = TP gathers over TP)
        m_eff = rows_e * (2.0 if lay.gg else 1.0)  # grouped GEMM tiles across experts
        one = (2 * rows_e * g * f * h / tp + 2 * rows_e * f * h / tp) / (
            gemm_peak * _gemm_eff(spec, m_eff, g * f / tp, h) * fp8_scale)
        exp_fwd = n_local * one * imb
        if fp8:
            exp_fwd += n_local * rows_e * h * (a + 1) * FP8_CAST_PASSES[lay.fp8] * 2 / hbm
        fs = m.moe_shared_expert_intermediate_size
        if fs:
            gemms += [gemm(T, g * fs / tp, h), gemm(T, h, fs / tp)]
        gemms.append((2 * T / spd * h * E / (peak * 0.3), 0.0))  # router (tiny, inefficient)
        rows_gpu = T * k_top * imb
        elem += rows_gpu * f * 3 * a / tp + T / spd * E * 4 * 3 + T * fs * 3 * a / tp
        launch += 150e-6 + (0.0 if lay.gg else n_local * 6 * 6e-6)
        # token dispatch: per direction, dispatch + combine
        if lay.disp == "alltoall":
            vol = T / spd * k_top * h * a * (lay.ep - 1) / lay.ep * imb
            elem += 4 * T / spd * k_top * h * a  # permute / unpermute copies
            if lay.ep > 1:
                per_node = max(1, spec.gpus_per_node // tp)
                off = max(0.0, (lay.ep - per_node) / (lay.ep - 1)) if lay.ep > per_node else 0.0
                bw_t = off / (spec.ib_bytes_per_s * 0.7) + (1 - off) / (spec.nvlink_bytes_per_s * 0.8)
                a2a += 2 * (vol * bw_t + lay.ep * 5e-6 + (IB_LATENCY_S if off else COLL_LATENCY_S))
            if tp > 1:  # gather the received tokens over expert TP
                bw, lat = _coll_bw(spec, tp, 1, "ag")
                a2a += 2 * (T * k_top * h * a * (tp - 1) / tp * imb / bw + lat)
        else:  # allgather tokens of the EP x TP group, reduce-scatter the outputs
            n = lay.ep * tp
            if n > 1:
                bw, lat = _coll_bw(spec, n, 1, "ag")
                a2a += 2 * (T / spd * h * a * (n - 1) / bw + lat)
            elem += 2 * rows_gpu * h * a
    else:
        f = m.ffn_hidden_size
        gemms += [gemm(T, g * f / tp, h), gemm(T, h, f / tp)]
        elem += T * f * (g + 1) * a / tp

    gemm_fwd = sum(t for t, _ in gemms) + exp_fwd
    cast_fwd = sum(c for _, c in gemms)
    attn_flops = 2 * T * m.seq_length * q / tp  # causal: half of 4 * T * s * q
    if not m.flash_attention:
        attn_fwd = attn_flops / (peak * 0.35) + T * m.seq_length * m.num_attention_heads * a * 4 / tp / hbm
    else:
        attn_fwd = attn_flops / (peak * spec.attn_eff_fwd)
    attn_bwd = 2 * attn_flops / (peak * spec.attn_eff_bwd) * (1.0 if m.flash_attention else 2.2)
    elem_fwd = elem / hbm

    # tensor-parallel collectives: bytes = T * h * a per collective (AR = RS + AG, same volume with SP)
    tp_comm = 0.0
    if tp > 1:
        bw, lat = _coll_bw(spec, tp, 1, "rs" if lay.sp else "ar")  # SP: reduce-scatter + all-gather
        vol = T * h * a
        per = 2 * (tp - 1) / tp * vol / bw + (2 * lat if lay.sp else lat)
        tp_comm = n_tp_coll * per  # one direction
    cp_comm = 0.0
    if lay.cp > 1:
        # point-to-point KV ring between CP neighbours (tp ranks apart): NVLink inside a node, else one NIC
        inside = tp * lay.cp <= spec.gpus_per_node
        bw = spec.nvlink_bytes_per_s if inside else spec.ib_bytes_per_s
        lat = COLL_LATENCY_S if inside else IB_LATENCY_S
        kv_bytes = T * 2 * kv * a / tp * (lay.cp - 1)
        cp_comm = max(0.0, kv_bytes / bw - 0.8 * attn_fwd) + (lay.cp - 1) * lat  # forward; backward 2x

    gemm_total = 3 * gemm_fwd + 3 * cast_fwd
    fwd_compute = gemm_fwd + cast_fwd + attn_fwd + elem_fwd
    # recompute: selective redoes the attention core, full the whole forward (with its collectives)
    re_compute = attn_fwd if lay.rc == "selective" else (fwd_compute if lay.rc == "full" else 0.0)
    n_tp_passes = 2 + (1 if lay.rc == "full" else 0)
    if lay.rc == "op":
        # torchtitan's op-level selective AC (0.2.2 activation_checkpoint.py, _op_sac_save_list): the outputs of
        # matmuls, attention and TP reduce-scatters are saved, except every second matmul of the block. Of its seven
        # (wq, wk, wv, wo, w1, w3, w2, in call order) wk, wo and w3 run again in backward, with every element-wise op
        # (norms, RoPE, SiLU, products) and the TP all-gathers (not saved: half of a direction's SP collectives; all
        # of them without SP, whose all-reduces are not saved either).
        re_compute = (gemm(T, kv / tp, h)[0] + gemm(T, h, q / tp)[0] + gemm(T, f / tp, h)[0] + elem_fwd)
        n_tp_passes = 2.5 if lay.sp else 3
    n_a2a = 1.0 + (0.5 if lay.rc == "full" else 0.0)
    if lay.tco and tp > 1:
        tp_exposed = n_tp_passes * tp_comm * TP_OVERLAP_EXPOSED + TP_OVERLAP_GEMM_SLOWDOWN * gemm_total
    else:
        tp_exposed = n_tp_passes * tp_comm
    cp_exposed = cp_comm * (3 + (1 if lay.rc == "full" else 0))
    eager_fwd = eager_bwd = 0.0
    if w.kernels == "eager":  # unfused kernels beyond the fused count above (eager.py), again under recompute
        bytes_fwd, bytes_bwd = eager.layer_bytes(q / tp, kv / tp, m.ffn_hidden_size / tp, h / spd)
        eager_fwd, eager_bwd = T * bytes_fwd / eager.bandwidth(spec), T * bytes_bwd / eager.bandwidth(spec)
        if lay.rc in ("full", "op"):
            re_compute += eager_fwd
    compute = gemm_total + attn_fwd + attn_bwd + 3 * elem_fwd + eager_fwd + eager_bwd + re_compute
    kernels = layer_kernel_overhead_s(spec, lay.rc in ("full", "op"))
    gpu_time = compute + tp_exposed + cp_exposed + a2a * n_a2a + kernels
    cpu_time = launch * (1.33 if lay.rc in ("full", "op") else 1.0)
    total = max(gpu_time, cpu_time)
    return total, {"gemm": gemm_total, "attention": attn_fwd + attn_bwd, "elementwise": 3 * elem_fwd,
                   "recompute": re_compute, "tp_comm": tp_exposed, "cp_comm": cp_exposed, "moe_dispatch": a2a * n_a2a,
                   "launch_bound": max(0.0, cpu_time - gpu_time), **({"kernel_gaps": kernels} if kernels else {}),
                   **({"eager_elementwise": eager_fwd + eager_bwd} if w.kernels == "eager" else {})}


def _step_time(w: SimWorkload, lay: _Layout, cache: dict | None = None) -> tuple[float, dict[str, float]]:
    """Noise-free iteration seconds and a phase breakdown (seconds per iteration). ``cache`` keeps partial
    results across calls (layer times do not depend on pp, vp, dp; nothing but the exposure depends on the
    overlap knobs)."""
    if cache is None:
        parts = _step_parts(w, lay, None)
    else:
        pkey = ("step", lay._replace(ogr=False, opg=False))
        parts = cache.get(pkey)
        if parts is None:
            parts = cache[pkey] = _step_parts(w, lay, cache)
    total, grad_exp, ag_exp = _exposed(parts, lay.rc, lay.ogr, lay.opg)
    return total, {**parts[5], "dp_grad_sync": grad_exp, "dp_param_gather": ag_exp}


def _exposed(parts: tuple, rc: str, ogr: bool, opg: bool) -> tuple[float, float, float]:
    """(iteration seconds, exposed grad sync, exposed param gather): overlap_grad_reduce hides the grad sync
    behind the last micro-batch's backward, overlap_param_gather the all-gather behind the first forward
    (90% of the window is usable; the last bucket, 5%, is always exposed)."""
    t_pipe, t_max, t_grad, t_ag, t_opt, _ = parts
    frac_bwd = 0.75 if rc == "full" else 2.0 / 3.0
    win_bwd, win_fwd = frac_bwd * t_max, (1 - frac_bwd) * t_max
    grad_exp = (max(0.0, t_grad - 0.9 * win_bwd) + 0.05 * t_grad) if ogr else t_grad
    ag_exp = (max(0.0, t_ag - 0.9 * win_fwd) + 0.05 * t_ag) if opg else t_ag
    return t_pipe + grad_exp + ag_exp + t_opt + FIXED_ITER_S, grad_exp, ag_exp


def _cached_layer(w: SimWorkload, lay: _Layout, cache: dict | None) -> tuple[float, dict[str, float]]:
    """:func:`_layer_time`, kept in ``cache`` by what it depends on."""
    if cache is None:
        return _layer_time(w, lay)
    lkey = lay._replace(pp=1, vp=1, dp=1, nmb=1, do=False, ogr=False, opg=False)
    hit = cache.get(lkey)
    if hit is None:
        hit = cache[lkey] = _layer_time(w, lay)
    return hit


def _step_parts(w: SimWorkload, lay: _Layout, cache: dict | None) -> tuple[float, float, float, float, float, dict]:
    """(pipeline seconds, slowest stage per micro-batch, DP grad sync, DP param gather, optimizer, phases)."""
    m, spec = w.model, w.spec
    h, a, tp, V = m.hidden_size, lay.a, lay.tp, m.vocab_size
    T = lay.mbs * m.seq_length / lay.cp
    spd = tp if lay.sp else 1
    peak = spec.peak_bf16_flops if a == 2 else spec.peak_bf16_flops / 2
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    if lay.rc == "layer":  # torchtitan's layer-level selective AC: every ac_every-th block fully recomputed
        (t_full, p_full), (t_none, p_none) = (_cached_layer(w, lay._replace(rc=rc), cache) for rc in ("full", "none"))
        share = 1.0 / lay.ac_every
        t_layer = share * t_full + (1 - share) * t_none
        parts = {k: share * p_full.get(k, 0.0) + (1 - share) * p_none.get(k, 0.0) for k in {*p_full, *p_none}}
    else:
        t_layer, parts = _cached_layer(w, lay, cache)
    # output layer (bf16 even under fp8) + vocab-parallel cross-entropy (fp32, memory-bound)
    t_logits = 3 * 2 * T * h * V / tp / (peak * _gemm_eff(spec, T, V / tp, h)) + T * V / tp * 20 / hbm
    if spec.small_work_terms:  # the output GEMM's memory bound, and the micro-batch's own kernels
        t_logits += 3 * max(0.0, gemm_memory_s(T, V / tp, h, a, spec.hbm_bytes_per_s)
                            - 2 * T * h * V / tp / (peak * _gemm_eff(spec, T, V / tp, h)))
        t_logits += microbatch_kernel_overhead_s(spec)
    if w.kernels == "eager":  # eager fp32 cross-entropy beyond the 20 bytes per logit above (eager.py)
        t_logits += T * V / tp * eager.LOSS_BYTES_PER_LOGIT / eager.bandwidth(spec)
    t_embed = 3 * T * h * a / hbm
    if tp > 1:
        bw, lat = _coll_bw(spec, tp, 1, "ar")
        t_embed += 2 * (2 * (tp - 1) / tp * T * h * a / bw + lat)
    L, p, v, nmb = m.num_layers, lay.pp, lay.vp, lay.nmb
    per_stage = L / p * t_layer
    if p == 1:
        t_max = t_mean = per_stage + t_logits + t_embed
        p2p = 0.0
    else:
        t_first, t_last = per_stage + t_embed, per_stage + t_logits
        t_max, t_mean = max(t_first, t_last), per_stage + (t_logits + t_embed) / p
        stride = tp * lay.cp * lay.dp
        bw = spec.ib_bytes_per_s if stride >= spec.gpus_per_node else spec.nvlink_bytes_per_s
        t_p2p = T * h * a / spd / bw + IB_LATENCY_S
        p2p = (nmb * v + p - 1) * 2 * t_p2p * (0.5 if v == 1 else 0.3)
        p2p += pipeline_sync_s(spec, (nmb * v + p - 1) * 2)  # with the small-work terms: one per exchange
    bubble = (p - 1) / v * t_mean
    t_pipe = nmb * t_max + bubble + p2p

    d1, e1, _, _ = _stage_params(w, lay)
    eager_dp: dict[str, float] = {}
    if lay.fsdp:  # torchtitan: FSDP2 per block and per micro-batch (fsdp.py), its exposure already reckoned
        t_grad, t_ag, t_opt, eager_dp = _fsdp_parts(w, lay, t_layer, parts["recompute"], d1)
        t_pipe += sum(eager_dp.values())
    else:
        t_grad, t_ag, t_opt = _per_iteration_dp_parts(w, lay, d1, e1)
    scale = nmb * L / p
    phases = {k: v_ * scale for k, v_ in parts.items()}
    phases.update(eager_dp)
    phases.update({"logits_loss": nmb * t_logits, "pipeline_bubble": bubble, "pipeline_p2p": p2p,
                   "optimizer": t_opt, "other": FIXED_ITER_S, "forward_backward": t_pipe})
    return t_pipe, t_max, t_grad, t_ag, t_opt, phases


def _per_iteration_dp_parts(w: SimWorkload, lay: _Layout, d1: float, e1: float) -> tuple[float, float, float]:
    """(gradient sync, parameter all-gather, optimizer) seconds per iteration of data parallelism that syncs once per
    iteration (Megatron's, ``SimWorkload.dp_sharding = "per_iteration"``), before overlap (:func:`_exposed`): fp32
    main grads reduce-scattered (distributed optimizer) or all-reduced, bf16 parameters all-gathered, per GPU.
    ``d1`` / ``e1``: dense / expert parameters on this GPU."""
    spec, tp, p, a = w.spec, lay.tp, lay.pp, lay.a
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    groups = [(d1, lay.dp * lay.cp, tp * lay.cp)]
    if e1:
        groups.append((e1, max(1, w.world_size // (p * lay.ep * tp)), tp * lay.ep))
    t_grad = t_ag = opt_params = 0.0
    for params, n, stride in groups:
        opt_params += params / n if lay.do else params
        if n <= 1:
            continue
        bw, lat = _coll_bw(spec, n, stride)
        rs = (n - 1) / n * params * 4 / bw + 4 * lat
        if lay.do:
            t_grad += rs
            t_ag += (n - 1) / n * params * a / bw + 4 * lat
        else:
            t_grad += 2 * rs
    t_opt = opt_params * OPT_BYTES_PER_PARAM / hbm + 2e-3 + (d1 + e1) * 4 * 2 / hbm  # + grad norm / zeroing
    return t_grad, t_ag, t_opt


def _fsdp_parts(w: SimWorkload, lay: _Layout, t_layer: float, recompute_s: float, params: float
                ) -> tuple[float, float, float, dict[str, float]]:
    """(exposed gradient reduce seconds, exposed parameter gather seconds, optimizer seconds, eager seconds by
    phase) per iteration of a torchtitan launch (:mod:`.fsdp`). ``t_layer``: one block's forward + backward seconds
    for one micro-batch, ``recompute_s`` of it recompute (in backward); ``params``: parameters on this GPU (first
    pipeline stage). The eager seconds (``kernels = "eager"``, :mod:`.eager`): FSDP2's copies and the compute
    slowed by NCCL's SMs while a collective runs beside it, per iteration."""
    m, spec, tp, a = w.model, w.spec, lay.tp, lay.a
    pc = param_counts(m)
    block = pc["tp_layer"] / tp + pc["replicated_layer"]  # one block's parameters on this TP rank
    edge = pc["embedding"] / tp  # the embedding; the output projection is as large (untied in llama3)
    n, rep = lay.fsdp, lay.rep

    def gather(p_: float) -> float:
        if n <= 1:
            return 0.0
        bw, lat = _coll_bw(spec, n, tp, "ag")
        return (n - 1) / n * p_ * a / bw + lat

    def reduce(p_: float) -> float:
        t = 0.0
        if n > 1:
            bw, lat = _coll_bw(spec, n, tp, "rs")
            t += (n - 1) / n * p_ * fsdp.REDUCE_BYTES / bw + lat
        if rep > 1:  # HSDP: the shard all-reduced over the replicas (n x tp ranks apart)
            bw, lat = _coll_bw(spec, rep, n * tp, "ar")
            t += 2 * (rep - 1) / rep * p_ / n * fsdp.REDUCE_BYTES / bw + lat
        return t

    fwd_s = (t_layer - recompute_s) / 3  # backward is twice the forward, plus the recompute
    layers = m.num_layers / lay.pp
    fwd, bwd = fsdp.exposed_per_microbatch(
        gather_s=gather(block), reduce_s=reduce(block), layers=layers, fwd_s=fwd_s,
        bwd_s=t_layer - fwd_s, reshard=lay.raf, first_gather_s=gather(edge), last_gather_s=gather(edge),
        first_reduce_s=reduce(edge), last_reduce_s=reduce(edge))
    hbm = spec.hbm_bytes_per_s * ELEM_EFF
    shard = params / max(1, n)
    # AdamW on the fp32 shards, the gradient norm (read) and zeroing (write) of the sharded fp32 gradients, and the
    # same fixed 2 ms as Megatron's optimizer step (_step_parts)
    t_opt = shard * (fsdp.ADAM_BYTES_PER_PARAM + 2 * fsdp.REDUCE_BYTES) / hbm + 2e-3
    extra: dict[str, float] = {}
    if w.kernels == "eager":
        bw = eager.bandwidth(spec)
        t_opt += shard * eager.optimizer_bytes(w.optimizer_implementation) / bw
        gathers = 2 if lay.raf else 1
        copies = (layers * eager.fsdp_copy_bytes(block, n, gathers) + 2 * eager.fsdp_copy_bytes(edge, n, 1)) / bw
        # every collective of a micro-batch; what is not exposed ran beside compute, which lost NCCL's SMs meanwhile
        comm = (2 * gather(edge) + layers * gathers * gather(block) + layers * reduce(block) + 2 * reduce(edge))
        beside = max(0.0, comm - fwd - bwd)
        extra = {"fsdp_copies": lay.nmb * copies, "nccl_sm_share": lay.nmb * eager.nccl_sm_share(spec) * beside}
    return lay.nmb * bwd, lay.nmb * fwd, t_opt, extra
