"""Offline knowledge base: a prior for every catalog knob value, from published facts and arithmetic.

Each knob has a *level* function: value -> (log time, log memory) relative to an arbitrary origin.
The prior of a non-default value is ``level(value) - level(default)``, so a knob whose default is
"on" (or a TP default of 2) still gets the right sign. Int knobs follow ``log2(value / default)``.

Memory comes from one analytical model of per-device peak bytes, ``infrarsi.transformer.memory_terms``
(weights + grads + optimizer at 18 bytes/param in bf16, sharded by the distributed optimizer; activations
per layer after Korthikanti et al. 2022 by TP, SP, CP and recompute mode; the 1F1B first stage's
micro-batches in flight; logits), plus a fixed runtime share: ~1.25 GiB on a GPU (CUDA context, cuBLAS
workspaces, NCCL buffers), ~0.2 GiB for torch's CPU runtime. So every parallelism, recompute and optimizer
knob is judged by the same arithmetic on the workload's own shape (``transformer.Transformer``, read from
the workload arguments in any spelling ``transformer.ALIASES`` knows).

The pipeline bubble (fraction of step time idle) is (pp - 1) / (v m), m = micro-batches per step
(Narayanan et al. 2021).

Time effects are this module's own coefficients, one rule per knob; each rationale names the published
fact or measurement its sign and size rest on (they are estimates, not quoted numbers).
With no workload shape the model uses a 7B-class shape (s=4096, h=4096, a=32, L=32, V=32000) and
doubles the memory sd.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Callable

from ..knobs import Knob, KnobSpace
from ..transformer import Layout, Training, Transformer, data_parallel, memory_terms, resolve
from ..trial.memory_estimate import MemoryEstimate
from ..trial.prior import Prior

_FLASH_BACKENDS = ("auto", "flash", "fused")
# With no workload shape the model uses a 7B-class shape (and doubles the memory sd).
_SEVEN_B = {"seq_length": 4096, "hidden_size": 4096, "num_attention_heads": 32, "num_layers": 32, "vocab_size": 32000}


def shape_of(workload: Mapping[str, Any] | None) -> Transformer:
    """The transformer shape from fixed workload args in any spelling ``transformer.ALIASES`` knows;
    a 7B-class shape fills what they leave out. A value that is not an integer falls back too."""
    w = dict(workload or {})
    try:
        return Transformer.from_args(w, fallback=_SEVEN_B)
    except ValueError:  # an odd value: keep what parses, the 7B-class default for the rest
        ok = {}
        for k, v in w.items():
            try:
                Transformer.from_args({k: v})
                ok[k] = v
            except ValueError:
                pass
        return Transformer.from_args(ok, fallback=_SEVEN_B)


def shape_known(workload: Mapping[str, Any] | None) -> bool:
    """Whether the workload names its sequence length, hidden size and depth (else the 7B-class default)."""
    found = resolve(dict(workload or {}))
    return all(k in found for k in ("seq_length", "hidden_size", "num_layers"))


def sm_of(hardware: dict[str, Any] | None) -> float | None:
    """CUDA compute capability from hardware.sm / compute_capability, or the device kind's name."""
    hw = hardware or {}
    for key in ("sm", "compute_capability"):
        if hw.get(key) is not None:
            try:
                v = float(str(hw[key]).lower().removeprefix("sm").removeprefix("_"))
                return v / 10 if v >= 20 else v
            except ValueError:
                pass
    kind = str(hw.get("kind", "")).upper()
    for pat, sm in ((r"GB?[23]00|B[12]00", 10.0), (r"H[12]00|H800|GH200", 9.0), (r"L40|L4\b|4090|ADA", 8.9),
                    (r"A100|A800|A10\b|A30|A40|3090", 8.0), (r"V100", 7.0)):
        if re.search(pat, kind):
            return sm
    return None


