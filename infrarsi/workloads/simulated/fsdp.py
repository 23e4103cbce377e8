"""torchtitan's data parallelism as the cost model prices it: FSDP2 per transformer block, HSDP, per micro-batch.

What torchtitan 0.2.2 runs (``models/llama3/infra/parallelize.py`` ``apply_fsdp``, ``train.py`` ``train_step``):

- ``fully_shard`` on the embedding, on every transformer block, and on the final norm + output together, over the
  ``dp_shard_cp`` mesh (FSDP's shard degree x context parallel; its ranks are TP ranks apart). Parameters are kept
  sharded in fp32 and all-gathered in bf16 (``MixedPrecisionPolicy(param_dtype=training.mixed_precision_param)``);
  gradients are reduce-scattered in fp32 (``reduce_dtype``: ``training.mixed_precision_reduce``, default
  "float32"). HSDP (``data_parallel_replicate_degree`` > 1) all-reduces each gradient shard over the replicas;
  replicas alone (shard degree 1) is DDP: an all-reduce of the gradients.
- ``reshard_after_forward``: a block frees its gathered parameters after its forward and gathers them again
  before its backward (policy "default" does so unless pipeline parallel; the norm + output group is not
  resharded by default).
- every micro-batch of a gradient accumulation runs with gradient sync on (``train_step`` never disables it), so
  the collectives are paid per micro-batch, not per iteration.

Overlap: FSDP2 issues each all-gather on its own stream as soon as the CPU reaches the block, and the CPU runs
ahead of the GPU, so block i+1's gather runs while block i computes; in backward, block i-1's gather and block i's
reduce-scatter run while block i-1 computes its gradients. A collective is exposed by what it exceeds the compute
it runs beside; nothing hides the first gather of a forward (the embedding's, then the first block's) nor the last
reduce-scatter of a backward (the first block's, then the embedding's). No constant here is fitted: the collective
times are the simulator's own (:func:`.step_time._coll_bw`, NCCL's bandwidth and latency).

FSDP2's copy-in / copy-out kernels and the SMs NCCL holds while a collective runs beside compute are eager costs,
priced with the others in :mod:`.eager` (``SimWorkload.kernels = "eager"``).
"""

from __future__ import annotations

# The parameter bytes FSDP2 moves per parameter: gathered in bf16 (torchtitan's default
# training.mixed_precision_param = "bfloat16"), reduced in fp32 (training.mixed_precision_reduce = "float32").
REDUCE_BYTES = 4
# AdamW on the fp32 shards (torchtitan's build_optimizers: torch.optim.AdamW, foreach): reads param, grad, exp_avg,
# exp_avg_sq and writes param, exp_avg, exp_avg_sq, 4 bytes each.
ADAM_BYTES_PER_PARAM = 7 * 4


def exposed_per_microbatch(*, gather_s: float, reduce_s: float, layers: float, fwd_s: float, bwd_s: float,
                           reshard: bool, first_gather_s: float, last_gather_s: float, first_reduce_s: float,
                           last_reduce_s: float) -> tuple[float, float]:
    """(exposed forward seconds, exposed backward seconds) of FSDP's collectives for one micro-batch on one GPU.

    ``gather_s`` / ``reduce_s``: one block's all-gather / reduce-scatter (+ HSDP all-reduce); ``layers`` blocks of
    ``fwd_s`` forward and ``bwd_s`` backward compute each (backward with its recompute). ``first_gather_s``: the
    embedding's gather, before anything computes; ``last_gather_s``: the output's, beside the last block's forward;
    ``first_reduce_s``: the output's reduce, beside the last block's backward; ``last_reduce_s``: the embedding's,
    after everything. ``reshard``: blocks gather again in backward."""
    fwd = first_gather_s + gather_s + max(0.0, layers - 1) * max(0.0, gather_s - fwd_s)
    fwd += max(0.0, last_gather_s - fwd_s)
    bwd_comm = (gather_s if reshard else 0.0) + reduce_s
    bwd = max(0.0, first_reduce_s - bwd_s) + max(0.0, layers - 1) * max(0.0, bwd_comm - bwd_s)
    bwd += reduce_s + last_reduce_s
    return fwd, bwd
