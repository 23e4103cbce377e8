"""The catalog of standard launch knobs and the rules between them.

Every knob has one name the tuner uses everywhere (``tensor_parallel``, ``recompute_granularity``,
...) and a spelling per framework: a Megatron-LM flag (``--tensor-model-parallel-size``), a
torchtitan field (``parallelism.tensor_parallel_degree``) or an environment variable
(``env:NCCL_ALGO``). A knob a framework cannot express has no spelling for it and is left out of
that framework's space.

:func:`build_knob_space` turns the catalog into a :class:`KnobSpace` for one fixed workload: int
domains become the values that can work for that model and world size, MoE knobs collapse to their
default on a dense model, and the constraints check the arithmetic with the workload's numbers::

    space = build_knob_space(num_layers=32, num_attention_heads=32, num_query_groups=8,
                             seq_length=8192, global_batch_size=128, world_size=8, framework="megatron")
    space.validate(space.default().replace(tensor_parallel=3))
    # [Violation('tp_divides_heads', 'tensor parallel 3 does not divide 32 attention heads (32 % 3 = 2)'), ...]

Constraint messages show the numbers and name the fix; a constraint reads knobs the space does not
hold at their catalog default, so one rule set serves every framework.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..transformer import canonical
from .hardware import fp8_unsupported
from .knob import Knob
from .rules import WorkloadShape, constraints
from .space import Constraint, Derived, KnobSpace, Violation

FRAMEWORKS = ("megatron", "torchtitan", "minigpt")
ENV_PREFIX = "env:"

# Values an int parallel knob may take when the world size is not known.
_PAR_UNKNOWN = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 128)


def _k(name: str, kind: str, domain: tuple[Any, ...], default: Any, group: str, doc: str, **spelling: str) -> Knob:
    return Knob(name=name, kind=kind, domain=domain, default=default, group=group, doc=doc, spelling=spelling)


_TT = "torchtitan"

# Broad domains; build_knob_space narrows the int ones to the workload.
KNOBS: tuple[Knob, ...] = (
    # ---------------------------------------------------------------- parallelism
    _k("tensor_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Tensor (intra-layer) model parallel degree.",
       megatron="--tensor-model-parallel-size", torchtitan="parallelism.tensor_parallel_degree"),
    _k("pipeline_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Pipeline (inter-layer) parallel degree.",
       megatron="--pipeline-model-parallel-size", torchtitan="parallelism.pipeline_parallel_degree"),
    _k("virtual_pipeline", "int", (1, 2, 3, 4, 5, 6, 8), 1, "parallelism",
       "Virtual pipeline stages per pipeline rank (interleaved 1F1B); 1 = no interleaving.",
       megatron="--num-virtual-stages-per-pipeline-rank"),
    _k("context_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Context (sequence-dimension) parallel degree for attention.",
       megatron="--context-parallel-size", torchtitan="parallelism.context_parallel_degree"),
    _k("expert_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Expert parallel degree (MoE): experts are split over this many ranks.",
       megatron="--expert-model-parallel-size", torchtitan="parallelism.expert_parallel_degree"),
    _k("data_parallel", "int", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 1, "parallelism",
       "Data parallel degree; with a fixed world size it is world / (tp * pp * cp). torchtitan: "
       "replicate * shard degree.",
       torchtitan="parallelism.data_parallel_shard_degree"),
    _k("micro_batch_size", "int", (1, 2, 3, 4, 6, 8, 12, 16), 1, "memory",
       "Samples per forward/backward pass per data-parallel rank; the global batch stays fixed, so a "
       "smaller micro batch means more gradient-accumulation steps.",
       megatron="--micro-batch-size", torchtitan="training.local_batch_size"),
    _k("sequence_parallel", "bool", (False, True), False, "parallelism",
       "Shard LayerNorm/dropout activations along the sequence over the TP group (needs TP > 1).",
       megatron="--sequence-parallel", torchtitan="parallelism.enable_sequence_parallel"),
    # ---------------------------------------------------------------- memory
    _k("recompute_granularity", "categorical", ("none", "selective", "full"), "none", "memory",
       "Activation recomputation: none, selective (attention core), or full layers.",
       megatron="--recompute-granularity", torchtitan="activation_checkpoint.mode"),
    _k("recompute_method", "categorical", ("uniform", "block"), "uniform", "memory",
       "With full recompute: uniform (every N layers a unit) or block (first N layers per stage).",
       megatron="--recompute-method"),
    _k("recompute_num_layers", "int", (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32), 1, "memory",
       "With full recompute: layers per recompute unit (uniform) or layers recomputed per stage (block).",
       megatron="--recompute-num-layers"),
    _k("distributed_optimizer", "bool", (False, True), False, "memory",
       "Shard optimizer state over data-parallel ranks (ZeRO-1).",
       megatron="--use-distributed-optimizer"),
    _k("cpu_offload", "bool", (False, True), False, "memory",
       "Offload parameters, gradients and optimizer state to host memory (FSDP CPU offload).",
       torchtitan="training.enable_cpu_offload"),
    _k("fsdp_reshard_after_forward", "categorical", ("default", "always", "never"), "default", "memory",
       "FSDP: free gathered parameters after forward (always), keep them (never), or the policy default.",
       torchtitan="parallelism.fsdp_reshard_after_forward"),
    # ---------------------------------------------------------------- communication
    _k("overlap_grad_reduce", "bool", (False, True), False, "communication",
       "Overlap the data-parallel gradient reduce-scatter/all-reduce with backward.",
       megatron="--overlap-grad-reduce"),
    _k("overlap_param_gather", "bool", (False, True), False, "communication",
       "Overlap the distributed optimizer's parameter all-gather with forward (needs the distributed "
       "optimizer and overlap_grad_reduce).",
       megatron="--overlap-param-gather"),
    _k("tp_comm_overlap", "bool", (False, True), False, "communication",
       "Overlap tensor-parallel communication with GEMMs (Transformer Engine userbuffers; needs "
       "sequence parallel).",
       megatron="--tp-comm-overlap"),
    _k("async_tp", "bool", (False, True), False, "communication",
       "Asynchronous tensor parallel (micro-pipelined collective matmuls; needs torch.compile).",
       torchtitan="compile.enable_async_tensor_parallel"),
    _k("moe_token_dispatcher", "categorical", ("allgather", "alltoall", "flex"), "allgather", "communication",
       "How MoE tokens reach their experts.",
       megatron="--moe-token-dispatcher-type"),
    _k("nccl_algo", "categorical", ("default", "Ring", "Tree", "NVLS"), "default", "communication",
       "NCCL_ALGO; default = unset (NCCL chooses).",
       megatron="env:NCCL_ALGO", torchtitan="env:NCCL_ALGO"),
    _k("nccl_proto", "categorical", ("default", "Simple", "LL", "LL128"), "default", "communication",
       "NCCL_PROTO; default = unset (NCCL chooses).",
       megatron="env:NCCL_PROTO", torchtitan="env:NCCL_PROTO"),
    _k("nccl_min_nchannels", "int", (0, 4, 8, 16, 32), 0, "communication",
       "NCCL_MIN_NCHANNELS; 0 = unset (NCCL chooses).",
       megatron="env:NCCL_MIN_NCHANNELS", torchtitan="env:NCCL_MIN_NCHANNELS"),
    # ---------------------------------------------------------------- precision
    _k("bf16", "bool", (False, True), False, "precision",
       "bf16 mixed precision (Megatron --bf16; torchtitan training.mixed_precision_param = bfloat16).",
       megatron="--bf16", torchtitan="training.mixed_precision_param"),
    _k("fp8_recipe", "categorical", ("none", "delayed", "tensorwise", "mxfp8", "blockwise", "rowwise"), "none",
       "precision",
       "FP8 GEMMs and their scaling recipe; none = off. rowwise exists in torchtitan only.",
       megatron="--fp8-recipe", torchtitan="quantize.linear.float8.recipe_name"),
    # ---------------------------------------------------------------- kernels / compile
    _k("attention_backend", "categorical", ("auto", "flash", "fused", "unfused", "local"), "auto", "kernel",
       "Attention kernel choice.",
       megatron="--attention-backend"),
    _k("moe_grouped_gemm", "bool", (False, True), False, "kernel",
       "Run all local experts as one grouped GEMM.",
       megatron="--moe-grouped-gemm"),
    _k("cross_entropy_fusion", "bool", (False, True), False, "kernel",
       "Fused cross-entropy loss kernel.",
       megatron="--cross-entropy-loss-fusion"),
    _k("torch_compile", "bool", (False, True), False, "compile",
       "torch.compile the model.",
       torchtitan="compile.enable"),
    # ---------------------------------------------------------------- runtime
    _k("manual_gc", "bool", (False, True), False, "runtime",
       "Disable automatic Python GC and collect at fixed intervals (avoids rank-skewed GC pauses).",
       megatron="--manual-gc"),
    _k("num_workers", "int", (0, 1, 2, 4, 8, 16), 2, "data",
       "Data-loader worker processes per rank.",
       megatron="--num-workers"),
)

_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
KNOB_NAMES: tuple[str, ...] = tuple(_BY_NAME)
DEFAULTS: dict[str, Any] = {k.name: k.default for k in KNOBS}

# A framework whose default differs from the catalog's (a launch that says nothing gets these).
FRAMEWORK_DEFAULTS: dict[str, dict[str, Any]] = {
    "megatron": {},
    "torchtitan": {"bf16": True, "recompute_granularity": "selective"},
}

# Values a framework cannot express are left out of its domain.
FRAMEWORK_DOMAINS: dict[str, dict[str, tuple[Any, ...]]] = {
    "megatron": {"fp8_recipe": ("none", "delayed", "tensorwise", "mxfp8", "blockwise")},
    "torchtitan": {"fp8_recipe": ("none", "tensorwise", "rowwise", "mxfp8")},
}


# Knobs a framework sets through others, kept in its space so a setting says the same thing in every framework:
# torchtitan's FSDP shards optimizer state exactly when the shard degree is above 1 (what Megatron's
# --use-distributed-optimizer does), so a torchtitan setting carries distributed_optimizer, tied by a rule.
DERIVED: dict[str, tuple[str, ...]] = {"torchtitan": ("distributed_optimizer",)}


def knob(name: str) -> Knob:
    """The catalog knob called ``name``, or a KeyError listing the names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no catalog knob {name!r}; known: {', '.join(KNOB_NAMES)}") from None


