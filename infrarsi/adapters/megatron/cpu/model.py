"""Megatron-LM's GPT model from its command line, built from megatron-core's own modules.

One reader of a ``pretrain_gpt.py`` command line serves the CPU training loop (:mod:`.gpt`) and the pre-flight
estimate (:mod:`infrarsi.adapters.megatron.estimate.peak`), so the model a trial trains and the model an estimate
prices are built by the same calls: megatron-core's ``TransformerConfig`` (``MLATransformerConfig`` with
``--multi-latent-attention``), its local layer specs (``get_gpt_layer_local_spec``; ``get_gpt_decoder_block_spec``
for MoE), ``GPTModel`` per virtual pipeline stage, its ``DistributedDataParallel`` and ``get_megatron_optimizer``.

The flags read are Megatron-LM's names, with Megatron-LM's defaults and derivations (facts of its
``arguments.py``, which is not in the megatron-core wheel): ``--swiglu`` without ``--ffn-hidden-size`` gives
``int(8h/3 / 64) * 64``; the vocabulary is padded to a multiple of ``--make-vocab-size-divisible-by`` (128) x TP;
``NullTokenizer`` adds one token (end of document); ``--recompute-activations`` is selective recompute; bf16
training keeps fp32 main gradients unless ``--grad-reduce-in-bf16``.

Transformer Engine is absent here (it does not install without CUDA), so the layers are megatron-core's local
spec. What that changes against a GPU job that runs TE:

- the core attention. ``--attention-backend local`` / ``unfused``: megatron-core's ``DotProductAttention``, which
  materializes the [b, heads/TP, s, s] scores and keeps the softmax probabilities for backward (repeating K/V
  for GQA). ``auto`` / ``flash`` / ``fused`` (TE's fused or flash kernels on a GPU): :class:`FusedCoreAttention`,
  torch's flash attention, which keeps Q, K, V, the output and an fp32 log-sum-exp per query (no s x s state,
  no K/V repeat), as TE's flash and cuDNN kernels do. It applies no attention dropout (torch's CPU kernel has
  none; on a GPU the kernels draw it inside, keeping no mask): the CPU loop refuses ``--attention-dropout`` > 0
  with it.
- norms are separate modules (TE fuses the norm into the next linear's input; the norm's output is kept as the
  linear's input either way) and nothing is fp8 (TE only: ``--fp8-*`` is refused by the loop, estimated at the
  bf16 it would otherwise run, with a note);
- megatron-core's fusions (bias-SwiGLU, bias-dropout-add, rope) keep their autograd structure but run eagerly:
  they are ``torch.compile``'d functions and compiling is switched off (:func:`eager_fusions`); the fused
  masked softmax and gradient-accumulation fusion need apex/TE kernels and are off.
- MoE experts: ``SequentialMLP`` (one MLP per local expert); ``--moe-grouped-gemm`` needs TE or the
  grouped_gemm package, so the loop refuses it and the estimate prices it as the sequential experts (same
  weights and expert activations).
- the optimizer is torch's AdamW with ``fused=True`` (megatron-core falls back to torch's AdamW without TE/apex;
  ``fused`` makes it, like TE's and apex's FusedAdam, update in place with no full-size temporaries).
"""

from __future__ import annotations

import argparse
import ast
import copy
import math
import re
from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------- command line
# Flags read here; any other flag of a launch (data paths, logging, checkpointing) changes no tensor of a step.
_INT = ("num-layers", "hidden-size", "ffn-hidden-size", "num-attention-heads", "num-query-groups", "kv-channels",
        "seq-length", "max-position-embeddings", "vocab-size", "micro-batch-size", "global-batch-size",
        "train-iters", "seed", "log-interval", "timing-log-level", "tensor-model-parallel-size",
        "pipeline-model-parallel-size", "num-layers-per-virtual-pipeline-stage",
        "num-virtual-stages-per-pipeline-rank", "context-parallel-size", "expert-model-parallel-size",
        "expert-tensor-parallel-size", "recompute-num-layers", "num-experts", "moe-router-topk",
        "moe-ffn-hidden-size", "moe-shared-expert-intermediate-size", "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers", "make-vocab-size-divisible-by", "q-lora-rank", "kv-lora-rank",
        "qk-head-dim", "qk-pos-emb-head-dim", "v-head-dim", "num-workers", "intra-op-threads")
