"""The one model of a decoder-only transformer: its shape, parameter count, FLOPs and memory terms.

Every part of the project that reasons about "the model being trained" reads it from here: the offline
priors (``priors/offline.py``), the bank's workload signature (``bank/signature.py``), the report's MFU
(``report/mfu.py``), the embedded workload's FLOP log line (``workloads/minigpt.py``); the simulator's
``ModelSpec`` has the same shape under the same Megatron names (``Transformer.from_args(spec.model_dump())``
gives its parameter counts and FLOPs, see tests/test_transformer.py).

Spellings. Frameworks name the same dimension differently (Megatron ``num_query_groups``, torchtitan
``n_kv_heads``, Hugging Face ``num_key_value_heads``, nanoGPT ``n_embd``, ...). ``ALIASES`` is the one table
from every spelling to the Megatron name; ``resolve``/``canonical`` apply it.

Shape (per layer; h hidden, a heads, g query groups, d head dim = h / a unless set, f MLP width, V vocab):

    attention  h (a d + 2 g d) + a d h           QKV and output projections (GQA: K, V have g heads)
    MLP        k h f                               k = 3 for a gated (SwiGLU) MLP, 2 for GELU
    MoE        E k h f_e  (+ k h f_s shared)       every layer MoE, E experts, top-k routing
    norms      2 h per layer, h final; router h E per MoE layer
    embedding  V h, twice when untied (input embedding + output head)

FLOPs. Two conventions are in use (``FlopsConvention``: each framework's spec names its own); both count 6 FLOPs
per matmul parameter per token (2 per multiply-add, x3 for forward + backward) and both size the attention core by
the *query* width a d, not the K/V width (GQA shrinks the K/V projections, not QK^T or AV):

    CAUSAL_MATMULS  6 N_mm + 6 L s a d  N_mm = matmul parameters the token passes through (top-k
                                         experts only; the output head, not the input embedding);
                                         attention core 12 L s a d halved because the mask is causal
                                         (Megatron-LM ``num_floating_point_operations``)
    FULL_ACTIVE 6 (N - N_emb) + 12 L s a d  all (active) parameters but the input embedding (norms
                                         included; a tied head is that embedding and drops out too),
                                         the core counted without the causal discount
                                         (torchtitan ``get_nparams_and_flops``)

Memory (``memory_terms``), per device, bytes, mixed precision as Megatron does it:

* weights + grads + optimizer: 2 bf16 weight + 4 fp32 grad + 12 Adam (fp32 master, m, v) = 18 per param
  (fp32 training: 4 + 4 + 8); the distributed optimizer shards the optimizer part over DP (ZeRO-1,
  Rajbhandari et al. 2020), experts over the expert-data-parallel group; fp8 keeps a 1-byte weight copy;
* activations per layer per micro-batch (Korthikanti et al. 2022, Eq. 1-6, generalised to gated
  and MoE MLPs): s b (18 h + body + 5 a s) with body = 4 f (GELU) or 6 f (SwiGLU); 10 h of the 18 h is
  replicated over TP unless sequence parallel; the 5 a s scores term vanishes with flash/fused attention
  or selective recompute; full recompute keeps only each layer's input (2 s b h) plus one layer re-run;
* the first 1F1B pipeline stage holds min(pp, m) micro-batches of L/pp layers, x (1 + (pp-1)/(pp v)) when
  interleaved with v virtual stages (Narayanan et al. 2021); logits s b V / t, x3 when an fp32 copy is kept.

Parallel layout: ``data_parallel(world, tp, pp, cp)`` is the one place that derives DP = world / (tp pp cp).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# ------------------------------------------------------------------------------ spellings
ALIASES: dict[str, tuple[str, ...]] = {
    # Megatron name: (Megatron, then the short and other frameworks' spellings; the first present wins)
    "num_layers": ("num_layers", "layers", "n_layer", "n_layers", "num_hidden_layers"),
    "hidden_size": ("hidden_size", "hidden", "d_model", "n_embd", "dim"),
    "num_attention_heads": ("num_attention_heads", "heads", "n_head", "n_heads"),
    "num_query_groups": ("num_query_groups", "kv_heads", "n_kv_heads", "n_kv_head", "num_kv_heads",
                         "num_key_value_heads"),
    "kv_channels": ("kv_channels", "head_dim"),
    "ffn_hidden_size": ("ffn_hidden_size", "ffn", "ffn_hidden", "intermediate_size", "inter_dim"),
    "vocab_size": ("vocab_size", "vocab", "padded_vocab_size"),
    "seq_length": ("seq_length", "seq", "seq_len", "sequence_length", "max_seq_len", "block_size"),
    "global_batch_size": ("global_batch_size", "gbs", "global_batch", "batch_size"),
    "num_experts": ("num_experts", "experts", "n_experts", "num_moe_experts", "num_local_experts",
                    "n_routed_experts"),
    "moe_router_topk": ("moe_router_topk", "topk", "top_k", "experts_per_token", "num_experts_per_tok",
                        "n_activated_experts"),
    "moe_ffn_hidden_size": ("moe_ffn_hidden_size", "moe_intermediate_size", "moe_inter_dim"),
    "moe_shared_expert_intermediate_size": ("moe_shared_expert_intermediate_size", "shared_expert_intermediate_size"),
    "swiglu": ("swiglu",),
    "untie_embeddings_and_output_weights": ("untie_embeddings_and_output_weights",),
}
_SPELLING = {s: name for name, spellings in ALIASES.items() for s in spellings}


def resolve(args: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Megatron name -> (the spelling found, its value) for every known dimension ``args`` sets (not None).
    Per dimension the earliest spelling in ``ALIASES`` wins, so a Megatron name beats an alias."""
    out: dict[str, tuple[str, Any]] = {}
    for name, spellings in ALIASES.items():
        for s in spellings:
            if args.get(s) is not None:
                out[name] = (s, args[s])
                break
    return out