def spelling(name: str, framework: str) -> str | None:
    """How ``framework`` writes knob ``name`` (flag, field or ``env:VAR``); None when it cannot."""
    return knob(name).spelling.get(framework)


def knobs_for(framework: str | None) -> list[Knob]:
    """Catalog knobs ``framework`` can express (all of them for None), with its defaults."""
    if framework is None:
        return list(KNOBS)
    over = FRAMEWORK_DEFAULTS.get(framework, {})
    doms = FRAMEWORK_DOMAINS.get(framework, {})
    out = []
    for k in KNOBS:
        # data_parallel is derived (world / (tp*pp*cp)) where a framework has no flag for it
        if framework not in k.spelling and k.name != "data_parallel" and k.name not in DERIVED.get(framework, ()):
            continue
        if k.name in over or k.name in doms:
            k = k.with_domain(doms.get(k.name, k.domain), over.get(k.name))
        out.append(k)
    return out


# --------------------------------------------------------------------------- helpers
def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _g(s: Mapping[str, Any], name: str, defaults: Mapping[str, Any]) -> Any:
    v = s.get(name)
    return defaults[name] if v is None else v


def build_knob_space(
    *,
    num_layers: int | None = None,
    num_attention_heads: int | None = None,
    num_query_groups: int | None = None,
    num_experts: int | None = None,
    seq_length: int | None = None,
    global_batch_size: int | None = None,
    world_size: int | None = None,
    framework: str | None = None,
    expert_tensor_parallel: int | None = None,
    stage_layers_given: bool = False,
    fp16: bool = False,
    device: str | None = None,
    local_spec: bool = False,
    include: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    extra_stage_layers: int = 0,
) -> KnobSpace:
    """The catalog as a KnobSpace for one fixed workload (Megatron names; None = unknown).

    - int domains: parallel degrees are the divisors of ``world_size`` (a broad list when unknown);
      expert parallel also divides ``num_experts``; micro batch sizes divide ``global_batch_size``.
    - a dense model (``num_experts`` None or 0) pins the MoE knobs to their defaults.
    - ``framework`` keeps only the knobs it can express, with its own defaults.
    - ``expert_tensor_parallel``: the expert TP size (Megatron default: equal to TP; torchtitan: 1).
    - ``stage_layers_given``: uneven first/last pipeline stages are set, or the framework splits stages
      unevenly itself (torchtitan), so PP need not divide layers.
    - ``extra_stage_layers``: the embedding and/or the loss count as layers in the pipeline split (Megatron's
      ``--account-for-embedding/loss-in-pipeline-split``): PP divides layers + this.
    - ``fp16``: the workload trains in fp16 (then bf16 must stay off).
    - ``device``: the contract's ``hardware.kind``; fp8 recipes it cannot run leave the domain
      (:mod:`.hardware`; an unknown device or ``cpu`` narrows nothing).
    - ``local_spec``: Megatron runs the local layer spec (``--spec local``), the only one that takes
      ``--attention-backend local``; without it ``local`` leaves the domain.
    - ``include``: a setting whose int values are added to the domains, so that a launch outside the
      usual values is reported by the constraint that explains it, not as "not in its domain".
    - ``defaults``: per-knob default overrides (e.g. a framework version's own defaults).
    Unknown workload numbers switch off the constraints that need them.
    """
    moe = bool(num_experts)
    fw_def = dict(FRAMEWORK_DEFAULTS.get(framework or "", {}))
    fw_def.update(defaults or {})
    par = divisors(world_size) if world_size else list(_PAR_UNKNOWN)
    knobs: list[Knob] = []
    for k in knobs_for(framework):
        dom: list[Any] = list(k.domain)
        if k.name in ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel"):
            dom = list(par)
        elif k.name == "expert_parallel":
            dom = [d for d in par if num_experts and num_experts % d == 0] if moe else [1]
        elif k.name == "micro_batch_size" and global_batch_size:
            dom = [d for d in divisors(global_batch_size) if d <= 16]
        elif k.name == "recompute_num_layers" and num_layers:
            dom = sorted(set(range(1, min(num_layers, 8) + 1)) | {d for d in divisors(num_layers)})
        elif k.name == "virtual_pipeline" and num_layers:
            dom = [v for v in k.domain if num_layers % v == 0]
        elif k.name in ("moe_token_dispatcher", "moe_grouped_gemm") and not moe:
            dom = [k.default]
        elif k.name == "fp8_recipe":
            dom = [r for r in dom if fp8_unsupported(r, device) is None]
        elif k.name == "attention_backend" and not local_spec:
            dom = [b for b in dom if b != "local"]
        if k.name in ("fp8_recipe", "attention_backend") and include and include.get(k.name) in k.domain \
                and include[k.name] not in dom:
            dom.append(include[k.name])  # the launch's own value stays, so the rule that forbids it can say why
        if include and k.kind == "int" and include.get(k.name) is not None and include[k.name] not in dom:
            dom = sorted(set(dom) | {int(include[k.name])})
        default = fw_def.get(k.name, k.default)
        if k.name == "data_parallel" and world_size:
            default = world_size  # tp = pp = cp = 1 by default
        if default not in dom:
            default = dom[0]
        knobs.append(k.with_domain(dom, default))
    dflt = {**DEFAULTS, **fw_def}
    derived = derived_knobs(world_size=world_size, defaults=dflt)
    cons = workload_constraints(
        num_layers=num_layers, num_attention_heads=num_attention_heads, num_query_groups=num_query_groups,
        num_experts=num_experts, seq_length=seq_length, global_batch_size=global_batch_size,
        world_size=world_size, expert_tensor_parallel=expert_tensor_parallel,
        stage_layers_given=stage_layers_given, fp16=fp16, device=device, local_spec=local_spec, defaults=dflt,
        extra_stage_layers=extra_stage_layers,
    )
    return KnobSpace(knobs, cons, derived)