_FLOAT = ("lr", "min-lr", "weight-decay", "clip-grad", "adam-beta1", "adam-beta2", "adam-eps", "hidden-dropout",
          "attention-dropout", "init-method-std", "norm-epsilon", "rotary-base", "rotary-percent",
          "moe-aux-loss-coeff", "rotary-scaling-factor", "mscale", "mscale-all-dim")
_SWITCH = ("bf16", "fp16", "swiglu", "group-query-attention", "multi-latent-attention", "disable-bias-linear",
           "add-qkv-bias", "qk-layernorm", "untie-embeddings-and-output-weights", "sequence-parallel",
           "use-distributed-optimizer", "overlap-grad-reduce", "overlap-param-gather", "recompute-activations",
           "moe-grouped-gemm", "grad-reduce-in-bf16", "accumulate-allreduce-grads-in-fp32",
           "cross-entropy-loss-fusion", "log-throughput", "no-position-embedding", "use-rope-scaling",
           "use-cpu-initialization", "moe-router-pre-softmax",
           "fp8-param-gather", "mock-data", "use-mcore-models", "manual-gc")
_CHOICE = {
    "normalization": ("LayerNorm", "RMSNorm"),
    "position-embedding-type": ("learned_absolute", "rope", "none", "yarn"),
    "recompute-granularity": ("full", "selective"),
    "recompute-method": ("uniform", "block"),
    "attention-backend": ("auto", "flash", "fused", "unfused", "local"),
    "moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "moe-router-load-balancing-type": ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"),
    "optimizer": ("adam", "sgd"),
    "rope-type": ("rope", "yarn"),
}
_STR = ("tokenizer-type", "tokenizer-model", "moe-layer-freq", "fp8-format", "fp8-recipe", "transformer-impl")
_DEFAULTS = {"init-method-std": 0.02, "hidden-dropout": 0.1, "attention-dropout": 0.1, "norm-epsilon": 1e-5,
             "rotary-base": 10000.0, "rotary-percent": 1.0, "make-vocab-size-divisible-by": 128, "lr": 1e-4,
             "weight-decay": 0.01, "clip-grad": 1.0, "adam-beta1": 0.9, "adam-beta2": 0.999, "adam-eps": 1e-8,
             "moe-router-topk": 2, "moe-aux-loss-coeff": 0.0, "seed": 1234, "log-interval": 1,
             "timing-log-level": 0, "micro-batch-size": 1, "tensor-model-parallel-size": 1,
             "pipeline-model-parallel-size": 1, "context-parallel-size": 1, "expert-model-parallel-size": 1,
             "normalization": "LayerNorm", "position-embedding-type": "learned_absolute", "attention-backend": "auto",
             "moe-token-dispatcher-type": "allgather", "moe-router-load-balancing-type": "aux_loss",
             "optimizer": "adam", "train-iters": 1, "recompute-num-layers": None, "moe-layer-freq": "1",
             # multi-latent attention (Megatron-LM's _add_mla_args); --q-lora-rank's default is None: no q down/up
             # projections (DeepSeek-V2-Lite), where megatron-core's MLATransformerConfig defaults to 512
             "kv-lora-rank": 32, "qk-head-dim": 128, "qk-pos-emb-head-dim": 64, "v-head-dim": 128,
             "rotary-scaling-factor": 1.0, "mscale": 1.0, "mscale-all-dim": 0.0}

# Vocabulary sizes of tokenizers named by launches (their published sizes), for launches with no --vocab-size.
TOKENIZER_VOCAB = (
    (r"llama-?3|meta-llama-3", 128256),
    (r"deepseek-v2|deepseek-v3", 102400),
    (r"mixtral|mistral", 32000),
    (r"llama-?2", 32000),
)
TOKENIZER_TYPE_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000}


class MegatronArgsError(ValueError):
    """A command line the model cannot be built from; the message names the flag and the fix."""


