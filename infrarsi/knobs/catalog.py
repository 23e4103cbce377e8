"""The catalog of standard launch knobs and the rules between them.

Every knob has one name the tuner uses everywhere (``tensor_parallel``, ``recompute_granularity``, ...), a
meaning, a domain, a default and a group. How a framework writes a knob (a flag, a config field) is that framework's
:class:`~infrarsi.knobs.spelling.Spelling`, held in its own folder and handed in by its caller; a knob that is an
environment variable (``NCCL_ALGO``) is the catalog's own (``Knob.env``). A knob a framework cannot express has no
spelling in its table and is left out of that framework's space.

:func:`build_knob_space` turns the catalog into a :class:`KnobSpace` for one fixed workload: int
domains become the values that can work for that model and world size, MoE knobs collapse to their
default on a dense model, and the constraints check the arithmetic with the workload's numbers::

    space = build_knob_space(num_layers=32, num_attention_heads=32, num_query_groups=8,
                             seq_length=8192, global_batch_size=128, world_size=8, spelling=SPELLING)
    space.validate(space.default().replace(tensor_parallel=3))
    # [Violation('tp_divides_heads', 'tensor parallel 3 does not divide 32 attention heads (32 % 3 = 2)'), ...]

Constraint messages show the numbers and name the fix; a constraint reads knobs the space does not
hold at their catalog default, so one rule set serves every framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..transformer import canonical
from .hardware import fp8_unsupported
from .knob import Knob
from .rules import WorkloadShape, constraints
from .space import Constraint, Derived, KnobSpace, Violation
from .spelling import Spelling

# Values an int parallel knob may take when the world size is not known.
_PAR_UNKNOWN = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 128)


def _k(name: str, kind: str, domain: tuple[Any, ...], default: Any, group: str, doc: str, env: str = "") -> Knob:
    return Knob(name=name, kind=kind, domain=domain, default=default, group=group, doc=doc, env=env)


# Broad domains; build_knob_space narrows the int ones to the workload.
KNOBS: tuple[Knob, ...] = (
    # ---------------------------------------------------------------- parallelism
    _k("tensor_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Tensor (intra-layer) model parallel degree."),
    _k("pipeline_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Pipeline (inter-layer) parallel degree."),
    _k("virtual_pipeline", "int", (1, 2, 3, 4, 5, 6, 8), 1, "parallelism",
       "Virtual pipeline stages per pipeline rank (interleaved 1F1B); 1 = no interleaving."),
    _k("context_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Context (sequence-dimension) parallel degree for attention."),
    _k("expert_parallel", "int", _PAR_UNKNOWN, 1, "parallelism",
       "Expert parallel degree (MoE): experts are split over this many ranks."),
    _k("data_parallel", "int", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096), 1, "parallelism",
       "Data parallel degree; with a fixed world size it is world / (tp * pp * cp); with replicas (HSDP): "
       "replicate * shard degree."),
    _k("micro_batch_size", "int", (1, 2, 3, 4, 6, 8, 12, 16), 1, "memory",
       "Samples per forward/backward pass per data-parallel rank; the global batch stays fixed, so a "
       "smaller micro batch means more gradient-accumulation steps."),
    _k("sequence_parallel", "bool", (False, True), False, "parallelism",
       "Shard LayerNorm/dropout activations along the sequence over the TP group (needs TP > 1)."),
    # ---------------------------------------------------------------- memory
    _k("recompute_granularity", "categorical", ("none", "selective", "full"), "none", "memory",
       "Activation recomputation: none, selective (attention core), or full layers."),
    _k("recompute_method", "categorical", ("uniform", "block"), "uniform", "memory",
       "With full recompute: uniform (every N layers a unit) or block (first N layers per stage)."),
    _k("recompute_num_layers", "int", (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32), 1, "memory",
       "With full recompute: layers per recompute unit (uniform) or layers recomputed per stage (block)."),
    _k("distributed_optimizer", "bool", (False, True), False, "memory",
       "Shard optimizer state over data-parallel ranks (ZeRO-1)."),
    _k("cpu_offload", "bool", (False, True), False, "memory",
       "Offload parameters, gradients and optimizer state to host memory (FSDP CPU offload)."),
    _k("fsdp_reshard_after_forward", "categorical", ("default", "always", "never"), "default", "memory",
       "FSDP: free gathered parameters after forward (always), keep them (never), or the policy default."),
    # ---------------------------------------------------------------- communication
    _k("overlap_grad_reduce", "bool", (False, True), False, "communication",
       "Overlap the data-parallel gradient reduce-scatter/all-reduce with backward."),
    _k("overlap_param_gather", "bool", (False, True), False, "communication",
       "Overlap the distributed optimizer's parameter all-gather with forward (needs the distributed "
       "optimizer and overlap_grad_reduce)."),
    _k("tp_comm_overlap", "bool", (False, True), False, "communication",
       "Overlap tensor-parallel communication with GEMMs (Transformer Engine userbuffers; needs "
       "sequence parallel)."),
    _k("async_tp", "bool", (False, True), False, "communication",
       "Asynchronous tensor parallel (micro-pipelined collective matmuls; needs torch.compile)."),
    _k("moe_token_dispatcher", "categorical", ("allgather", "alltoall", "flex"), "allgather", "communication",
       "How MoE tokens reach their experts."),
    _k("nccl_algo", "categorical", ("default", "Ring", "Tree", "NVLS"), "default", "communication",
       "NCCL_ALGO; default = unset (NCCL chooses).", env="NCCL_ALGO"),
    _k("nccl_proto", "categorical", ("default", "Simple", "LL", "LL128"), "default", "communication",
       "NCCL_PROTO; default = unset (NCCL chooses).", env="NCCL_PROTO"),
    _k("nccl_min_nchannels", "int", (0, 4, 8, 16, 32), 0, "communication",
       "NCCL_MIN_NCHANNELS; 0 = unset (NCCL chooses).", env="NCCL_MIN_NCHANNELS"),
    # ---------------------------------------------------------------- precision
    _k("bf16", "bool", (False, True), False, "precision",
       "bf16 mixed precision (bf16 parameters in compute)."),
    _k("fp8_recipe", "categorical", ("none", "delayed", "tensorwise", "mxfp8", "blockwise", "rowwise"), "none",
       "precision",
       "FP8 GEMMs and their scaling recipe; none = off. A framework offers the recipes it has (rowwise in one "
       "framework only)."),
    # ---------------------------------------------------------------- kernels / compile
    _k("attention_backend", "categorical", ("auto", "flash", "fused", "unfused", "local"), "auto", "kernel",
       "Attention kernel choice."),
    _k("moe_grouped_gemm", "bool", (False, True), False, "kernel",
       "Run all local experts as one grouped GEMM."),
    _k("cross_entropy_fusion", "bool", (False, True), False, "kernel",
       "Fused cross-entropy loss kernel."),
    _k("torch_compile", "bool", (False, True), False, "compile",
       "torch.compile the model."),
    # ---------------------------------------------------------------- runtime
    _k("manual_gc", "bool", (False, True), False, "runtime",
       "Disable automatic Python GC and collect at fixed intervals (avoids rank-skewed GC pauses)."),
    _k("num_workers", "int", (0, 1, 2, 4, 8, 16), 2, "data",
       "Data-loader worker processes per rank."),
)

_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
KNOB_NAMES: tuple[str, ...] = tuple(_BY_NAME)
DEFAULTS: dict[str, Any] = {k.name: k.default for k in KNOBS}


def knob(name: str) -> Knob:
    """The catalog knob called ``name``, or a KeyError listing the names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no catalog knob {name!r}; known: {', '.join(KNOB_NAMES)}") from None


