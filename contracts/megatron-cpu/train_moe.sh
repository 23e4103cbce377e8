#!/bin/bash
# A mixture-of-experts GPT (megatron-core MoE: 8 experts, top-2, expert parallel 2, the all-to-all token dispatcher)
# trained on this machine's CPU, launched as Megatron-LM's examples launch pretrain_gpt.py: 2 processes on gloo,
# started by launchers/pretrain_gpt_cpu.py (run from the repository root). 6 layers, hidden 256, 4 heads, expert
# FFN 256, RMSNorm, RoPE, vocabulary 16384 (untied), sequence 1024; 18.8M parameters.
set -euo pipefail

NPROC=${NPROC:-2}
ITERS=${ITERS:-4}

GPT_ARGS=(
    --num-layers 6
    --hidden-size 256
    --num-attention-heads 4
    --seq-length 1024
    --max-position-embeddings 1024
    --vocab-size 16384
    --swiglu
    --normalization RMSNorm
    --position-embedding-type rope
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size 8
    --train-iters ${ITERS}
    --lr 3.0e-4
    --bf16
    --seed 1234
    --use-cpu-initialization
    --log-interval 1
)

MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-ffn-hidden-size 256
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2
    --moe-token-dispatcher-type alltoall
)

MODEL_PARALLEL_ARGS=(
    --expert-model-parallel-size 2
)

torchrun --nproc-per-node ${NPROC} launchers/pretrain_gpt_cpu.py \
    "${GPT_ARGS[@]}" "${MOE_ARGS[@]}" "${TRAINING_ARGS[@]}" "${MODEL_PARALLEL_ARGS[@]}"
