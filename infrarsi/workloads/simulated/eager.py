"""What eager PyTorch costs beyond the fused kernels the cost model counts (``SimWorkload.kernels = "eager"``: a
torchtitan launch without torch.compile, as `infrarsi estimate` prices one).

The model's element-wise traffic (:func:`.step_time._layer_time`: norms, residuals, RoPE on q and k, the MLP's
activation, 2x in backward, at the fitted ``ELEM_EFF``) and its cross-entropy (20 bytes per logit) were counted for
Megatron's fused Transformer Engine kernels. Eager torchtitan moves more bytes for the same arithmetic, and FSDP2 adds
kernels of its own. Each term below is counted from the code that runs (torchtitan 0.2.2, ``models/llama3/model/
model.py``, ``components/loss.py``, ``components/optimizer.py``; torch's FSDP2, ``distributed/fsdp/_fully_shard/
_fsdp_collectives.py``; torch's ``optim/adam.py``, the torch this project installs) and priced at a measured share of
the datasheet HBM bandwidth. Nothing here is fitted: not to Megatron's table, not to torchtitan's.

- RoPE (``apply_rotary_emb``): ``xq.float()`` (read 2 bytes, write 4), the complex product with ``freqs_cis`` (read
  4, write 4), ``type_as`` back to bf16 (read 4, write 2): 20 bytes per element of q and k, against the 4 (read 2,
  write 2) a fused RoPE moves. Backward: the three again (6 + 8 + 6 = 20) against the model's 2 x 4 = 8.
- SwiGLU (``w2(F.silu(w1(x)) * w3(x))``): ``silu`` (read 2, write 2) and the product (read 4, write 2): 10 bytes per
  element of the FFN's hidden size against the model's (g + 1) x 2 = 6. Backward: the product's two gradients
  (6 each: the saved silu output or w3's output times the incoming gradient) and ``silu_backward`` (6): 18 against
  the model's 12.
- Separate ``wq``, ``wk``, ``wv`` and ``w1``, ``w3`` linears (Megatron fuses QKV and FC1): autograd adds the input
  gradients of the linears sharing one input, 2 + 1 adds of (read 4, write 2) bytes per element of the hidden size
  in backward: 18.
- RMSNorm: ``nn.RMSNorm`` calls ``torch.rms_norm``, for which the installed torch has a fused kernel
  (``aten._fused_rms_norm``): the bytes the model counts. (torchtitan's own ``RMSNorm`` of 2024, an fp32 composite
  of about six element-wise kernels, is not priced.)
- Cross-entropy (``cross_entropy_loss``: ``F.cross_entropy(pred.flatten(0, 1).float(), ...)``) per logit: the fp32
  cast (read 2, write 4), log-softmax over a row too long for shared memory (torch's ``cunn_SoftMaxForward``: read
  for the max, for the sum, and to write: 12 + 4), backward: ``nll_loss_backward``'s zero-filled fp32 gradient (4),
  ``cunn_SoftMaxBackward`` (read the gradient for its sum, then it and the output, write: 4 + 8 + 4), the cast's
  backward (read 4, write 2): 48 bytes, against the model's 20.
- The optimizer (torchtitan's ``optimizer.implementation``, default "fused" in 0.2.2; in 2024 ``optimizer.fused``,
  foreach unless set): fused AdamW reads param,
  grad, exp_avg, exp_avg_sq and writes three (28 bytes per fp32 parameter, the model's count); "foreach" (and
  "for-loop", the same kernels per tensor) runs torch's ``_multi_tensor_adam`` as eight kernels: weight decay
  ``mul_`` (8), ``lerp_`` (12), ``mul_`` (8), ``addcmul_`` (16), ``sqrt`` (8), ``div_`` (8), ``add_`` (8),
  ``addcdiv_`` (16): 84 bytes. Gradient clipping (``clip_grad_norm_``, foreach): the norm reads each gradient (4),
  the clip multiplies it (read 4, write 4); gradients are freed, not zeroed (``zero_grad(set_to_none=True)``): 12
  bytes against the model's 8.
- FSDP2's copies, per block and micro-batch: after each all-gather, ``split_with_sizes_copy`` copies the gathered
  bf16 parameters into the unsharded ones (read 2, write 2 bytes per parameter of the block); before each
  reduce-scatter, ``chunk_cat`` copies the bf16 gradients into the fp32 reduce-scatter input (read 2, write 4); the
  shards' copy-in before a gather (fp32 shard to bf16: read 4, write 2, then into the all-gather input: 4) is
  1/n of that. fp32 gradients are averaged by NCCL (ReduceOp.AVG), with no divide kernel.
- NCCL's SMs: a collective's kernels hold whole SMs while they run (NCCL CTAs do not share an SM with compute
  kernels), and NCCL uses "the minimal number of SMs to achieve the performance of the platform": 2 for a single
  NIC, 16 on a DGX with 8 NICs (S. Jeaugey, NCCL's maintainer, github.com/NVIDIA/nccl/issues/689, 2023). Compute
  that runs beside a collective for W seconds proceeds at 1 - sms/SM_count of its speed, so it ends
  sms/SM_count x W later. The collectives' HBM traffic (at least twice their bandwidth, same maintainer,
  nccl/issues/1428) slowing memory-bound kernels beside them is not priced.

Bandwidth: an A100 80GB SXM kernel streaming from HBM reaches 1.80 TB/s of the datasheet's 2.04 (88%, confirmed by
Nsight Compute), and the best kernels of an NVIDIA GTC talk reached ~90% (forums.developer.nvidia.com, "Trouble to
Reach Peak Bandwidth of A100"): every byte above moves at 88% of ``GPUSpec.hbm_bytes_per_s``.
"""

