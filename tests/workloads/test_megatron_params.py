"""The models adapters/megatron/cpu/model.py builds (the estimate's and the CPU loop's) hold the published models' parameters,
module by module: megatron-core's GPTModel built under FakeTensorMode (shapes only) from the Megatron-LM flags of
each model card's config, counted per module kind, against the count from the card's config values (Hugging Face
``config.json``) and the card's published total. One process builds the four models (about 10 s on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["--seq-length", "4096", "--max-position-embeddings", "4096", "--global-batch-size", "8", "--bf16",
          "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
          "--untie-embeddings-and-output-weights", "--disable-bias-linear"]


def llama(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int) -> list[str]:
    return COMMON + ["--num-layers", str(layers), "--hidden-size", str(hidden), "--ffn-hidden-size", str(ffn),
                     "--num-attention-heads", str(heads), "--group-query-attention", "--num-query-groups",
                     str(kv_heads), "--vocab-size", str(vocab)]


# Model cards' config values -> (Megatron-LM flags, per-module count from the card's config, published total).
def gqa_counts(layers, hidden, ffn, heads, kv_heads, vocab, experts=0):
    head = hidden // heads
    attn = layers * (hidden * head * (heads + 2 * kv_heads) + heads * head * hidden)
    mlp = layers * 3 * hidden * ffn
    out = {"embedding": vocab * hidden, "output_layer": vocab * hidden, "attention": attn,
           "norms": (2 * layers + 1) * hidden, "router": 0, "experts": 0, "shared_experts": 0, "mlp": 0}
    if experts:
        out.update(router=layers * experts * hidden, experts=experts * mlp)
    else:
        out["mlp"] = mlp
    return out


# DeepSeek-V2-Lite's config.json: hidden 2048, 27 layers (the first dense, intermediate 10944), 16 heads,
# q_lora_rank null (no q down/up projection), kv_lora_rank 512, qk_nope 128 / qk_rope 64 / v 128 head dims,
# 64 routed experts of 1408 (top-6) + 2 shared (2 x 1408), vocabulary 102400, untied.
DSV2_LITE = COMMON + [
    "--num-layers", "27", "--hidden-size", "2048", "--ffn-hidden-size", "10944", "--num-attention-heads", "16",
    "--multi-latent-attention", "--qk-layernorm", "--kv-lora-rank", "512", "--qk-head-dim", "128",
    "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128", "--num-experts", "64", "--moe-router-topk", "6",
    "--moe-ffn-hidden-size", "1408", "--moe-shared-expert-intermediate-size", "2816",
    "--moe-layer-freq", "([0]*1+[1]*26)", "--vocab-size", "102400"]
_MLA = 27 * (2048 * 16 * (128 + 64)  # q_proj (no q_lora_rank)
             + 2048 * (512 + 64) + 512  # kv_a_proj_with_mqa + kv_a_layernorm
             + 512 * 16 * (128 + 128)  # kv_b_proj
             + 16 * 128 * 2048)  # o_proj
DSV2_LITE_COUNTS = {"embedding": 102400 * 2048, "output_layer": 102400 * 2048, "attention": _MLA,
                    "norms": (2 * 27 + 1) * 2048, "mlp": 3 * 2048 * 10944, "router": 26 * 64 * 2048,
                    "experts": 26 * 64 * 3 * 2048 * 1408, "shared_experts": 26 * 3 * 2048 * 2816}

MODELS = {
    # name: (argv, per-module count from the card's config, the card's published total, tolerance of that total)
    "Llama-3-8B": (llama(32, 4096, 14336, 32, 8, 128256), gqa_counts(32, 4096, 14336, 32, 8, 128256),
                   8.03e9, 0.005e9),
    "Llama-3-70B": (llama(80, 8192, 28672, 64, 8, 128256), gqa_counts(80, 8192, 28672, 64, 8, 128256),
                    70.55e9, 0.005e9),
    "Mixtral-8x7B": (llama(32, 4096, 14336, 32, 8, 32000) + ["--num-experts", "8", "--moe-router-topk", "2"],
                     gqa_counts(32, 4096, 14336, 32, 8, 32000, experts=8), 46.7e9, 0.05e9),
    "DeepSeek-V2-Lite": (DSV2_LITE, DSV2_LITE_COUNTS, 15.7e9, 0.05e9),
}

SCRIPT = """
import json, sys
from infrarsi.adapters.megatron.estimate.step import run
out = {name: run({"argv": argv, "world": 1, "params_only": True}) for name, argv in json.load(sys.stdin).items()}
print(json.dumps(out))
"""


def test_built_models_hold_the_published_parameters_per_module():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps({k: v[0] for k, v in MODELS.items()}),
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    for name, (_, want, total, tol) in MODELS.items():
        assert "params" in got[name], (name, got[name])
        assert got[name]["params"] == want, name
        assert abs(sum(want.values()) - total) <= tol, (name, sum(want.values()))
    # the published exact totals (Hugging Face safetensors metadata)
    assert sum(MODELS["Llama-3-8B"][1].values()) == 8_030_261_248
    assert sum(MODELS["Llama-3-70B"][1].values()) == 70_553_706_496
    assert sum(MODELS["Mixtral-8x7B"][1].values()) == 46_702_792_704
