"""Peak memory per GPU: weights, gradients and optimizer state per pipeline stage, activations by recompute
mode (Korthikanti et al. 2022, Table 2, generalised to GQA, SwiGLU and MoE), transients and the caching
allocator's margin. All bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .hardware import GiB
from .layout import _imbalance, _Layout, _layout, param_counts
from .workload import SimWorkload, get_workload

NONTORCH_BYTES = int(1.25 * GiB)  # CUDA context, cuBLAS workspaces, NCCL buffers (outside the allocator)
TP_OVERLAP_BUFFERS = int(0.75 * GiB)  # Transformer Engine userbuffers for tp_comm_overlap
FRAGMENTATION = 1.05  # reserved / allocated at the peak (caching allocator); MoE: more


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of the most loaded GPU, bytes. ``reserved`` is what the caching allocator holds at the
    peak (what capacity governs); ``device_used`` adds memory outside the allocator."""

    weights_and_optimizer: float
    activations: float
    transient: float
    allocated: float
    reserved: float
    device_used: float
    capacity: float
    stage: str  # "first" or "last" pipeline stage (the one that peaks)
    largest_alloc: float  # the biggest single transient allocation (what an OOM "tried to allocate")

    @property
    def oom(self) -> bool:
        return self.device_used > self.capacity


def _stage_params(w: SimWorkload, lay: _Layout) -> tuple[float, float, float, float]:
    """(dense params, expert params) on one GPU of the first and of the last pipeline stage."""
    m, pc = w.model, param_counts(w.model)
    per = m.num_layers / lay.pp
    body_dense = per * (pc["tp_layer"] / lay.tp + pc["replicated_layer"])
    body_exp = per * pc["expert_layer"] / (lay.ep * lay.tp)  # expert TP = TP (Megatron's default)
    emb = pc["embedding"] / lay.tp
    if lay.pp == 1:
        first = body_dense + emb * (2 if m.untie_embeddings_and_output_weights else 1) + m.hidden_size
        return first, body_exp, first, body_exp
    # With PP > 1 the last stage holds the output layer (a copy of the embedding when tied).
    return body_dense + emb, body_exp, body_dense + emb + m.hidden_size, body_exp


def _bytes_per_param(lay: _Layout, shards: int) -> float:
    """bf16: 2 (param) + 4 (fp32 main grad) + 12 (fp32 master, Adam m, v); fp32: 4 + 4 + 8.
    The distributed optimizer splits the optimizer part over ``shards`` data-parallel ranks. torchtitan's FSDP2
    keeps fp32 parameters, gradients and both Adam moments sharded over its shard degree: 16 / ``lay.fsdp``."""
    if lay.fsdp:
        return 16.0 / lay.fsdp
    base, opt = (6.0, 12.0) if lay.a == 2 else (8.0, 8.0)
    return base + (opt / shards if lay.do else opt)


def _act_per_layer(w: SimWorkload, lay: _Layout) -> tuple[float, float]:
    """(stored, working) activation bytes of one layer for one micro-batch on one GPU.
    stored: what stays until the backward (depends on recompute); working: one layer's full
    activations (what full recompute rebuilds, transiently)."""
    m = w.model
    h, a = m.hidden_size, lay.a
    lin = 1 if lay.fp8 != "none" else a  # Transformer Engine keeps fp8 copies of linear inputs
    q, kv = m.head_dim * m.num_attention_heads, m.head_dim * m.groups
    T = lay.mbs * m.seq_length / lay.cp  # tokens per micro-batch on this rank
    tp = lay.tp
    spd = tp if lay.sp else 1
    drop = 2 if m.dropout else 0
    # sequence region: LN1 input, QKV input, LN2 input, MLP input (+ two 1-byte dropout masks)
    seq = T * h * (2 * a + 2 * lin + drop) / spd
    # attention: Q, K, V, output (= projection input); flash attention keeps the softmax statistics only
    attn = T * (a * q + 2 * a * kv + lin * q) / tp + T * m.num_attention_heads * 4 / tp
    if not m.flash_attention and lay.rc == "none":
        attn += T * m.seq_length * m.num_attention_heads * (a + (3 if m.dropout else 0)) / tp
    g = 2 if m.swiglu else 1
    if m.moe:
        f = m.expert_ffn
        rows = T * m.moe_router_topk * _imbalance(m, lay.ep)  # token copies this GPU's experts process
        mlp = rows * (lin * h + f * (a * g + lin) / tp)
        mlp += rows * h * a  # combine input (unpermute)
        if lay.disp == "allgather":
            mlp += lay.ep * T * h * a  # tokens gathered from the EP x TP group
        mlp += T / spd * m.num_experts * 4 * 2  # router logits and probabilities, fp32
        fs = m.moe_shared_expert_intermediate_size
        mlp += T * fs * (a * g + lin) / tp
    else:
        mlp = T * m.ffn_hidden_size * (a * g + lin) / tp
    full_layer = seq + attn + mlp
    if lay.rc == "full":
        return T * h * a / spd, full_layer  # only the layer input is kept
    if lay.rc == "op" and not m.moe:  # torchtitan's op-level selective AC keeps the block's input and the saved ops'
        # outputs: wq, wv, attention (+ its softmax statistics), w1, and the TP reduce-scatters (block output)
        kept = T * (2 * h * a / spd + (2 * q + kv + m.ffn_hidden_size) * a / tp) + T * m.num_attention_heads * 4 / tp
        return kept, full_layer
    if lay.rc == "layer":  # torchtitan's layer-level selective AC: one block in ac_every keeps its input only
        share = 1.0 / lay.ac_every
        return share * T * h * a / spd + (1 - share) * full_layer, full_layer
    return full_layer, 0.0