from __future__ import annotations

from .hardware import GPUSpec

HBM_SHARE = 0.88  # measured share of the datasheet HBM bandwidth (module docstring)

# Bytes per element beyond the model's fused count (module docstring): per element of q + kv (RoPE), of the FFN
# hidden size (SwiGLU), of the hidden size (input-gradient accumulation of the unfused linears).
ROPE_FWD, ROPE_BWD = 20 - 4, 20 - 2 * 4
SWIGLU_FWD, SWIGLU_BWD = 10 - 6, 18 - 2 * 6
LINEAR_GRAD_ADDS_BWD = 3 * 6
LOSS_BYTES_PER_LOGIT = 48 - 20
ADAMW_BYTES = {"fused": 28, "foreach": 84, "for-loop": 84}
CLIP_BYTES = 12 - 8
GATHER_COPY_OUT_BYTES = 2 + 2  # per parameter of the block, per all-gather
REDUCE_COPY_IN_BYTES = 2 + 4  # per parameter of the block, per reduce-scatter
SHARD_COPY_IN_BYTES = 4 + 2 + 4  # per parameter of the local shard, per all-gather

# NCCL's SMs per collective: two per NIC of the node (nccl/issues/689: 2 for one NIC, 16 for a DGX's 8). The spec's
# nodes have one NIC per GPU. A group inside one node gets the same count (the source names none for NVLink only).
NCCL_SMS_PER_NIC = 2


def bandwidth(spec: GPUSpec) -> float:
    """Bytes per second an eager element-wise kernel or copy reaches on ``spec``."""
    return spec.hbm_bytes_per_s * HBM_SHARE


def layer_bytes(q: float, kv: float, f: float, h: float) -> tuple[float, float]:
    """(forward, backward) bytes per token of one block beyond the model's fused count; ``q``, ``kv``, ``f`` are this
    rank's query, key/value and FFN widths (TP-sharded), ``h`` its hidden width (sequence-parallel-sharded)."""
    return (ROPE_FWD * (q + kv) + SWIGLU_FWD * f,
            ROPE_BWD * (q + kv) + SWIGLU_BWD * f + LINEAR_GRAD_ADDS_BWD * h)


def nccl_sm_share(spec: GPUSpec) -> float:
    """Share of the SMs a running NCCL collective holds on ``spec``."""
    return NCCL_SMS_PER_NIC * spec.gpus_per_node / spec.sm_count


def fsdp_copy_bytes(block_params: float, shards: int, gathers: int) -> float:
    """Bytes FSDP2's copies move for one block in one micro-batch: ``gathers`` all-gathers (2 with reshard after
    forward, else 1) and one reduce-scatter of ``block_params`` parameters sharded ``shards`` ways."""
    if shards <= 1:
        return 0.0
    return gathers * (GATHER_COPY_OUT_BYTES * block_params + SHARD_COPY_IN_BYTES * block_params / shards) + (
        REDUCE_COPY_IN_BYTES * block_params)


def optimizer_bytes(implementation: str) -> float:
    """Bytes per parameter of the shard beyond the model's count (AdamW 28, clipping 8) for torchtitan's
    ``optimizer.implementation``."""
    return ADAMW_BYTES[implementation] - ADAMW_BYTES["fused"] + CLIP_BYTES