def canonical(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` with every known spelling renamed to its Megatron name; other keys kept as they are."""
    found = resolve(args)
    out = {k: v for k, v in args.items() if k not in _SPELLING}
    out.update({name: v for name, (_, v) in found.items()})
    return out


# ------------------------------------------------------------------------------ the shape
def minigpt_ffn(hidden: int) -> int:
    """The embedded workload's SwiGLU width: 8 h / 3 rounded up to a multiple of 64."""
    return int(math.ceil(8 * hidden / 3 / 64) * 64)


@dataclass(frozen=True, kw_only=True)
class FlopsConvention:
    """How a framework's logs count a token's training FLOPs (see the module doc): which parameters are counted
    at 6 FLOPs per token, and whether the attention core is halved for the causal mask."""

    active_params: bool  # True: all active parameters but the input embedding; False: the matmul parameters
    causal: bool  # True: the attention core 12 L s a d halved (the mask is causal)
    # what it counts, in words (the report's MFU formula); a framework's spec may build the value with its own words
    # (whose accounting it is): the same convention, equal to this one
    text: str = field(default="", compare=False)


CAUSAL_MATMULS = FlopsConvention(  # Megatron-LM's num_floating_point_operations
    active_params=False, causal=True,
    text="6 FLOPs per matmul parameter per token, forward and backward; causal attention 12·L·S²·h·B halved")
FULL_ACTIVE = FlopsConvention(  # torchtitan's get_nparams_and_flops
    active_params=True, causal=False,
    text="6 FLOPs per active parameter but the input embedding per token, forward and backward; attention "
         "12·L·S²·h·B, not halved")


@dataclass(frozen=True, kw_only=True)
class Transformer:
    """A decoder-only transformer. ``groups``/``head_dim``/``ffn``/``expert_ffn`` 0 = the usual default."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    groups: int = 0  # query groups (GQA); 0 = heads (multi-head attention)
    head_dim: int = 0  # 0 = hidden // heads
    ffn: int = 0  # dense MLP width; 0 = 4 * hidden
    swiglu: bool = False  # gated MLP: 3 matrices of h x f instead of 2
    experts: int = 0  # 0 = dense; > 0: every layer's MLP is a mixture of this many experts
    topk: int = 1  # experts per token
    expert_ffn: int = 0  # 0 = ffn
    shared_ffn: int = 0  # shared-expert width, 0 = none
    gbs: int = 0  # sequences per iteration; 0 = unknown
    untied: bool = False  # a separate output head (Megatron --untie-embeddings-and-output-weights)

    @classmethod
    def from_args(cls, args: Mapping[str, Any], *, framework: str | None = None,
                  fallback: Mapping[str, int] | None = None) -> "Transformer":
        """The shape from workload arguments in any spelling of ``ALIASES``.

        ``framework`` supplies that framework's defaults for what the arguments leave out: "minigpt" is
        always SwiGLU with ``minigpt_ffn`` (the embedded workload's own rule); otherwise Megatron's: GELU
        unless ``swiglu``, f = 4 h. ``fallback`` (Megatron names) fills a missing or zero dimension; a
        dimension neither gives is 0. A value that is not an integer raises ValueError naming the field."""
        found = resolve(args)
        fb = dict(fallback or {})

        def i(name: str, default: int = 0) -> int:
            if name not in found or not found[name][1]:
                return int(fb.get(name, default))
            spelling, v = found[name]
            try:
                return int(v)
            except (TypeError, ValueError):
                raise ValueError(f"workload {name} ({spelling}={v!r}): expected an integer") from None

        def b(name: str) -> bool:
            return bool(found[name][1]) if name in found else False

        minigpt = framework == "minigpt"
        h = i("hidden_size")
        experts = i("num_experts")
        return cls(
            layers=i("num_layers"), hidden=h, heads=i("num_attention_heads"), vocab=i("vocab_size"),
            seq=i("seq_length"), groups=i("num_query_groups"), head_dim=i("kv_channels"),
            ffn=i("ffn_hidden_size") or (minigpt_ffn(h) if minigpt and h else 0),
            swiglu=minigpt or b("swiglu"), experts=experts, topk=i("moe_router_topk", 2) if experts else 1,
            expert_ffn=i("moe_ffn_hidden_size"), shared_ffn=i("moe_shared_expert_intermediate_size"),
            gbs=i("global_batch_size"), untied=b("untie_embeddings_and_output_weights"),
        )

    def to_args(self) -> dict[str, Any]:
        """The shape under the workload arguments' names (Megatron's, what ``from_args`` reads back); unset widths
        are left out."""
        out: dict[str, Any] = {
            "num_layers": self.layers, "hidden_size": self.hidden, "num_attention_heads": self.heads,
            "num_query_groups": self.groups, "kv_channels": self.head_dim, "ffn_hidden_size": self.ffn,
            "vocab_size": self.vocab, "seq_length": self.seq, "global_batch_size": self.gbs, "swiglu": self.swiglu,
            "untie_embeddings_and_output_weights": self.untied,
        }
        if self.is_moe:
            out.update(num_experts=self.experts, moe_router_topk=self.topk, moe_ffn_hidden_size=self.expert_ffn,
                       moe_shared_expert_intermediate_size=self.shared_ffn)
        return {k: v for k, v in out.items() if v or isinstance(v, bool)}

    # ---- widths
    @property
    def kv_groups(self) -> int:
        return self.groups or self.heads

    @property
    def dhead(self) -> int:
        return self.head_dim or self.hidden // max(1, self.heads)

    @property
    def q_width(self) -> int:
        """a d: the query (and attention output) width; = h unless kv_channels says otherwise."""
        return self.dhead * self.heads

    @property
    def kv_width(self) -> int:
        """g d: the width of K and of V."""
        return self.dhead * self.kv_groups

    @property
    def mlp_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.mlp_width

    @property
    def mlp_mats(self) -> int:
        """h x f matrices per MLP (or per expert): gate, up, down for SwiGLU; up, down for GELU."""
        return 3 if self.swiglu else 2

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # ---- parameters (per layer unless named otherwise)
    @property
    def attention_params(self) -> int:
        h = self.hidden
        return h * (self.q_width + 2 * self.kv_width) + self.q_width * h

    @property
    def mlp_params(self) -> int:
        """The dense MLP, or the shared expert of a MoE layer (0 without one)."""
        width = self.shared_ffn if self.is_moe else self.mlp_width
        return self.mlp_mats * self.hidden * width

    @property
    def expert_params(self) -> int:
        """All experts of one MoE layer (0 for a dense model)."""
        return self.experts * self.mlp_mats * self.hidden * self.expert_width if self.is_moe else 0

    @property
    def embedding_params(self) -> int:
        """One V x h matrix (the input embedding; the output head is another when untied)."""
        return self.vocab * self.hidden

    def param_counts(self) -> dict[str, float]:
        """Parameters by how they are sharded: ``tp_layer`` (split over TP: attention, dense/shared MLP),
        ``expert_layer`` (split over EP x expert-TP), ``replicated_layer`` (norms, router), ``embedding``
        (one V x h matrix); ``total`` and ``active`` (what one token passes through: top-k experts)."""
        h, L = self.hidden, self.layers
        tp_layer = self.attention_params + self.mlp_params
        expert_layer = self.expert_params
        rep_layer = 2 * h + (h * self.experts if self.is_moe else 0)
        n_emb = 2 if self.untied else 1
        total = L * (tp_layer + expert_layer + rep_layer) + n_emb * self.embedding_params + h
        active = total - L * expert_layer * (1 - (self.topk / self.experts if self.is_moe else 1))
        return {"tp_layer": tp_layer, "expert_layer": expert_layer, "replicated_layer": rep_layer,
                "embedding": self.embedding_params, "total": total, "active": active}

    def matmul_params(self, *, active: bool = True) -> float:
        """Parameters in matmuls, without the input embedding: L (attention + MLP + experts) + the output
        head h V. ``active``: only the top-k experts a token is routed to."""
        experts = self.expert_params * (self.topk / self.experts if active and self.is_moe else 1)
        return self.layers * (self.attention_params + self.mlp_params + experts) + self.hidden * self.vocab

    # ---- FLOPs
    def flops_per_token(self, *, convention: FlopsConvention = CAUSAL_MATMULS) -> float:
        """Training FLOPs (forward + backward, no recompute) per token; see the module doc."""
        n = (self.param_counts()["active"] - self.embedding_params if convention.active_params
             else self.matmul_params())
        return training_flops(matmul_params=n, tokens=1, layers=self.layers, seq=self.seq, attn_width=self.q_width,
                              causal=convention.causal)

    def flops_per_iteration(self, *, convention: FlopsConvention = CAUSAL_MATMULS) -> float:
        """FLOPs of one global batch (``gbs`` sequences of ``seq`` tokens)."""
        return self.gbs * self.seq * self.flops_per_token(convention=convention)


def training_flops(*, matmul_params: float, tokens: float, layers: int, seq: int, attn_width: int,
                   causal: bool = True) -> float:
    """6 N T + (6 | 12) L s (a d) T: 6 FLOPs per matmul parameter per token, plus the attention core
    QK^T and AV (2 x 2 s a d forward per token and layer, x3 with the backward = 12 L s a d), halved
    for a causal mask (Megatron's accounting) or not (torchtitan's)."""
    return 6.0 * matmul_params * tokens + (6.0 if causal else 12.0) * layers * seq * attn_width * tokens


# ------------------------------------------------------------------------------ the parallel layout
def data_parallel(world: int, tp: int = 1, pp: int = 1, cp: int = 1) -> int | None:
    """DP = world / (tp x pp x cp), or None when the model-parallel product does not divide the world."""
    inner = max(1, tp) * max(1, pp) * max(1, cp)
    return world // inner if world % inner == 0 else None


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How one training step is spread: parallel degrees, micro-batch size and micro-batches per step."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    vpp: int = 1  # virtual pipeline stages (interleaved 1F1B)
    micro_batch: int = 1
    microbatches: int = 1  # m: micro-batches per step per pipeline
    sequence_parallel: bool = False  # only meaningful with tp > 1


@dataclass(frozen=True, kw_only=True)
class Training:
    """What decides the bytes per parameter and per activation, besides the layout."""

    bf16: bool = True
    fp8: bool = False
    distributed_optimizer: bool = False
    cpu_offload: bool = False  # optimizer state in host memory
    recompute: str = "none"  # none | selective | full
    flash_attention: bool = True  # the s x s scores are never stored
    fused_cross_entropy: bool = False  # no fp32 copy of the logits


@dataclass(frozen=True)
class MemoryTerms:
    """Per-device bytes at the first pipeline stage's peak."""

    states: float  # weights + grads + optimizer state held by this device
    activations: float  # stored activations of the layers in flight, plus one re-run layer under full recompute
    logits: float

    @property
    def total(self) -> float:
        return self.states + self.activations + self.logits


def memory_terms(t: Transformer, lay: Layout, tr: Training) -> MemoryTerms:
    """Weights, grads, optimizer state and activations on one device (the formulas of the module doc)."""
    h, a, L, V = t.hidden, t.heads, t.layers, t.vocab
    tp, pp, cp, ep, dp, b = lay.tp, lay.pp, lay.cp, lay.ep, lay.dp, lay.micro_batch
    mats = t.mlp_mats
    # parameters: attention (Q, O: 2 h a d; K, V: 2 h g d), MLP mats*h*f, one embedding V*h
    dense = L * t.attention_params + V * h
    if t.is_moe:
        dense += L * mats * h * t.shared_ffn
        experts = L * mats * h * t.expert_width * t.experts / ep  # each EP rank holds experts/ep of them
        edp = max(1, dp * cp // ep)  # expert data-parallel size (Megatron: world / (pp * ep * etp), etp = tp)
    else:
        dense += L * mats * h * t.mlp_width
        experts, edp = 0.0, 1
    opt = 12.0 if tr.bf16 else 8.0  # fp32 master + m + v, or m + v when weights are already fp32
    weights = (2 + 4 if tr.bf16 else 4 + 4) + (1 if tr.fp8 else 0)

    def per_param(shards: int) -> float:
        if tr.cpu_offload:
            return weights
        return weights + (opt / shards if tr.distributed_optimizer else opt)

    states = (dense * per_param(dp) + experts * per_param(edp)) / (tp * pp)
    # one layer, one micro-batch, bytes per token: attention 11h (+5as unfused), 2 layernorms 4h, MLP input +
    # mask 3h, MLP body k * (4 or 6) * f (GELU: 2 f-wide bf16 tensors; SwiGLU: 3); f = 4h, k = 1: Korthikanti's 34h.
    # 10h of it (LN inputs, attention/MLP inputs, dropout masks) is replicated over TP unless sequence parallel.
    sl = t.seq / cp
    attn = 5 * a * sl if not tr.flash_attention else 0.0
    body = (6 if t.swiglu else 4) * (t.topk * t.expert_width + t.shared_ffn if t.is_moe else t.mlp_width)
    total = 18 * h + body
    sp = lay.sequence_parallel and tp > 1
    dtype = 1.0 if tr.bf16 else 2.0  # fp32 activations take twice the bytes
    if tr.recompute == "full":
        per_layer = 2 * sl * b * h / (tp if sp else 1)  # only each layer's input is kept
        working = sl * b * (total + attn) / tp + (0 if sp else sl * b * 10 * h * (1 - 1 / tp))  # one layer re-run
    else:
        keep = 0.0 if tr.recompute == "selective" else attn
        per_layer = sl * b * ((total + keep) / tp if sp else 10 * h + (total - 10 * h + keep) / tp)
        working = 0.0
    m = lay.microbatches
    layers_held = L / pp * min(pp, m) * (1 + (pp - 1) / (pp * lay.vpp) if lay.vpp > 1 else 1)
    logits = sl * b * V / tp * (2 if tr.fused_cross_entropy else 6)  # bf16 logits + an fp32 copy unless fused
    return MemoryTerms(states=states, activations=dtype * (per_layer * layers_held + working), logits=dtype * logits)