def knobs_for(spelling: Spelling | None) -> list[Knob]:
    """Catalog knobs a framework can express (all of them for None), with its defaults and domains: ``spelling`` is
    the framework's table (its spec's, handed in by the caller)."""
    if spelling is None:
        return list(KNOBS)
    over, doms = spelling.defaults, spelling.domains
    out = []
    for k in KNOBS:
        if not spelling.expresses(k):
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
    spelling: Spelling | None = None,
    framework: str = "",
    expert_tensor_parallel: int | None = None,
    stage_layers_given: bool = False,
    fp16: bool = False,
    device: str | None = None,
    local_spec: bool = False,
    include: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    extra_stage_layers: int = 0,
) -> KnobSpace:
    """The catalog as a KnobSpace for one fixed workload (the workload's numbers by the names of
    ``infrarsi.transformer``; None = unknown).

    - int domains: parallel degrees are the divisors of ``world_size`` (a broad list when unknown);
      expert parallel also divides ``num_experts``; micro batch sizes divide ``global_batch_size``.
    - a dense model (``num_experts`` None or 0) pins the MoE knobs to their defaults.
    - ``spelling``: a framework's table (:class:`~infrarsi.knobs.spelling.Spelling`): only the knobs it can
      express, with its own defaults and domains (None: every catalog knob); ``framework``: its name as prose
      says it (the spec's title), for the rules' messages.
    - ``expert_tensor_parallel``: the expert TP size (None: equal to TP).
    - ``stage_layers_given``: uneven first/last pipeline stages are set, or the framework splits stages
      unevenly itself, so PP need not divide layers.
    - ``extra_stage_layers``: the embedding and/or the loss count as layers in the pipeline split: PP divides
      layers + this.
    - ``fp16``: the workload trains in fp16 (then bf16 must stay off).
    - ``device``: the contract's ``hardware.kind``; fp8 recipes it cannot run leave the domain
      (:mod:`.hardware`; an unknown device or ``cpu`` narrows nothing).
    - ``local_spec``: the workload runs the local layer spec, the only one that takes attention backend
      ``local``; without it ``local`` leaves the domain.
    - ``include``: a setting whose int values are added to the domains, so that a launch outside the
      usual values is reported by the constraint that explains it, not as "not in its domain".
    - ``defaults``: per-knob default overrides (e.g. a framework version's own defaults).
    Unknown workload numbers switch off the constraints that need them.
    """
    moe = bool(num_experts)
    fw_def = dict(spelling.defaults if spelling is not None else {})
    fw_def.update(defaults or {})
    par = divisors(world_size) if world_size else list(_PAR_UNKNOWN)
    knobs: list[Knob] = []
    for k in knobs_for(spelling):
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
        extra_stage_layers=extra_stage_layers, framework=framework, spelling=spelling,
    )
    return KnobSpace(knobs, cons, derived)


