#!/bin/bash
# The layouts part of scripts/gpu_check.sh: megatron-core's GPT on one GPU (launchers/pretrain_gpt_cpu.py's loop
# over megatron-core's GPTModel, DDP and optimizer; the local layer spec, no Transformer Engine), run from the
# repository root. 12 layers, hidden 2048, 16 heads, SwiGLU, RMSNorm, RoPE, vocabulary 32000 (untied), sequence
# 2048, global batch 8 sequences (16384 tokens): 0.74B parameters, small work per GPU. The shape variables let
# scripts/gpu_layouts.py --dry rehearse the same launch at a CPU-sized shape (the contract's script_env).
set -euo pipefail

LAYERS=${LAYERS:-12}
HIDDEN=${HIDDEN:-2048}
HEADS=${HEADS:-16}
FFN=${FFN:-5440}  # Megatron-LM's SwiGLU default for hidden 2048: int(8 x 2048 / 3 / 64) x 64
SEQ=${SEQ:-2048}
VOCAB=${VOCAB:-32000}
GBS=${GBS:-8}
ITERS=${ITERS:-8}

torchrun --nproc-per-node 1 launchers/pretrain_gpt_cpu.py \
    --num-layers ${LAYERS} --hidden-size ${HIDDEN} --num-attention-heads ${HEADS} \
    --ffn-hidden-size ${FFN} --seq-length ${SEQ} --max-position-embeddings ${SEQ} --vocab-size ${VOCAB} \
    --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
    --untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 \
    --micro-batch-size 2 --global-batch-size ${GBS} --train-iters ${ITERS} --lr 3.0e-4 --bf16 --seed 1234 \
    --log-interval 1