def build_parser(prog: str = "pretrain_gpt.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=False, description="Megatron-LM GPT flags (see module doc)")
    for name in _INT:
        p.add_argument(f"--{name}", type=int, default=_DEFAULTS.get(name))
    for name in _FLOAT:
        p.add_argument(f"--{name}", type=float, default=_DEFAULTS.get(name))
    for name in _SWITCH:
        p.add_argument(f"--{name}", action="store_true")
    for name, choices in _CHOICE.items():
        p.add_argument(f"--{name}", choices=choices, default=_DEFAULTS.get(name))
    for name in _STR:
        p.add_argument(f"--{name}", default=_DEFAULTS.get(name))
    p.add_argument("--no-bias-swiglu-fusion", dest="bias_swiglu_fusion", action="store_false")
    p.add_argument("--no-bias-dropout-fusion", dest="bias_dropout_fusion", action="store_false")
    return p


@dataclass(frozen=True)
class Parsed:
    args: argparse.Namespace
    unknown: tuple[str, ...]  # flags of the launch this reader does not model


def parse(argv: list[str], *, strict: bool, extra_args_provider=None) -> Parsed:
    """The command line as Megatron-LM would read it (defaults and derivations applied). ``strict`` (the CPU
    training loop) refuses unknown flags as Megatron does; otherwise they are returned in ``unknown``.
    ``extra_args_provider`` adds a program's own flags to the parser, as Megatron-LM's ``parse_args`` does
    (``provider(parser)`` returns the parser)."""
    p = build_parser()
    if extra_args_provider is not None:
        p = extra_args_provider(p)
    if strict:
        args, unknown = p.parse_args(argv), []
    else:
        args, unknown = p.parse_known_args(argv)
    derive(args)
    flags = tuple(dict.fromkeys(u.split("=", 1)[0] for u in unknown if u.startswith("--")))
    return Parsed(args=args, unknown=flags)


def derive(a: argparse.Namespace) -> None:
    """Megatron-LM's derived arguments, in place."""
    for need in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "global_batch_size"):
        if getattr(a, need) is None:
            raise MegatronArgsError(f"--{need.replace('_', '-')} is required (the launch does not set it)")
    if a.fp16 and a.bf16:
        raise MegatronArgsError("--fp16 and --bf16 are both set; keep one")
    if a.recompute_activations and a.recompute_granularity is None:
        a.recompute_granularity = "selective"
    if a.recompute_granularity == "full":
        a.recompute_method = a.recompute_method or "uniform"
        a.recompute_num_layers = a.recompute_num_layers or 1
    else:
        a.recompute_method = a.recompute_num_layers = None
    if a.ffn_hidden_size is None:
        a.ffn_hidden_size = int((4 * a.hidden_size * 2 / 3) / 64) * 64 if a.swiglu else 4 * a.hidden_size
    if a.kv_channels is None:
        a.kv_channels = a.hidden_size // a.num_attention_heads
    if not a.group_query_attention:
        a.num_query_groups = a.num_attention_heads
    elif a.num_query_groups is None:
        a.num_query_groups = 1
    if a.max_position_embeddings is None:
        a.max_position_embeddings = a.seq_length
    if a.no_position_embedding and a.position_embedding_type == "learned_absolute":
        a.position_embedding_type = "none"
    if a.moe_ffn_hidden_size is None and a.num_experts:
        a.moe_ffn_hidden_size = a.ffn_hidden_size
    pp = a.pipeline_model_parallel_size
    a.virtual_pipeline_model_parallel_size = None
    if a.num_layers_per_virtual_pipeline_stage is not None:
        if pp <= 1:
            raise MegatronArgsError("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size > 1")
        per_rank = a.num_layers // pp
        if per_rank % a.num_layers_per_virtual_pipeline_stage:
            raise MegatronArgsError(f"--num-layers-per-virtual-pipeline-stage {a.num_layers_per_virtual_pipeline_stage}"
                                    f" does not divide the {per_rank} layers per pipeline rank")
        a.virtual_pipeline_model_parallel_size = per_rank // a.num_layers_per_virtual_pipeline_stage
    elif a.num_virtual_stages_per_pipeline_rank is not None and a.num_virtual_stages_per_pipeline_rank > 1:
        a.virtual_pipeline_model_parallel_size = a.num_virtual_stages_per_pipeline_rank
    if a.virtual_pipeline_model_parallel_size == 1:
        a.virtual_pipeline_model_parallel_size = None
    if a.tensor_model_parallel_size == 1:
        a.sequence_parallel = False  # Megatron warns and switches it off
    a.vocab_source = _vocab_source(a)
    a.padded_vocab_size = padded_vocab(a.vocab_size_unpadded, a.make_vocab_size_divisible_by,
                                       a.tensor_model_parallel_size)
    a.moe_layer_pattern = _moe_layer_freq(a.moe_layer_freq, a.num_layers) if a.num_experts else None


