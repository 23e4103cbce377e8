"""Megatron-LM's own theoretical memory formula, for comparison with the fake step.

Megatron-LM prints "Theoretical memory footprints: weight and optimizer=..., activation=..." from
``megatron/training/theoretical_memory_usage.py`` (not in the megatron-core wheel). This is the same arithmetic,
written from its published form (the formula's facts, not its code), evaluated on the same parsed command line the
estimate builds its model from:

- weights and optimizer: the parameters of the most loaded shard (the first pipeline stage: embedding + its 1/PP
  of the transformer block, divided by TP; the output layer too when untied and PP = 1) times 18 bytes per parameter
  (bf16 weight 2 + fp32 main grad 4 + fp32 main param 4 + Adam 8), or 6 + 12 / DP with the distributed optimizer.
  A MoE layer counts all of its experts (E x the expert FFN), on every rank;
- activations of the first stage (arXiv 2205.05198, Table 2): with sequence parallelism and selective recompute,
  s b h (18 + 4 ffn / h) bytes per layer x all layers (PP stages x PP micro-batches in flight), plus the embedding's
  input (8 s b PP) and dropout (s b h PP), times the interleaved schedule's penalty 1 + (PP - 1) / (PP VP), or
  min(1, M / PP) without interleaving, plus the output layer and loss when PP = 1 (4 s b h (1 + V / h)), all
  divided by TP; otherwise s b h (10 + 24 / TP) per layer, the same additions (the output layer as 2 (s b V / TP +
  s b h)), and 5% more, not divided by TP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Formula:
    weights_and_optimizer: float  # bytes
    activations: float  # bytes
    params_most_loaded_shard: float

    @property
    def total(self) -> float:
        return self.weights_and_optimizer + self.activations


def theoretical_memory(args: Any, world: int) -> Formula:
    """Megatron-LM's theoretical footprint (bytes) of the most loaded rank for a parsed command line
    (:func:`infrarsi.adapters.megatron.cpu.model.parse`) on ``world`` ranks."""
    a = args
    h, L, heads = a.hidden_size, a.num_layers, a.num_attention_heads
    tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size
    dp = world // (tp * pp * cp)
    norm = 1 if a.normalization == "RMSNorm" else 2
    glu = 1.5 if a.swiglu else 1.0
    groups = a.num_query_groups if a.group_query_attention else heads
    if a.multi_latent_attention:
        qk, rope, v = a.qk_head_dim or 128, a.qk_pos_emb_head_dim or 64, a.v_head_dim or 128
        kv_lora = a.kv_lora_rank or 512
        q_term = h * heads * (qk + rope) if a.q_lora_rank is None else a.q_lora_rank * (h + heads * (qk + rope) + norm)
        attn = q_term + kv_lora * (h + heads * (qk + v) + norm) + h * rope + heads * v * h
    else:
        attn = 2 * h * h * ((1 + groups / heads) * (a.kv_channels * heads / h))
    pattern = a.moe_layer_pattern or [0] * L
    n_moe = sum(pattern) if a.num_experts else 0
    dense = 2 * h * (a.ffn_hidden_size * glu + norm) + attn
    shared = a.moe_shared_expert_intermediate_size or 0
    moe = 2 * h * ((a.moe_ffn_hidden_size or 0) * (a.num_experts or 1) * glu + shared * glu + norm) + attn
    block = dense * (L - n_moe) + moe * n_moe + norm * h
    embedding = h * a.padded_vocab_size
    shard = (block / pp + embedding) / tp
    if a.untie_embeddings_and_output_weights and pp == 1:
        shard += embedding / tp
    per_param = 6 + 12 / dp if a.use_distributed_optimizer else 18
    weights = shard * per_param

    s, b, V = a.seq_length, a.micro_batch_size, a.padded_vocab_size
    vp = a.virtual_pipeline_model_parallel_size
    m = a.global_batch_size // (b * dp) if dp else None
    sp_selective = a.sequence_parallel and a.recompute_granularity == "selective"
    per_layer = s * b * h * (18 + 4 * a.ffn_hidden_size / h) if sp_selective else s * b * h * (10 + 24 / tp)
    act = per_layer * L + 8 * s * b * pp + s * b * h * pp
    if vp:
        act *= 1 + (pp - 1) / (pp * vp)
    elif pp > 1 and m is not None:
        act *= min(1.0, m / pp)
    if sp_selective:
        if pp == 1:
            act += s * b * h * 4 * (1 + V / h)
        act /= tp
    else:
        if pp == 1:
            act += (s * b * V / tp + s * b * h) * 2
        act *= 1.05
    return Formula(weights_and_optimizer=weights, activations=act, params_most_loaded_shard=shard)

