"""Megatron-LM's theoretical memory formula (adapters/megatron/estimate/formula.py) on Llama 3 70B, by hand."""

import pytest

from infrarsi.adapters.megatron.estimate.formula import theoretical_memory
from infrarsi.adapters.megatron.cpu.model import parse

LLAMA3_70B = ["--num-layers", "80", "--hidden-size", "8192", "--ffn-hidden-size", "28672", "--num-attention-heads",
              "64", "--group-query-attention", "--num-query-groups", "8", "--seq-length", "8192", "--swiglu",
              "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
              "--micro-batch-size", "1", "--global-batch-size", "128", "--bf16", "--vocab-size", "128256",
              "--tokenizer-type", "NullTokenizer", "--tensor-model-parallel-size", "4",
              "--pipeline-model-parallel-size", "4", "--sequence-parallel", "--use-distributed-optimizer",
              "--recompute-activations"]


def test_llama3_70b_on_64_ranks():
    f = theoretical_memory(parse(LLAMA3_70B, strict=False).args, 64)
    h, ffn = 8192, 28672
    attn = 2 * h * h * (1 + 8 / 64)  # q and o at h x h, k and v at h x h/8 each
    layer = 2 * h * (ffn * 1.5 + 1) + attn  # SwiGLU's three FFN matrices, one RMSNorm weight each before attn/MLP
    block = 80 * layer + h
    shard = (block / 4 + h * 128512) / 4  # 1/PP of the block + the embedding (128257 padded to 512 x k), over TP
    assert f.params_most_loaded_shard == pytest.approx(shard)
    assert f.weights_and_optimizer == pytest.approx(shard * (6 + 12 / 4))  # distributed optimizer over DP 4
    per_layer = 8192 * 1 * h * (18 + 4 * ffn / h)  # SP + selective recompute, all layers in flight on stage 1
    assert f.activations == pytest.approx((per_layer * 80 + 8 * 8192 * 4 + 8192 * h * 4) / 4)