def _vocab_source(a: argparse.Namespace) -> str:
    extra = 1 if a.tokenizer_type == "NullTokenizer" else 0  # Megatron's NullTokenizer adds the end-of-document id
    if a.vocab_size:
        a.vocab_size_unpadded = a.vocab_size + extra
        return f"--vocab-size {a.vocab_size}" + (" + 1 (NullTokenizer's end of document)" if extra else "")
    model = (a.tokenizer_model or "").lower()
    for pat, size in TOKENIZER_VOCAB:
        if re.search(pat, model):
            a.vocab_size_unpadded = size
            return f"{size} (the published vocabulary of {a.tokenizer_model})"
    if a.tokenizer_type in TOKENIZER_TYPE_VOCAB:
        a.vocab_size_unpadded = TOKENIZER_TYPE_VOCAB[a.tokenizer_type]
        return f"{a.vocab_size_unpadded} ({a.tokenizer_type})"
    raise MegatronArgsError(f"the vocabulary size is unknown (--tokenizer-type {a.tokenizer_type}, --tokenizer-model "
                            f"{a.tokenizer_model}); add --vocab-size N to the launch")


def padded_vocab(vocab: int, divisible_by: int, tp: int) -> int:
    multiple = divisible_by * tp
    return int(math.ceil(vocab / multiple) * multiple)


def _moe_layer_freq(raw: Any, num_layers: int) -> list[int]:
    """``--moe-layer-freq``: an int N (every N-th layer is MoE) or a Python list expression like
    ``([0]*1+[1]*26)`` (Megatron evaluates it the same way)."""
    text = str(raw).strip()
    if re.fullmatch(r"\d+", text):
        n = int(text)
        return [1 if i % n == 0 else 0 for i in range(num_layers)]
    try:
        node = ast.parse(text, mode="eval")
        if not all(isinstance(x, (ast.Expression, ast.List, ast.BinOp, ast.Add, ast.Mult, ast.Constant,
                                  ast.Load)) for x in ast.walk(node)):
            raise ValueError("only lists of 0/1, + and * are allowed")
        pattern = eval(compile(node, "<moe-layer-freq>", "eval"), {"__builtins__": {}})  # noqa: S307 - vetted AST
    except (SyntaxError, ValueError) as e:
        raise MegatronArgsError(f"--moe-layer-freq {text!r}: {e}; write an int or e.g. '([0]*1+[1]*26)'") from None
    if len(pattern) != num_layers:
        raise MegatronArgsError(f"--moe-layer-freq has {len(pattern)} entries for {num_layers} layers")
    return [int(x) for x in pattern]


def fused_attention(args: argparse.Namespace) -> bool:
    """Whether the core attention is :class:`FusedCoreAttention` (auto/flash/fused) or megatron-core's local
    ``DotProductAttention`` (local/unfused)."""
    return args.attention_backend in ("auto", "flash", "fused")


def params_dtype(args: argparse.Namespace):
    import torch

    return torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32


def num_microbatches(args: argparse.Namespace, dp: int) -> int:
    per = args.micro_batch_size * dp
    if args.global_batch_size % per:
        per_dp = f"{args.global_batch_size // dp}" if args.global_batch_size % dp == 0 else "global batch / DP"
        raise MegatronArgsError(f"global batch size ({args.global_batch_size}) is not divisible by micro batch size "
                                f"({args.micro_batch_size}) times data parallel size ({dp}); pick a micro batch "
                                f"size that divides {per_dp}")
    return args.global_batch_size // per


