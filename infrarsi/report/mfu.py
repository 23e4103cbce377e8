"""One FLOP formula for every MFU the report prints (the embedded workload logs the same one): Megatron's
convention of ``infrarsi.transformer`` (``training_flops``; the shape from ``Transformer.from_args``).

    FLOPs/step = 6 * N * T  +  6 * L * S^2 * h * B

N: matmul parameters without the embedding (per layer: QKV h*(h + 2*kv), output h*h, MLP 3*h*ffn for
SwiGLU or 2*h*ffn for GELU; plus the output head h*V). T = B * S tokens per step. 6 = 2 FLOPs per
multiply-add x (forward + 2x backward). Attention: QK^T and AV cost 2 * 2 * S^2 * h per layer and
sample forward, x3 with the backward = 12 * L * S^2 * h * B, halved because the mask is causal
(Megatron-style accounting). Example, the embedded CPU contract: L 4, h 256, ffn 704, V 512, S 256,
B 16: N = 4 * (3*256^2 + 256^2 + 3*256*704) + 256*512 = 3,342,336; FLOPs/step = 6*N*4096 +
6*4*256^2*256*16 = 8.214e10 + 6.442e9 = 8.858e10 (what the workload itself counts).

MFU = FLOPs/step / (step time s * devices * peak FLOP/s per device); unknown when the contract leaves
hardware.peak_flops unset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..transformer import CAUSAL_MATMULS, Transformer, training_flops


def formula() -> str:
    """The formula every MFU of the report uses, in words: the convention ``transformer.CAUSAL_MATMULS``, as the
    first registered framework whose spec builds it with words of its own says it (whose accounting it is), else
    in the value's own words."""
    from ..adapters.registry import specs

    own = (s.flops_convention.text for s in specs() if s.flops_convention == CAUSAL_MATMULS)
    words = next((t for t in own if t != CAUSAL_MATMULS.text), CAUSAL_MATMULS.text)
    return (f"FLOPs/step = 6·N·T + 6·L·S²·h·B ({words}); N = matmul parameters without the embedding, "
            "T = B·S tokens per step; MFU = FLOPs/step / (step time × devices × peak FLOP/s per device)")


def flops_per_step(args: Mapping[str, Any], adapter: str) -> tuple[float, int, int] | None:
    """(FLOPs per step, N, T) from the fixed workload arguments (any spelling ``transformer.ALIASES``
    knows), or None when they do not say enough (e.g. a simulated cluster named by reference only)."""
    try:
        t = Transformer.from_args(args, framework=adapter)
    except ValueError:
        return None
    if not (t.layers and t.hidden and t.seq and t.gbs and t.vocab):
        return None
    if not t.heads:  # the formula needs only the K/V share: no heads given = multi-head
        t = replace(t, heads=1)
    n, tokens = int(t.matmul_params()), t.gbs * t.seq
    return training_flops(matmul_params=n, tokens=tokens, layers=t.layers, seq=t.seq, attn_width=t.q_width), n, tokens


def mfu(flops: float, step_time_s: float, devices: int, peak_flops: float | None) -> float | None:
    if not peak_flops or not step_time_s or step_time_s <= 0:
        return None
    return flops / (step_time_s * max(1, devices) * peak_flops)
