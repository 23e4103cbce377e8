#!/bin/bash
#SBATCH --job-name=llama3-70b
#SBATCH --nodes=8
#SBATCH --exclusive
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
# Llama 3 70B with Megatron-LM as a Slurm batch job: srun starts one task per GPU inside an NGC container.
# TP 4 x PP 4 x DP 4 on 64 H100s (NODES=16 with `sbatch --nodes=16` doubles the data parallelism), sequence
# parallelism, the distributed optimizer with overlapped gradient reduction, selective recompute, mock data.

DATETIME=`date +'date_%y-%m-%d_time_%H-%M-%S'`
RESULTS=${PWD}/results/llama3_70b
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_ALGO=Ring

NODES=${NODES:-8}
TP=${TP:-4}
PP=${PP:-4}

MEGATRON_ARGS="--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
  --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
  --seq-length 8192 --max-position-embeddings 8192 --swiglu --normalization RMSNorm \
  --position-embedding-type rope --rotary-base 500000 --disable-bias-linear \
  --untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 \
  --micro-batch-size 1 --global-batch-size 128 --train-iters 1000 --lr 1.5e-4 --bf16 \
  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size ${PP} --sequence-parallel \
  --use-distributed-optimizer --overlap-grad-reduce --recompute-activations \
  --mock-data --tokenizer-type NullTokenizer --vocab-size 128256 \
  --save ${RESULTS}/checkpoints --log-interval 10"

srun --nodes=${NODES} --ntasks-per-node=8 \
     --container-image=nvcr.io/nvidia/pytorch:24.09-py3 \
     --container-mounts=${PWD}:${PWD},/lustre:/lustre \
     --output=${RESULTS}/slurm_%j_${DATETIME}.log \
     --container-workdir=${PWD} \
     python pretrain_gpt.py ${MEGATRON_ARGS}