# --------------------------------------------------------------------------- megatron-core objects
def eager_fusions() -> None:
    """Prepare megatron-core 0.16.1 to run without Transformer Engine (call before building a model):

    - its ``torch.compile``'d fusion functions run eagerly (same math and autograd structure);
    - ``moe_utils`` gets the names it tests: it imports ``te_general_gemm`` and the fused MoE kernels only when TE
      imports, then tests ``te_general_gemm is not None`` in the router's gating linear (a NameError without TE;
      None is the value the test means);
    - modules that import ``megatron.core.extensions.transformer_engine`` set ``HAVE_TE = True`` even without TE
      (that module imports, with mock classes), and ``MLASelfAttention`` then calls ``isinstance(..., TELinear)``
      on a mock (a TypeError); their ``HAVE_TE`` is set to what it means, False.
    """
    import importlib.util
    import sys

    import torch._dynamo
    from megatron.core.models.gpt import gpt_model  # noqa: F401 - imports the modules patched below
    from megatron.core.transformer import multi_latent_attention  # noqa: F401
    from megatron.core.transformer.moe import moe_utils

    torch._dynamo.config.disable = True
    for name in ("te_general_gemm", "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss", "fused_permute",
                 "fused_permute_with_probs", "fused_sort_chunks_by_index", "fused_sort_chunks_by_index_with_probs",
                 "fused_topk_with_score_function", "fused_unpermute"):
        if not hasattr(moe_utils, name):
            setattr(moe_utils, name, None)
    if importlib.util.find_spec("transformer_engine") is None:
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("megatron.core") and getattr(mod, "HAVE_TE", False) is True:
                mod.HAVE_TE = False


