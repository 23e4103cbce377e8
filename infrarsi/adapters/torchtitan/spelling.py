"""torchtitan's spelling of the catalog's knobs: knob -> config field (``section.field``, its path in the nested
config dataclasses; ``--section.field`` on the command line), the one table of them (the field tables of
:mod:`.configs`, the reader, the writer and the equivalence check are read from it).

Fields as 0.3 names them (0.2.x's own name for async TP, ``parallelism.enable_async_tensor_parallel``, is in
:mod:`.configs`). The environment knobs (``NCCL_ALGO``...) are the catalog's (``Knob.env``); torchtitan takes them.
Where torchtitan differs from the catalog: bf16 and selective recompute are its defaults, fp8 recipes are its
own (``rowwise``; no ``delayed`` or ``blockwise``), and FSDP shards optimizer state exactly when the shard degree is
above 1 (what Megatron's ``--use-distributed-optimizer`` does), so a torchtitan setting carries
``distributed_optimizer``, derived and tied by a rule of its space (:mod:`.adapter`).
"""

from __future__ import annotations

from ...knobs.spelling import Spelling

SPELLING = Spelling(env=True, flags={
    "tensor_parallel": "parallelism.tensor_parallel_degree",
    "pipeline_parallel": "parallelism.pipeline_parallel_degree",
    "context_parallel": "parallelism.context_parallel_degree",
    "expert_parallel": "parallelism.expert_parallel_degree",
    "data_parallel": "parallelism.data_parallel_shard_degree",
    "micro_batch_size": "training.local_batch_size",
    "sequence_parallel": "parallelism.enable_sequence_parallel",
    "recompute_granularity": "activation_checkpoint.mode",
    "cpu_offload": "training.enable_cpu_offload",
    "fsdp_reshard_after_forward": "parallelism.fsdp_reshard_after_forward",
    "async_tp": "compile.enable_async_tensor_parallel",
    "bf16": "training.mixed_precision_param",
    "fp8_recipe": "quantize.linear.float8.recipe_name",
    "torch_compile": "compile.enable",
    "data_parallel_replicate": "parallelism.data_parallel_replicate_degree",  # its own knob (adapter.replicate_knob)
}, defaults={"bf16": True, "recompute_granularity": "selective"},
    domains={"fp8_recipe": ("none", "tensorwise", "rowwise", "mxfp8")}, derived=("distributed_optimizer",))