@dataclass(frozen=True, kw_only=True)
class Context:
    """What the knowledge base knows about the run: shape, hardware and the default setting."""

    shape: Transformer
    known: bool  # the workload gave its shape (else the 7B-class default)
    sm: float | None
    devices: int
    cpu: bool
    cores: int
    defaults: dict[str, Any] = field(default_factory=dict)

    def d(self, knob: str, fallback: Any) -> Any:
        v = self.defaults.get(knob, fallback)
        return fallback if v is None else v


def context(space: KnobSpace, workload: dict[str, Any] | None, hardware: dict[str, Any] | None) -> Context:
    hw = hardware or {}
    kind = str(hw.get("kind", "")).lower()
    return Context(
        shape=shape_of(workload), known=shape_known(workload), sm=sm_of(hw), devices=int(hw.get("devices", 1) or 1),
        cpu=kind in ("", "cpu") and sm_of(hw) is None, cores=int(hw.get("cores") or os.cpu_count() or 1),
        defaults={k.name: k.default for k in space.knobs},
    )


# ------------------------------------------------------------------------------ the memory model
def _dp(ctx: Context, change: dict[str, Any], tp: int, pp: int, cp: int) -> int:
    """Data-parallel size: as set by ``change``, else world / (tp * pp * cp) on a known world size
    (the catalog derives DP that way), else the default."""
    if change.get("data_parallel"):
        return max(1, int(change["data_parallel"]))
    if ctx.devices > 1:
        return max(1, data_parallel(ctx.devices, tp, pp, cp) or ctx.devices // (tp * pp * cp))
    return max(1, int(ctx.defaults.get("data_parallel") or 1))


def peak_bytes(ctx: Context, change: dict[str, Any]) -> float:
    """Per-device peak bytes at the default setting with ``change`` applied: ``transformer.memory_terms``
    plus the runtime's fixed share (see the module doc)."""
    g = {**ctx.defaults, **change}.get
    sh = ctx.shape
    tp, pp, cp, ep = (max(1, int(g(k) or 1)) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel"))
    b = max(1, int(g("micro_batch_size") or 1))
    dp = _dp(ctx, change, tp, pp, cp)
    lay = Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, vpp=max(1, int(g("virtual_pipeline") or 1)), micro_batch=b,
                 microbatches=max(1, sh.gbs // (b * dp)) if sh.gbs else pp,
                 sequence_parallel=g("sequence_parallel") is True)
    bf16 = g("bf16") is not False or ctx.defaults.get("bf16") is None
    tr = Training(bf16=bf16, fp8=str(g("fp8_recipe") or "none") != "none",
                  distributed_optimizer=g("distributed_optimizer") is True, cpu_offload=g("cpu_offload") is True,
                  recompute=str(g("recompute_granularity") or "none"),
                  flash_attention=str(g("attention_backend") or "auto") in _FLASH_BACKENDS,
                  fused_cross_entropy=g("cross_entropy_fusion") is True)
    # outside the model: CUDA context, cuBLAS workspaces, NCCL buffers (~1.25 GiB); torch's own CPU runtime (~0.2 GiB)
    runtime = 0.2 * 2**30 if ctx.cpu else 1.25 * 2**30
    return runtime + memory_terms(sh, lay, tr).total


def _log_mem_ratio(ctx: Context, knob: str, value: Any) -> float:
    return math.log(peak_bytes(ctx, {knob: value}) / peak_bytes(ctx, {}))


# --------------------------------------------------------------------------------- the knowledge
@dataclass(frozen=True)
class Belief:
    """A prior's content before it is tied to a knob value: log-scale means and sds, and why."""

    time: float = 0.0
    time_sd: float = 0.05
    mem: float = 0.0
    mem_sd: float = 0.05
    why: str = ""


Rule = Callable[[Knob, Any, Context], Belief]


def _mem_sd(ctx: Context) -> float:
    """Shape known: the arithmetic is close (0.08); MoE adds routing imbalance and dispatch buffers (0.12)."""
    if not ctx.known:
        return 0.2
    return 0.12 if ctx.shape.experts else 0.08


def _model_mem(knob: Knob, value: Any, ctx: Context) -> float:
    return _log_mem_ratio(ctx, knob.name, value)


def _steps(knob: Knob, value: Any) -> float:
    """log2(value / default) for positive int knobs (0 when the default is not positive)."""
    d = knob.default
    return math.log2(value / d) if isinstance(d, int) and d > 0 and value > 0 else 0.0


def _bubble(ctx: Context, change: dict[str, Any]) -> float:
    """log(1 + pipeline bubble) at the default setting with ``change`` applied."""
    g = {**ctx.defaults, **change}.get
    pp, vpp, b = (max(1, int(g(k) or 1)) for k in ("pipeline_parallel", "virtual_pipeline", "micro_batch_size"))
    tp, cp = max(1, int(g("tensor_parallel") or 1)), max(1, int(g("context_parallel") or 1))
    dp = _dp(ctx, change, tp, pp, cp)
    m = max(1, ctx.shape.gbs // (b * dp)) if ctx.shape.gbs else 8
    return math.log(1 + (pp - 1) / (vpp * m))


def _delta_bubble(ctx: Context, knob: str, value: Any) -> float:
    return _bubble(ctx, {knob: value}) - _bubble(ctx, {})


KORTHIKANTI = "Korthikanti et al. 2022 activation formula s*b*h*(34+5as/h) per layer"


def _tensor_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    cross_node = v > 8 and not ctx.cpu
    t = 0.07 * n + (0.35 if cross_node else 0.0)
    return Belief(t, 0.08 * abs(n) + 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"TP {k.default}->{v}: weights/grads/optimizer and most activations split {v}/{k.default}x ({KORTHIKANTI}: "
                  f"10+24/t without SP); each doubling adds 4 all-reduces of s*b*h per layer and shrinks GEMMs"
                  + ("; beyond one 8-GPU node TP all-reduces cross the network (Narayanan et al. 2021)" if cross_node else ""))


def _pipeline_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    return Belief(_delta_bubble(ctx, k.name, v) + 0.02 * n, 0.06 * abs(n) + 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"PP {k.default}->{v}: parameters and optimizer split over stages, the first 1F1B stage still holds pp "
                  f"micro-batches of L/pp layers (Korthikanti et al. 2022); bubble (pp-1)/(v*m) idle time (Narayanan et al. 2021)")


def _virtual_pipeline(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    return Belief(_delta_bubble(ctx, k.name, v) + 0.01 * n, 0.04 * abs(n) + 0.02, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"interleaved 1F1B with {v} virtual stages: bubble (pp-1)/(v*m) shrinks {v}x at the cost of v times more "
                  f"p2p sends; activations x(1+(pp-1)/(pp*v)) (Narayanan et al. 2021); no effect when pp=1")


def _context_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    return Belief(0.05 * n, 0.08 * abs(n) + 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"CP {k.default}->{v}: the sequence is split, so every activation term shrinks ~{v}/{k.default}x; ring "
                  f"attention exchanges K/V between ranks, mostly overlapped with attention compute (pays off for long sequences)")


def _expert_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    if not ctx.shape.experts:
        return Belief(0.0, 0.03, 0.0, 0.03, "expert parallelism only matters for MoE models (num_experts unset)")
    return Belief(0.04 * n, 0.08 * abs(n) + 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"EP {k.default}->{v}: expert weights and their optimizer states split over {v} ranks; each MoE layer "
                  f"pays two all-to-all token exchanges (dispatch, combine)")


def _data_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    if ctx.devices > 1 and k.default == ctx.devices:  # fixed world: DP is derived from the other degrees
        return Belief(0.0, 0.1 * abs(n) + 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                      f"on a fixed world of {ctx.devices} devices DP = world/(tp*pp*cp): DP {v} means more model "
                      f"parallelism, whose cost the tp/pp/cp priors carry; memory changes only through the distributed "
                      f"optimizer's 12 bytes/param / dp")
    return Belief(-0.6 * n, 0.2 * abs(n) + 0.05, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"DP {k.default}->{v}: each replica runs {k.default}/{v} of the micro-batches of a fixed global batch, "
                  f"minus the gradient all-reduce (ring: 2(dp-1)/dp x gradient bytes); memory changes only through the "
                  f"distributed optimizer's 12 bytes/param / dp")


def _micro_batch_size(k: Knob, v: Any, ctx: Context) -> Belief:
    n = _steps(k, v)
    gemm = -0.06 * n / (1 + math.log2(max(1, k.default)))  # diminishing: larger b fills the GEMMs less each time
    return Belief(gemm + _delta_bubble(ctx, k.name, v), 0.05 * abs(n) + 0.02, _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"micro-batch {k.default}->{v}: larger GEMMs run closer to peak, activations grow ~{v}/{k.default}x "
                  f"({KORTHIKANTI}, linear in b), and fewer micro-batches per step widen the pipeline bubble when pp>1")


def _sequence_parallel(k: Knob, v: Any, ctx: Context) -> Belief:
    on = 1 if v is True else -1
    tp = int(ctx.d("tensor_parallel", 1))
    why = ("sequence parallel splits the 10 s*b*h bytes of layernorm/dropout activations over TP "
           "(10+24/t -> 34/t, Korthikanti et al. 2022) and the layernorm/dropout/residual work that TP otherwise "
           "replicates on every rank; reduce-scatter + all-gather move the same bytes as the all-reduce")
    if tp <= 1:
        return Belief(0.0, 0.02, 0.0, 0.02, why + "; no effect at TP=1")
    n = math.log2(tp)  # the replicated element-wise share grows with TP
    return Belief(-0.03 * n * on, 0.03 * n + 0.02, _model_mem(k, v, ctx), _mem_sd(ctx), why)


def _recompute_granularity(k: Knob, v: Any, ctx: Context) -> Belief:
    flash = str(ctx.d("attention_backend", "auto")) in _FLASH_BACKENDS
    levels = {
        "none": (0.0, 0.01, "no recomputation"),
        "selective": (0.03, 0.02, "selective recompute re-runs only core attention: it drops the 5as/h term of "
                      f"{KORTHIKANTI} at ~2-4% extra time (Korthikanti et al. 2022, Table 4)"
                      + ("; with flash/fused attention that term is never stored, so the saving is small" if flash else "")),
        "full": (math.log(1.33), 0.06, "full recompute stores only each layer's input (2 s*b*h bytes) and re-runs the "
                 "forward in the backward: ~+33% time, since the forward is ~1/3 of forward+backward FLOPs (Korthikanti et al. 2022)"),
    }
    t, tsd, why = levels.get(str(v), (0.0, 0.3, f"unknown recompute granularity {v!r}"))
    t0, tsd0, _ = levels.get(str(k.default), (0.0, 0.3, ""))
    return Belief(t - t0, math.hypot(tsd, tsd0), _model_mem(k, v, ctx), _mem_sd(ctx), why)


def _recompute_detail(k: Knob, v: Any, ctx: Context) -> Belief:
    if str(ctx.d("recompute_granularity", "none")) != "full":
        return Belief(0.0, 0.02, 0.0, 0.02, f"{k.name} only acts with recompute_granularity=full (the default is not full)")
    if k.kind == "int":
        n = _steps(k, v)  # under method=block: more layers recomputed = more time, less memory
        return Belief(0.06 * n, 0.05 * abs(n) + 0.02, -0.08 * n, 0.08 * abs(n) + 0.03,
                      f"recompute_num_layers {k.default}->{v}: the block method recomputes that many layers per stage "
                      f"(each ~1/3 of its forward+backward time) and keeps the rest's activations")
    return Belief(0.0, 0.05, 0.0, 0.08, f"recompute_method={v}: uniform spreads checkpoints over layer groups, block "
                  f"recomputes the first N layers per stage; effect depends on recompute_num_layers")


def _distributed_optimizer(k: Knob, v: Any, ctx: Context) -> Belief:
    on = 1 if v is True else -1
    return Belief(0.01 * on, 0.03, _model_mem(k, v, ctx), _mem_sd(ctx),
                  "distributed optimizer (ZeRO-1, Rajbhandari et al. 2020) shards the 12 bytes/param of fp32 master "
                  "weights and Adam moments over DP (18 -> 6 + 12/dp bytes/param); reduce-scatter + all-gather move the "
                  "same bytes as the all-reduce it replaces")


def _overlap(scale: float, mem: float, needs: str, fact: str) -> Rule:
    def rule(k: Knob, v: Any, ctx: Context) -> Belief:
        on = 1 if v is True else -1
        tp = int(ctx.d("tensor_parallel", 1))
        dp = _dp(ctx, {}, tp, int(ctx.d("pipeline_parallel", 1)), int(ctx.d("context_parallel", 1)))
        active = (dp > 1) if needs == "dp" else (tp > 1)
        if not active:
            return Belief(0.0, 0.02, 0.0, 0.02, f"{fact}; no effect when {needs}=1")
        # TP traffic per layer is fixed but compute per rank shrinks 1/tp: the hidden share grows with log2(tp)
        n = math.log2(tp) / 2 if needs == "tp" else 1.0
        return Belief(scale * n * on, abs(scale) * n + 0.02, mem * on, 0.02, fact)

    return rule


def _bf16(k: Knob, v: Any, ctx: Context) -> Belief:
    on = 1 if v is True else -1
    mem = _model_mem(k, v, ctx)  # activations halve; weights 2 (bf16) + 4 (fp32 grad) + 12 vs fp32's 4 + 4 + 8
    if ctx.cpu:
        return Belief(0.0, 0.3, mem, 0.15, "bf16 on a CPU: fast only with AMX/AVX512-BF16; activations halve, "
                      "autocast keeps fp32 weights")
    return Belief(-0.5 * on, 0.2, mem, 0.1, "bf16 runs GEMMs on tensor cores (2x+ TF32, ~16x FP32 peak) and "
                  "halves activation bytes, but keeps fp32 master weights and grads: 18 bytes/param vs fp32's 16")


def _fp8(k: Knob, v: Any, ctx: Context) -> Belief:
    def level(val: str) -> Belief:
        if val == "none":
            return Belief(0.0, 0.01, 0.0, 0.01, "")
        need = 10.0 if val == "mxfp8" else (9.0 if val in ("blockwise", "rowwise") else 8.9)
        if ctx.sm is None or ctx.sm < need:
            where = "a CPU" if ctx.cpu else f"sm{ctx.sm}" if ctx.sm else "unknown hardware"
            return Belief(0.0, 0.5, 0.0, 0.1, f"fp8 recipe {val!r} needs sm{need:g}+ ({where} here): expect the launch to "
                          f"fail or fall back; memory is unchanged")
        gain = {"delayed": -0.2, "tensorwise": -0.18, "blockwise": -0.15, "rowwise": -0.15, "mxfp8": -0.22}.get(val, -0.15)
        # quantize/cast kernels are memory-bound: they eat the GEMM gain on small hidden sizes
        scale = min(1.0, max(0.0, (math.log2(ctx.shape.hidden) - 11) / 2))  # h=2048: 0, 4096: 0.5, 8192+: 1
        return Belief(gain * scale, 0.06 + 0.1 * (1 - scale), 0.03, 0.03,
                      f"fp8 GEMMs ({val} scaling) run ~2x bf16 peak on sm{ctx.sm:g} (sm89+); end-to-end ~15-25% at "
                      f"hidden >= 8192 since attention/norms stay bf16, less at hidden {ctx.shape.hidden} where the "
                      f"memory-bound quantize/cast kernels take a larger share; fp8 weight copies and scale/amax "
                      f"history add ~1 byte/param")

    e, d = level(str(v)), level(str(k.default))
    return Belief(e.time - d.time, math.hypot(e.time_sd, d.time_sd), e.mem - d.mem, math.hypot(e.mem_sd, d.mem_sd), e.why or d.why)


def _attention_backend(k: Knob, v: Any, ctx: Context) -> Belief:
    times = {"auto": (0.0, 0.02), "flash": (0.0, 0.03), "fused": (-0.02, 0.05), "unfused": (0.25, 0.15), "local": (0.25, 0.15)}
    (t, tsd), (t0, tsd0) = times.get(str(v), (0.0, 0.3)), times.get(str(k.default), (0.0, 0.3))
    return Belief(t - t0, math.hypot(tsd, tsd0), _model_mem(k, v, ctx), _mem_sd(ctx),
                  f"attention {k.default}->{v}: flash/cuDNN-fused kernels (auto picks one) never store the s x s scores; "
                  f"unfused/local store them (the 5as/h term of {KORTHIKANTI}) and run several memory-bound kernels")


def _moe_dispatcher(k: Knob, v: Any, ctx: Context) -> Belief:
    if not ctx.shape.experts:
        return Belief(0.0, 0.02, 0.0, 0.02, "token dispatcher only matters for MoE models (num_experts unset)")
    if ctx.shape.topk >= 4:  # fine-grained MoE: all-to-all ships k copies of every token
        return Belief(0.0, 0.2, 0.0, 0.05, f"with top-{ctx.shape.topk} routing all-to-all sends {ctx.shape.topk} "
                      "copies of each token across EP ranks while all-gather sends each token once: either can win")
    times = {"allgather": 0.0, "alltoall": -0.05, "flex": -0.08}
    t = times.get(str(v), 0.0) - times.get(str(k.default), 0.0)
    return Belief(t, 0.06, 0.0, 0.05, "alltoall sends each token only to its top-k experts' ranks instead of gathering "
                  "all tokens everywhere; flex (DeepEP) fuses and overlaps the exchange; gains grow with expert parallelism")


def _bool_rule(t: float, tsd: float, m: float, msd: float, why: str, moe_only: bool = False) -> Rule:
    def rule(k: Knob, v: Any, ctx: Context) -> Belief:
        if moe_only and not ctx.shape.experts:
            return Belief(0.0, 0.02, 0.0, 0.02, f"{k.name} only matters for MoE models (num_experts unset)")
        on = 1 if v is True else -1
        return Belief(t * on, tsd, m * on, msd, why)

    return rule


def _cross_entropy_fusion(k: Knob, v: Any, ctx: Context) -> Belief:
    on = 1 if v is True else -1
    return Belief(-0.02 * on, 0.02, _model_mem(k, v, ctx), _mem_sd(ctx),
                  "fused cross-entropy avoids materializing an fp32 copy of the s*b*V/t logits (4 bytes x vocab per "
                  "token) and a few memory-bound kernels")


def _cpu_offload(k: Knob, v: Any, ctx: Context) -> Belief:
    on = 1 if v is True else -1
    return Belief(0.3 * on, 0.2, _model_mem(k, v, ctx), _mem_sd(ctx),
                  "CPU offload keeps the 12 bytes/param of optimizer state in host memory and steps there "
                  "(ZeRO-Offload, Ren et al. 2021): device memory drops, the step pays PCIe transfers and a CPU Adam")


def _fsdp_reshard(k: Knob, v: Any, ctx: Context) -> Belief:
    # level of "keep gathered parameters" (never reshard): one all-gather less per layer, full layer params resident
    def level(x: Any) -> tuple[float, float]:
        never = str(x) in ("never", "False", "false")
        default_pp = str(x) == "default" and int(ctx.d("pipeline_parallel", 1)) > 1  # torchtitan: PP -> no reshard
        return (-0.03, 0.15) if never or default_pp else (0.0, 0.0)

    (t, m), (t0, m0) = level(v), level(k.default)
    return Belief(t - t0, 0.03, m - m0, 0.1, "FSDP resharding after forward frees each layer's gathered parameters "
                  "until the backward, which all-gathers them again; never resharding skips that all-gather and keeps "
                  "the unsharded parameters resident (default: reshard unless pipeline parallel)")


def _num_workers(k: Knob, v: Any, ctx: Context) -> Belief:
    if v == 0:
        return Belief(0.02, 0.05, 0.0, 0.01, "num_workers=0 loads batches in the training process itself, on the "
                      "critical path; it matters only when loading is slow compared with a step")
    n = _steps(k, v)
    return Belief(-0.01 * n, 0.03 * abs(n) + 0.01, 0.0, 0.01, "data-loader workers prefetch batches in separate "
                  "processes; they only help when the input pipeline is on the critical path, and cost host memory, "
                  "not device memory")


def _intra_op_threads(k: Knob, v: Any, ctx: Context) -> Belief:
    def level(x: int) -> float:  # ideal speed-up up to the core count, oversubscription beyond it
        x = max(1, int(x))
        return -0.6 * math.log2(min(x, ctx.cores)) + 0.3 * max(0.0, math.log2(x / ctx.cores))

    n = _steps(k, v)
    return Belief(level(v) - level(k.default), 0.15 * abs(n) + 0.05, 0.0, 0.03,
                  f"torch intra-op threads {k.default}->{v} on {ctx.cores} cores: GEMMs parallelize sub-linearly up to the "
                  f"core count; more threads than cores oversubscribe and slow down")


def _adam_impl(k: Knob, v: Any, ctx: Context) -> Belief:
    times = {"foreach": 0.0, "fused": -0.03, "for_loop": 0.05}
    t = times.get(str(v), 0.0) - times.get(str(k.default), 0.0)
    return Belief(t, 0.03, 0.0, 0.01, "fused Adam updates all parameters in one kernel per dtype/device group "
                  "instead of a foreach loop of kernels; same math, same state memory")


def _kernel(k: Knob, v: Any, ctx: Context) -> Belief:
    return Belief(0.0, 0.15, 0.0, 0.05, f"kernel candidate {v} for this op: verified equal to the reference; "
                  "nothing is known of its speed until it is benchmarked")


def _nccl(k: Knob, v: Any, ctx: Context) -> Belief:
    if str(v) == "NVLS" and (ctx.sm is None or ctx.sm < 9.0):
        return Belief(0.0, 0.3, 0.0, 0.02, "NCCL_ALGO=NVLS needs NVLink SHARP (NVSwitch, sm90+): expect NCCL to refuse it here")
    return Belief(0.0, 0.05, 0.0, 0.01, f"NCCL setting {k.name}={v}: changes collective algorithms/buffers; effects are "
                  "small and topology-specific, device memory changes only by buffer sizes")


RULES: dict[str, Rule] = {
    "tensor_parallel": _tensor_parallel,
    "pipeline_parallel": _pipeline_parallel,
    "virtual_pipeline": _virtual_pipeline,
    "context_parallel": _context_parallel,
    "expert_parallel": _expert_parallel,
    "data_parallel": _data_parallel,
    "micro_batch_size": _micro_batch_size,
    "sequence_parallel": _sequence_parallel,
    "recompute_granularity": _recompute_granularity,
    "recompute_method": _recompute_detail,
    "recompute_num_layers": _recompute_detail,
    "distributed_optimizer": _distributed_optimizer,
    "overlap_grad_reduce": _overlap(-0.04, 0.01, "dp", "overlapping the gradient reduce-scatter/all-reduce with the "
                                    "backward hides DP communication; bucket buffers cost a little memory"),
    "overlap_param_gather": _overlap(-0.03, 0.01, "dp", "overlapping the distributed optimizer's parameter all-gather "
                                     "with the next forward hides it (needs distributed_optimizer)"),
    "tp_comm_overlap": _overlap(-0.05, 0.02, "tp", "TP communication overlap (Transformer Engine userbuffers) splits "
                                "GEMMs into chunks that overlap the TP all-gather/reduce-scatter; userbuffers cost memory"),
    "async_tp": _overlap(-0.05, 0.01, "tp", "async TP (torch SymmetricMemory) micro-pipelines TP all-gather/reduce-scatter "
                         "with the matmuls; needs torch.compile"),
    "bf16": _bf16,
    "fp8_recipe": _fp8,
    "attention_backend": _attention_backend,
    "moe_token_dispatcher": _moe_dispatcher,
    "moe_grouped_gemm": _bool_rule(-0.08, 0.06, 0.0, 0.02, "grouped GEMM runs all local experts in one kernel instead of "
                                   "a loop of small per-expert GEMMs", moe_only=True),
    "cross_entropy_fusion": _cross_entropy_fusion,
    "manual_gc": _bool_rule(-0.02, 0.02, 0.01, 0.02, "Python's automatic GC pauses ranks at different times and the "
                            "collectives wait for the slowest; collecting at fixed steps (a manual-GC flag) removes "
                            "the stragglers"),
    "torch_compile": _bool_rule(-0.08, 0.08, -0.05, 0.08, "torch.compile fuses elementwise/normalization ops into "
                                "Triton kernels, cutting memory traffic and some saved intermediates; first steps pay "
                                "compilation (outside the measured window)"),
    "fsdp_reshard_after_forward": _fsdp_reshard,
    "cpu_offload": _cpu_offload,
    "num_workers": _num_workers,
    "intra_op_threads": _intra_op_threads,
    "adam_impl": _adam_impl,
}


def rule_for(name: str) -> Rule | None:
    if name in RULES:
        return RULES[name]
    if name.startswith("nccl_"):
        return _nccl
    if name.startswith("kernel_"):
        return _kernel
    return None


def knows(name: str) -> bool:
    """Whether the knowledge base has an informed prior for this knob."""
    return rule_for(name) is not None


def uninformative(knob: str, value: Any, why: str = "") -> Prior:
    return Prior(knob=knob, value=value, time_mean=0.0, time_sd=1.0, mem_mean=0.0, mem_sd=1.0, source="uninformative",
                 rationale=why or "no knowledge of this knob: mean 0, sd 1 on the log scale")


def offline_prior(knob: Knob, value: Any, ctx: Context) -> Prior:
    """The knowledge base's prior for one non-default value of ``knob``."""
    rule = rule_for(knob.name)
    if rule is None:
        return uninformative(knob.name, value)
    try:
        e = rule(knob, value, ctx)
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # an odd domain value: say so, stay uninformed
        return uninformative(knob.name, value, f"offline rule for {knob.name} could not judge {value!r}: {exc}")
    return Prior(knob=knob.name, value=value, time_mean=round(e.time, 4), time_sd=max(0.01, round(e.time_sd, 4)),
                 mem_mean=round(e.mem, 4), mem_sd=max(0.01, round(e.mem_sd, 4)), source="offline", rationale=e.why)


def offline_priors(space: KnobSpace, *, workload: dict[str, Any] | None = None,
                   hardware: dict[str, Any] | None = None) -> list[Prior]:
    """One prior per non-default knob value of ``space``, in ``space.feature_names`` order."""
    ctx = context(space, workload, hardware)
    return [offline_prior(k, v, ctx) for k in space.knobs for v in k.domain if v != k.default]


def memory_estimator(space: KnobSpace, *, workload: dict[str, Any] | None,
                     hardware: dict[str, Any] | None) -> MemoryEstimate:
    """An analytical per-device peak-memory estimate (bytes) for any full setting of ``space``: the same
    model the memory priors come from. The search uses log of it as an offset, so the memory model
    learns only the residual (what this machine and framework add to the arithmetic)."""
    ctx = context(space, workload, hardware)

    def estimate(setting: Mapping[str, Any]) -> float:
        return peak_bytes(ctx, dict(setting))

    return MemoryEstimate(peak=estimate, basis=_analytical)  # basis: what the report prints beside each trial's figure


def _analytical(setting: Mapping[str, Any]) -> str:
    return "analytical"