def derived_knobs(*, world_size: int | None, defaults: Mapping[str, Any] | None = None) -> list[Derived]:
    """The catalog's derived knobs: data parallel = world / (tp * pp * cp) (when the world size is known), and
    the values a framework ignores mapped to their no-op value instead of refused: sequence parallelism at
    TP 1 (Megatron's validate_args switches it off; torchtitan applies it only with TP > 1), and
    recompute_method / recompute_num_layers without any recompute (megatron-core reads them only when a
    recompute granularity is set)."""
    d = dict(defaults or DEFAULTS)
    out: list[Derived] = []
    if world_size:
        def data_parallel(s: Mapping[str, Any]) -> int | None:
            inner = _g(s, "tensor_parallel", d) * _g(s, "pipeline_parallel", d) * _g(s, "context_parallel", d)
            return world_size // inner if inner and world_size % inner == 0 else None

        out.append(Derived("data_parallel", data_parallel))

    def sp_off_at_tp1(s: Mapping[str, Any]) -> bool | None:
        return False if _g(s, "tensor_parallel", d) <= 1 else None

    out.append(Derived("sequence_parallel", sp_off_at_tp1, always=False))
    for name in ("recompute_method", "recompute_num_layers"):
        def inert(s: Mapping[str, Any], name: str = name) -> Any:
            return d[name] if _g(s, "recompute_granularity", d) == "none" else None

        out.append(Derived(name, inert, always=False))
    return out