def derived_knobs(*, world_size: int | None, defaults: Mapping[str, Any] | None = None) -> list[Derived]:
    """The catalog's derived knobs: data parallel = world / (tp * pp * cp) (when the world size is known), and
    the values a framework ignores mapped to their no-op value instead of refused: sequence parallelism at
    TP 1 (the frameworks switch it off, or apply it only with TP > 1), and recompute_method /
    recompute_num_layers without any recompute (read only when a recompute granularity is set)."""
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


def space_for_fixed(fixed: Mapping[str, Any], *, world_size: int | None = None, spelling: Spelling | None = None,
                    framework: str = "", include: Mapping[str, Any] | None = None, defaults: Mapping[str, Any] | None = None,
                    expert_tensor_parallel: int | None = None, device: str | None = None,
                    uneven_stages: bool = False) -> KnobSpace:
    """:func:`build_knob_space` from a dict of fixed workload arguments (``infrarsi.transformer``'s names, as an
    adapter's parse returns them, or any spelling ``infrarsi.transformer.ALIASES`` knows)."""
    fixed = canonical(fixed)

    def i(key: str) -> int | None:
        v = fixed.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return build_knob_space(
        num_layers=i("num_layers"), num_attention_heads=i("num_attention_heads"),
        num_query_groups=i("num_query_groups"), num_experts=i("num_experts"), seq_length=i("seq_length"),
        global_batch_size=i("global_batch_size"), world_size=world_size, spelling=spelling, framework=framework,
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
    framework: str = "",
    spelling: Spelling | None = None,
) -> list[Constraint]:
    """The cross-knob rules for one workload (:mod:`.rules`), each a named :class:`Constraint` whose message
    shows the arithmetic. A knob missing from a setting (or None) reads as its default."""
    return constraints(WorkloadShape(
        num_layers=num_layers, num_attention_heads=num_attention_heads, num_query_groups=num_query_groups,
        num_experts=num_experts, seq_length=seq_length, global_batch_size=global_batch_size, world_size=world_size,
        expert_tensor_parallel=expert_tensor_parallel, stage_layers_given=stage_layers_given, fp16=fp16,
        device=device, local_spec=local_spec, defaults=dict(defaults or DEFAULTS),
        extra_stage_layers=extra_stage_layers, framework=framework, spelling=spelling))


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