def transformer_config(args: argparse.Namespace, *, initialize: bool = True):
    """megatron-core's TransformerConfig (MLATransformerConfig with MLA) for this command line, as Megatron-LM's
    ``core_transformer_config_from_args`` builds it, with what needs TE or apex switched off (module doc)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    a = args
    dtype = params_dtype(a)
    kw: dict[str, Any] = dict(
        num_layers=a.num_layers, hidden_size=a.hidden_size, ffn_hidden_size=a.ffn_hidden_size,
        num_attention_heads=a.num_attention_heads, num_query_groups=a.num_query_groups, kv_channels=a.kv_channels,
        normalization=a.normalization, layernorm_epsilon=a.norm_epsilon, gated_linear_unit=a.swiglu,
        activation_func=F.silu if a.swiglu else F.gelu, add_bias_linear=not a.disable_bias_linear,
        add_qkv_bias=a.add_qkv_bias, qk_layernorm=a.qk_layernorm, hidden_dropout=a.hidden_dropout,
        attention_dropout=a.attention_dropout, init_method_std=a.init_method_std,
        tensor_model_parallel_size=a.tensor_model_parallel_size,
        pipeline_model_parallel_size=a.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=a.virtual_pipeline_model_parallel_size,
        context_parallel_size=a.context_parallel_size, expert_model_parallel_size=a.expert_model_parallel_size,
        expert_tensor_parallel_size=a.expert_tensor_parallel_size, sequence_parallel=a.sequence_parallel,
        num_layers_in_first_pipeline_stage=a.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=a.decoder_last_pipeline_num_layers,
        params_dtype=dtype, pipeline_dtype=dtype, bf16=a.bf16, fp16=a.fp16,
        recompute_granularity=a.recompute_granularity, recompute_method=a.recompute_method,
        recompute_num_layers=a.recompute_num_layers,
        # Megatron-LM: deallocate_pipeline_outputs always; batched p2p unless overlapped (interleaved schedule)
        deallocate_pipeline_outputs=True, batch_p2p_comm=a.virtual_pipeline_model_parallel_size is None,
        bias_activation_fusion=a.bias_swiglu_fusion if a.swiglu else not a.disable_bias_linear,
        bias_dropout_fusion=a.bias_dropout_fusion,
        masked_softmax_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False,
        persist_layer_norm=False, cross_entropy_loss_fusion=a.cross_entropy_loss_fusion,
        cross_entropy_fusion_impl="native", attention_backend=AttnBackend.local,
        use_cpu_initialization=bool(a.use_cpu_initialization) and initialize, perform_initialization=initialize,
    )
    if a.num_experts:
        kw.update(num_moe_experts=a.num_experts, moe_ffn_hidden_size=a.moe_ffn_hidden_size,
                  moe_shared_expert_intermediate_size=a.moe_shared_expert_intermediate_size,
                  moe_router_topk=a.moe_router_topk, moe_router_pre_softmax=bool(a.moe_router_pre_softmax),
                  moe_router_load_balancing_type=a.moe_router_load_balancing_type,
                  moe_aux_loss_coeff=a.moe_aux_loss_coeff, moe_token_dispatcher_type=a.moe_token_dispatcher_type,
                  moe_grouped_gemm=False, moe_layer_freq=a.moe_layer_pattern, moe_permute_fusion=False)
    if a.multi_latent_attention:
        # every MLA field as Megatron-LM passes it, None included (q_lora_rank=None: no q down/up projections)
        kw.update(q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank, qk_head_dim=a.qk_head_dim,
                  qk_pos_emb_head_dim=a.qk_pos_emb_head_dim, v_head_dim=a.v_head_dim, rotary_base=a.rotary_base,
                  rotary_scaling_factor=a.rotary_scaling_factor, mscale=a.mscale, mscale_all_dim=a.mscale_all_dim)
        # Megatron-LM leaves MLA's default rope type (yarn) unless --rope-type is given; megatron-core's yarn
        # embedding builds its tables on torch.cuda.current_device() (no CPU path), so plain rope stands in for
        # it here: the same tensor shapes (yarn only rescales frequencies and the softmax scale)
        kw["rope_type"] = a.rope_type or "rope"
        cls = MLATransformerConfig
    else:
        if a.rope_type not in (None, "rope"):
            raise MegatronArgsError(f"--rope-type {a.rope_type}: common attention only supports rope (Megatron-LM); "
                                    "drop it or add --multi-latent-attention")
        cls = TransformerConfig
    # Every field is passed as Megatron-LM's core_transformer_config_from_args passes it, None included: a None
    # dropped here would become megatron-core's own default, which is not always None (q_lora_rank: 512).
    try:
        return cls(**kw)
    except (ValueError, AssertionError, TypeError) as e:
        raise MegatronArgsError(f"megatron-core {cls.__name__}: {e}") from None


def layer_spec(args: argparse.Namespace, config, vp_stage: int | None):
    """megatron-core's local block spec for this stage (dense or MoE layers per ``--moe-layer-freq``), with the
    two stand-ins of :mod:`.layers`: :class:`TorchNorm` for every torch norm, and
    :class:`FusedCoreAttention` as the core attention for ``--attention-backend auto|flash|fused``."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from .layers import FusedCoreAttention, TorchNorm

    spec = copy.deepcopy(get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                                    normalization=args.normalization, vp_stage=vp_stage))
    if spec.layer_norm is WrappedTorchNorm:
        spec.layer_norm = TorchNorm
    for layer in {id(x): x for x in spec.layer_specs}.values():
        sub = layer.submodules
        for name in ("input_layernorm", "pre_mlp_layernorm"):
            if getattr(sub, name) is WrappedTorchNorm:
                setattr(sub, name, TorchNorm)
        attn = sub.self_attention.submodules
        for name in ("q_layernorm", "k_layernorm", "kv_layernorm"):
            if getattr(attn, name, None) is WrappedTorchNorm:
                setattr(attn, name, TorchNorm)
        if fused_attention(args):
            attn.core_attention = FusedCoreAttention
    return spec


