#!/bin/bash
# DeepSeek-V2-Lite (16B MoE: 64 routed experts, top-6, 2 shared, multi-latent attention) with Megatron-LM,
# started on each node with positional arguments, the way Megatron-LM's example scripts take them:
#   bash deepseek_v2_lite.sh NNODES EP [TP] [PP] [NODE_RANK] [MASTER_ADDR]
set -e
export CUDA_DEVICE_MAX_CONNECTIONS=1

NNODES=${1:?number of nodes}
EP=${2:?expert parallel size}
TP=${3:-1}
PP=${4:-1}
NODE_RANK=${5:-0}
MASTER_ADDR=${6:-localhost}
GPUS_PER_NODE=8

MODEL_ARGS=(
    --num-layers 27 --hidden-size 2048 --ffn-hidden-size 10944 --num-attention-heads 16
    --seq-length 4096 --max-position-embeddings 4096
    --multi-latent-attention --qk-layernorm --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128
    --swiglu --normalization RMSNorm --norm-epsilon 1e-06 --position-embedding-type rope
    --untie-embeddings-and-output-weights --disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0
)
MOE_ARGS=(
    --num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 1408 --moe-shared-expert-intermediate-size 2816
    --moe-layer-freq "([0]*1+[1]*26)" --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3
    --moe-token-dispatcher-type alltoall --expert-model-parallel-size ${EP}
)
TRAINING_ARGS=(
    --micro-batch-size 1 --global-batch-size 512 --train-iters 1000 --lr 4.2e-4 --min-lr 4.2e-5
    --weight-decay 0.1 --clip-grad 1.0 --bf16 --use-distributed-optimizer --overlap-grad-reduce
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
    --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size ${PP}
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model deepseek-ai/DeepSeek-V2-Lite --mock-data
    --log-interval 1 --eval-iters 0
)

torchrun --nproc_per_node ${GPUS_PER_NODE} --nnodes ${NNODES} --node_rank ${NODE_RANK} \
    --master_addr ${MASTER_ADDR} --master_port 6000 \
    pretrain_gpt.py "${MODEL_ARGS[@]}" "${MOE_ARGS[@]}" "${TRAINING_ARGS[@]}"