def space_for_fixed(fixed: Mapping[str, Any], *, world_size: int | None = None, framework: str | None = None,
                    include: Mapping[str, Any] | None = None, defaults: Mapping[str, Any] | None = None,
                    expert_tensor_parallel: int | None = None, device: str | None = None,
                    uneven_stages: bool = False) -> KnobSpace:
    """:func:`build_knob_space` from a dict of fixed workload arguments (Megatron names, as an
    adapter's parse returns them, or any spelling ``infrarsi.transformer.ALIASES`` knows)."""
    fixed = canonical(fixed)

    def i(key: str) -> int | None:
        v = fixed.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return build_knob_space(
        num_layers=i("num_layers"), num_attention_heads=i("num_attention_heads"),
        num_query_groups=i("num_query_groups"), num_experts=i("num_experts"), seq_length=i("seq_length"),
        global_batch_size=i("global_batch_size"), world_size=world_size, framework=framework,
        expert_tensor_parallel=expert_tensor_parallel,
        stage_layers_given=uneven_stages or bool(fixed.get("decoder_first_pipeline_num_layers")
                                                 or fixed.get("decoder_last_pipeline_num_layers")
                                                 or fixed.get("pipeline_model_parallel_layout")),
        extra_stage_layers=int(bool(fixed.get("account_for_embedding_in_pipeline_split")))
        + int(bool(fixed.get("account_for_loss_in_pipeline_split"))),
        fp16=bool(fixed.get("fp16")), device=device, local_spec=str(fixed.get("spec", "")).split()[:1] == ["local"],
        include=include, defaults=defaults,
    )