def memory(workload: str | SimWorkload, setting: Mapping[str, Any]) -> MemoryBreakdown:
    """Peak memory per GPU (max over the first and last pipeline stages)."""
    w = get_workload(workload)
    return _memory(w, _layout(w, setting))


def _memory(w: SimWorkload, lay: _Layout) -> MemoryBreakdown:
    m, spec = w.model, w.spec
    h, a, V = m.hidden_size, lay.a, m.vocab_size
    T = lay.mbs * m.seq_length / lay.cp
    spd = lay.tp if lay.sp else 1
    n_dense = lay.dp * lay.cp  # the distributed optimizer shards over data parallel x context parallel
    n_exp = max(1, w.world_size // (lay.pp * lay.ep * lay.tp))
    d1, e1, dl, el = _stage_params(w, lay)
    fp8_extra = 1.0 if lay.fp8 != "none" else 0.0  # fp8 weight copies of the linear layers
    wo_first = d1 * (_bytes_per_param(lay, n_dense) + fp8_extra) + e1 * (_bytes_per_param(lay, n_exp) + fp8_extra)
    wo_last = dl * (_bytes_per_param(lay, n_dense) + fp8_extra) + el * (_bytes_per_param(lay, n_exp) + fp8_extra)

    stored, working = _act_per_layer(w, lay)
    L, p, v = m.num_layers, lay.pp, lay.vp
    # layer-micro-batches held at the peak (1F1B warm-up): first stage p micro-batches of L/p layers,
    # x (1 + (p-1)/(p*v)) when interleaved; the last stage one micro-batch (+ (v-1)*p warm-up chunks).
    if p == 1:
        held_first = held_last = float(L)
    else:
        fill = min(1.0, lay.nmb / p)
        held_first = L * (1 + ((p - 1) / (p * v) if v > 1 else 0.0)) * fill
        held_last = L * (v - 1) / v * fill + L / (p * v)  # (v-1)*p warm-up chunks of L/(p*v) layers, + one
    n_first = min(lay.nmb, p) if v == 1 else p  # micro-batches in flight on the first stage
    emb_act = n_first * (8 * T + (T * h if m.dropout else 0)) / lay.tp  # token ids (int64) + dropout mask
    logits_stored = 4 * T * h / spd + 4 * T * V / lay.tp  # final norm in/out; fp32 softmax kept for backward
    logits_transient = 6 * T * V / lay.tp  # bf16 logits + fp32 copy during the loss
    act_first = held_first * stored + emb_act
    act_last = held_last * stored + (logits_stored if p > 1 else 0.0)
    if p == 1:
        act_first += logits_stored

    transient_common = working + (TP_OVERLAP_BUFFERS if lay.tco else 0)
    if m.moe:
        transient_common += 2 * T * m.moe_router_topk * h * a * _imbalance(m, lay.ep)  # dispatch buffers
    if not lay.do:
        transient_common += 0.05 * (d1 + e1) * 4  # grad-norm / multi-tensor-apply chunks
    if lay.fsdp > 1:  # FSDP2: the running and the prefetched block gathered (bf16), one block's unsharded fp32
        pc = param_counts(m)  # gradient before its reduce-scatter, the output layer kept gathered (not resharded)
        block = pc["tp_layer"] / lay.tp + pc["replicated_layer"]
        transient_common += block * (2 * a + 4) + pc["embedding"] / lay.tp * a
    tr_first = transient_common + (logits_transient if p == 1 else 0.0)
    tr_last = transient_common + logits_transient
    frag = FRAGMENTATION + (0.04 if m.moe else 0.0) + (0.02 if lay.pp > 1 else 0.0)
    alloc_first = wo_first + act_first + tr_first
    alloc_last = wo_last + act_last + tr_last
    if alloc_first >= alloc_last:
        wo, act, tr, stage = wo_first, act_first, tr_first, "first"
    else:
        wo, act, tr, stage = wo_last, act_last, tr_last, "last"
    allocated = wo + act + tr
    reserved = allocated * frag
    nontorch = NONTORCH_BYTES + 0.1 * GiB * sum(1 for x in (lay.tp, lay.pp, lay.cp, lay.ep) if x > 1)
    largest = max(working, logits_transient if stage == "last" or p == 1 else 0.0, T * h * a * 4 / spd)
    return MemoryBreakdown(weights_and_optimizer=wo, activations=act, transient=tr, allocated=allocated,
                           reserved=reserved, device_used=reserved + nontorch, capacity=spec.memory_bytes,
                           stage=stage, largest_alloc=largest)