def model_chunks(args: argparse.Namespace, config) -> list:
    """This rank's GPTModel chunks (one per virtual pipeline stage), as Megatron-LM's ``get_model`` builds them."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    vp = args.virtual_pipeline_model_parallel_size or 1
    out = []
    for i in range(vp):
        stage = i if vp > 1 else None
        out.append(GPTModel(
            config=config, transformer_layer_spec=layer_spec(args, config, stage),
            vocab_size=args.padded_vocab_size, max_sequence_length=args.max_position_embeddings,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
            parallel_output=True, share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
            position_embedding_type=args.position_embedding_type if args.position_embedding_type != "yarn" else "rope",
            rotary_percent=args.rotary_percent, rotary_base=int(args.rotary_base), rope_scaling=args.use_rope_scaling,
            vp_stage=stage))
    if args.bf16 or args.fp16:  # Megatron-LM's get_model: half-precision modules, fp32 main params in the optimizer
        from megatron.core.transformer.module import Float16Module

        out = [Float16Module(config, m) for m in out]
    for m in out:  # Megatron-LM's get_model moves the model to its device (the norms are built on the CPU)
        m.cuda(torch.cuda.current_device())
    return out


def ddp_config(args: argparse.Namespace):
    from megatron.core.distributed import DistributedDataParallelConfig

    fp32_grads = args.accumulate_allreduce_grads_in_fp32 or (args.bf16 and not args.grad_reduce_in_bf16)
    return DistributedDataParallelConfig(grad_reduce_in_fp32=fp32_grads, overlap_grad_reduce=args.overlap_grad_reduce,
                                         overlap_param_gather=args.overlap_param_gather,
                                         use_distributed_optimizer=args.use_distributed_optimizer)


def optimizer_config(args: argparse.Namespace):
    from megatron.core.optimizer import OptimizerConfig

    return OptimizerConfig(optimizer=args.optimizer, lr=args.lr, min_lr=args.min_lr, weight_decay=args.weight_decay,
                           adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, adam_eps=args.adam_eps,
                           clip_grad=args.clip_grad, bf16=args.bf16, fp16=args.fp16, params_dtype=params_dtype(args),
                           use_distributed_optimizer=args.use_distributed_optimizer,
                           overlap_param_gather=args.overlap_param_gather)


def wrap(args: argparse.Namespace, config, chunks: list) -> tuple[list, Any]:
    """megatron-core's DistributedDataParallel around each chunk and ``get_megatron_optimizer`` over them, with the
    schedule hooks Megatron-LM's ``train`` installs (no-sync, grad/param sync, finalize grads, loss scale)."""
    from megatron.core.distributed import DistributedDataParallel as DDP
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.optimizer import get_megatron_optimizer

    dcfg = ddp_config(args)
    ddp = [DDP(config=config, ddp_config=dcfg, module=chunk, disable_bucketing=(i > 0))
           for i, chunk in enumerate(chunks)]
    opt = get_megatron_optimizer(optimizer_config(args), ddp, use_gloo_process_groups=False)
    for o in getattr(opt, "chained_optimizers", [opt]):
        inner = getattr(o, "optimizer", None)
        for group in getattr(inner, "param_groups", []):
            if "fused" in group:  # torch AdamW: in place, as TE's / apex's FusedAdam (module doc)
                group["fused"], group["foreach"] = True, False
    config.no_sync_func = [m.no_sync for m in ddp] if len(ddp) > 1 else ddp[0].no_sync
    if args.overlap_grad_reduce:
        config.grad_sync_func = [m.start_grad_sync for m in ddp] if len(ddp) > 1 else ddp[0].start_grad_sync
    if args.overlap_param_gather and args.use_distributed_optimizer:
        config.param_sync_func = [m.start_param_sync for m in ddp] if len(ddp) > 1 else ddp[0].start_param_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    return ddp, opt


def initialize_parallel(args: argparse.Namespace) -> None:
    """megatron-core's process groups for this command line (the default group must exist)."""
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=args.virtual_pipeline_model_parallel_size,
        context_parallel_size=args.context_parallel_size,
        expert_model_parallel_size=args.expert_model_parallel_size,
        expert_tensor_parallel_size=args.expert_tensor_parallel_size,
        create_gloo_process_groups=False)


def loss_func(loss_mask, output_tensor):
    """Megatron-LM's GPT loss: the mean token loss over the micro-batch's unmasked tokens."""
    import torch

    losses = output_tensor.float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses.view(-1) * mask) / mask.sum()
    return loss, {"lm loss": loss.detach().clone()}  # the schedule divides ``loss`` in place afterwards