def workload_constraints(
    *,
    num_layers: int | None = None,
    num_attention_heads: int | None = None,
    num_query_groups: int | None = None,
    num_experts: int | None = None,
    seq_length: int | None = None,
    global_batch_size: int | None = None,
    world_size: int | None = None,
    expert_tensor_parallel: int | None = None,
    stage_layers_given: bool = False,
    fp16: bool = False,
    device: str | None = None,
    local_spec: bool = False,
    defaults: Mapping[str, Any] | None = None,
    extra_stage_layers: int = 0,
) -> list[Constraint]:
    """The cross-knob rules for one workload (:mod:`.rules`), each a named :class:`Constraint` whose message
    shows the arithmetic. A knob missing from a setting (or None) reads as its default."""
    return constraints(WorkloadShape(
        num_layers=num_layers, num_attention_heads=num_attention_heads, num_query_groups=num_query_groups,
        num_experts=num_experts, seq_length=seq_length, global_batch_size=global_batch_size, world_size=world_size,
        expert_tensor_parallel=expert_tensor_parallel, stage_layers_given=stage_layers_given, fp16=fp16,
        device=device, local_spec=local_spec, defaults=dict(defaults or DEFAULTS),
        extra_stage_layers=extra_stage_layers))


def check_setting(space: KnobSpace, setting: Mapping[str, Any]) -> list[Violation]:
    """Like ``space.validate`` but a knob whose value is None (unknown, e.g. data_parallel when the
    world size is not stated) is neither a domain error nor filled with a default: the rules that
    need it are skipped. Knobs the space does not hold are ignored."""
    out: list[Violation] = []
    for k in space.knobs:
        v = setting.get(k.name)
        if v is not None and (v not in k.domain or (k.kind != "bool" and isinstance(v, bool))):
            out.append(Violation("domain", f"{k.name}={v!r} is not in its domain {list(k.domain)}"))
    if out:
        return out
    s = {k.name: setting.get(k.name, k.default) for k in space.knobs}
    for c in space.constraints:
        try:
            msg = c(s)
        except Exception as e:  # a rule that crashes is reported, not raised
            msg = f"constraint {c.name} failed to evaluate: {type(e).__name__}: {e}"
        if msg:
            out.append(Violation(c.name, msg))
    return out


def complete_setting(partial: Mapping[str, Any], names: Iterable[str] | None = None,
                     framework: str | None = None) -> dict[str, Any]:
    """``partial`` with every catalog knob (or every name in ``names``) filled by the framework default."""
    over = FRAMEWORK_DEFAULTS.get(framework or "", {})
    out = {}
    for n in names if names is not None else KNOB_NAMES:
        out[n] = partial[n] if n in partial else over.get(n, DEFAULTS[n])
    return out
