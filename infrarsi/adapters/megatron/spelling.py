"""Megatron-LM's spelling of the catalog's knobs: knob -> flag, the one table of them (the reader's flag tables,
:mod:`.args`, the writer, :mod:`.emit`, and the argument destinations, :mod:`.equivalence`, are read from it).

The environment knobs (``NCCL_ALGO``...) are the catalog's (``Knob.env``); Megatron takes them. fp8 recipes:
megatron-core's ``--fp8-recipe`` has no ``rowwise``.
"""

from __future__ import annotations

from ...knobs.spelling import Spelling

SPELLING = Spelling(env=True, flags={
    "tensor_parallel": "--tensor-model-parallel-size",
    "pipeline_parallel": "--pipeline-model-parallel-size",
    "virtual_pipeline": "--num-virtual-stages-per-pipeline-rank",
    "context_parallel": "--context-parallel-size",
    "expert_parallel": "--expert-model-parallel-size",
    "micro_batch_size": "--micro-batch-size",
    "sequence_parallel": "--sequence-parallel",
    "recompute_granularity": "--recompute-granularity",
    "recompute_method": "--recompute-method",
    "recompute_num_layers": "--recompute-num-layers",
    "distributed_optimizer": "--use-distributed-optimizer",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "overlap_param_gather": "--overlap-param-gather",
    "tp_comm_overlap": "--tp-comm-overlap",
    "moe_token_dispatcher": "--moe-token-dispatcher-type",
    "bf16": "--bf16",
    "fp8_recipe": "--fp8-recipe",
    "attention_backend": "--attention-backend",
    "moe_grouped_gemm": "--moe-grouped-gemm",
    "cross_entropy_fusion": "--cross-entropy-loss-fusion",
    "manual_gc": "--manual-gc",
    "num_workers": "--num-workers",
}, domains={"fp8_recipe": ("none", "delayed", "tensorwise", "mxfp8", "blockwise")})
