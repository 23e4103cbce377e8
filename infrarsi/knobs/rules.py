"""The catalog's cross-knob rules, one registered :class:`Rule` each, over one workload's :class:`WorkloadShape`.

A rule reads a setting (a knob missing from it, or None, reads as its default) and the shape of the workload it
runs (layers, heads, world size...; an unknown number switches off the rules that need it), and returns None or
one message that shows the arithmetic and names the fix. :func:`constraints` binds every rule to one shape: the
:class:`~infrarsi.knobs.space.Constraint` list of a knob space (``catalog.workload_constraints``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .hardware import fp8_unsupported
from .space import Constraint
from .spelling import Spelling

Reader = Callable[[Mapping[str, Any], str], Any]
"""``v(setting, knob)``: the knob's value in the setting, its default when missing or None."""


@dataclass(frozen=True, kw_only=True)
class WorkloadShape:
    """What the rules know of the workload (``infrarsi.transformer``'s names; None: not known) and of the framework
    that runs it (its name as prose says it, its spelling of the knobs): a message names the framework's own flag
    where it has one."""

    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_query_groups: int | None = None
    num_experts: int | None = None
    seq_length: int | None = None
    global_batch_size: int | None = None
    world_size: int | None = None
    expert_tensor_parallel: int | None = None
    stage_layers_given: bool = False
    """The launch gives uneven first/last stages (or a layout): pipeline parallelism need not divide the layers."""
    fp16: bool = False
    device: str | None = None
    local_spec: bool = False
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Each knob's default (the catalog's, a framework's own over it)."""
    extra_stage_layers: int = 0
    """The embedding and/or the loss counted as layers in the pipeline split."""
    framework: str = ""
    """The framework's name as prose says it (its spec's title); "": the workload names none."""
    spelling: Spelling | None = None
    """The framework's table of flags (None: the workload names no framework)."""

    def value(self, s: Mapping[str, Any], name: str) -> Any:
        got = s.get(name)
        return self.defaults[name] if got is None else got

    def flag(self, name: str) -> str:
        """`` (FLAG)``: how the framework writes knob ``name``, for a message; "" where it has no flag for it."""
        got = self.spelling.get(name) if self.spelling is not None else None
        return f" ({got})" if got else ""

    @property
    def by(self) -> str:
        """Who refuses a value, for a message: the framework by name, else "the framework"."""
        return self.framework or "the framework"


@dataclass(frozen=True)
class Rule:
    name: str
    check: Callable[[WorkloadShape, Mapping[str, Any], Reader], str | None]

    def bound(self, shape: WorkloadShape) -> Constraint:
        """This rule as one workload's constraint."""
        return Constraint(self.name, lambda s: self.check(shape, s, shape.value))


RULES: list[Rule] = []
"""Every rule, in the order a violation list reports them."""


def rule(fn: Callable[[WorkloadShape, Mapping[str, Any], Reader], str | None]) -> Callable:
    """Register ``fn`` as a rule named after it."""
    RULES.append(Rule(fn.__name__, fn))
    return fn


def constraints(shape: WorkloadShape) -> list[Constraint]:
    """Every rule bound to ``shape``."""
    return [r.bound(shape) for r in RULES]


# --------------------------------------------------------------------------- the rules
@rule
def world_size_product(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if not w.world_size or s.get("data_parallel") is None:
        return None
    tp, pp, cp, dp = v(s, "tensor_parallel"), v(s, "pipeline_parallel"), v(s, "context_parallel"), s["data_parallel"]
    prod = tp * pp * cp * dp
    if prod != w.world_size:
        return (f"tp({tp}) * pp({pp}) * cp({cp}) * dp({dp}) = {prod} != world_size({w.world_size}); "
                f"choose data_parallel = {w.world_size} / (tp * pp * cp)")
    return None


@rule
def expert_grid(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    ep = v(s, "expert_parallel")
    if ep <= 1:
        return None
    tp, cp = v(s, "tensor_parallel"), v(s, "context_parallel")
    dp = s.get("data_parallel")
    if dp is None:
        if not w.world_size:
            return None
        dp = w.world_size // max(1, tp * v(s, "pipeline_parallel") * cp)
    etp = w.expert_tensor_parallel if w.expert_tensor_parallel is not None else tp
    inner = tp * cp * dp
    if inner % (ep * etp):
        return (f"expert grid: ep({ep}) * etp({etp}) = {ep * etp} does not divide tp*cp*dp = "
                f"{tp}*{cp}*{dp} = {inner}; lower expert_parallel or raise data_parallel")
    return None


def _tp_divides(tp: int, n: int | None, what: str) -> str | None:
    if n and n % tp:
        return f"tensor parallel {tp} does not divide {n} {what} ({n} % {tp} = {n % tp})"
    return None


@rule
def tp_divides_heads(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    return _tp_divides(v(s, "tensor_parallel"), w.num_attention_heads, "attention heads")


@rule
def tp_divides_query_groups(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    return _tp_divides(v(s, "tensor_parallel"), w.num_query_groups, "query groups")


@rule
def pp_divides_layers(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    pp = v(s, "pipeline_parallel")
    if w.num_layers and not w.stage_layers_given and (w.num_layers + w.extra_stage_layers) % pp:
        n = w.num_layers + w.extra_stage_layers
        extra = f" + {w.extra_stage_layers} (embedding/loss)" if w.extra_stage_layers else ""
        counted = f"{w.num_layers} layers{extra}"
        return (f"pipeline parallel {pp} does not divide {counted} ({n} % {pp} = {n % pp}); give "
                f"--decoder-first/last-pipeline-num-layers for uneven stages")
    if w.num_layers and pp > w.num_layers:
        return f"pipeline parallel {pp} is more than the {w.num_layers} layers"
    return None


@rule
def ep_divides_experts(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    ep = v(s, "expert_parallel")
    if ep > 1 and not w.num_experts:
        return f"expert parallel {ep} needs a MoE model (num_experts is not set)"
    e = w.num_experts
    if e and e % ep:
        return f"expert parallel {ep} does not divide {e} experts ({e} % {ep} = {e % ep})"
    return None


@rule
def cp_divides_seq(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    cp = v(s, "context_parallel")
    if cp > 1 and w.seq_length and w.seq_length % (2 * cp):
        return (f"context parallel {cp} needs seq_length divisible by 2*cp = {2 * cp} "
                f"({w.seq_length} % {2 * cp} = {w.seq_length % (2 * cp)})")
    return None


@rule
def global_batch_divisible(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    mbs, dp = v(s, "micro_batch_size"), s.get("data_parallel")
    if not w.global_batch_size or dp is None:
        return None
    x = mbs * dp
    if w.global_batch_size % x:
        return (f"global batch {w.global_batch_size} is not divisible by micro batch {mbs} * data parallel {dp} = {x} "
                f"({w.global_batch_size} % {x} = {w.global_batch_size % x})")
    return None


@rule
def sequence_parallel_needs_tp(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if v(s, "sequence_parallel") and v(s, "tensor_parallel") <= 1:
        return "sequence_parallel needs tensor_parallel > 1 (tp = 1); turn sequence_parallel off"
    return None


@rule
def virtual_pipeline_fits(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    vp, pp = v(s, "virtual_pipeline"), v(s, "pipeline_parallel")
    if vp <= 1:
        return None
    if pp <= 1:
        return f"virtual_pipeline {vp} needs pipeline_parallel > 1 (pp = {pp})"
    if w.num_layers and not w.stage_layers_given and w.num_layers % (pp * vp):
        return (f"virtual pipeline: {w.num_layers} layers are not divisible by pp * vp = {pp} * {vp} = {pp * vp} "
                f"({w.num_layers} % {pp * vp} = {w.num_layers % (pp * vp)})")
    return None


@rule
def recompute_layers_fit(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    # uniform walks the chunk's layers recompute_num_layers at a time and indexes past the last one
    # (megatron-core TransformerBlock._checkpointed_forward); block recomputes the first n, so a larger n
    # recomputes them all and is accepted
    if v(s, "recompute_granularity") != "full" or not w.num_layers or v(s, "recompute_method") == "block":
        return None
    n, pp, vp = v(s, "recompute_num_layers"), v(s, "pipeline_parallel"), v(s, "virtual_pipeline")
    per = w.num_layers // max(1, pp * vp)
    if n > per:
        return (f"recompute_num_layers {n} is more than the {per} layers per (virtual) pipeline stage "
                f"({w.num_layers} layers / (pp {pp} * vp {vp}))")
    return None


@rule
def recompute_options_need_full(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    # without any recompute they are inert (megatron-core reads them only with a granularity; the space maps
    # them to their defaults); with selective recompute Megatron refuses both: validate_args asserts "recompute
    # method is not yet supported for selective recomputing granularity", TransformerConfig "recompute_num_layers
    # must be None"
    if v(s, "recompute_granularity") != "selective":
        return None
    moved = [n for n in ("recompute_method", "recompute_num_layers") if n in s and s[n] != w.defaults[n]]
    if moved:
        return (f"{' and '.join(moved)} with selective recompute is refused by {w.by}; they act with "
                f"recompute_granularity full; keep {', '.join(f'{n} = {w.defaults[n]!r}' for n in moved)}")
    return None


@rule
def overlap_param_gather_needs(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if not v(s, "overlap_param_gather"):
        return None
    if not v(s, "distributed_optimizer"):
        return f"overlap_param_gather needs distributed_optimizer{w.flag('distributed_optimizer')}"
    if not v(s, "overlap_grad_reduce"):
        return f"overlap_param_gather needs overlap_grad_reduce{w.flag('overlap_grad_reduce')}"
    return None


@rule
def tp_comm_overlap_needs(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if v(s, "tp_comm_overlap") and (v(s, "tensor_parallel") <= 1 or not v(s, "sequence_parallel")):
        return (f"tp_comm_overlap needs tensor_parallel > 1 and sequence_parallel "
                f"(tp = {v(s, 'tensor_parallel')}, sequence_parallel = {v(s, 'sequence_parallel')})")
    return None


# fp8 does not need bf16: Megatron and torchtitan both accept fp8 GEMMs with --fp16 or fp32 params.


@rule
def fp8_supported_by_device(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    return fp8_unsupported(v(s, "fp8_recipe"), w.device)


@rule
def attention_backend_local_needs_local_spec(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if v(s, "attention_backend") == "local" and not w.local_spec:
        flag = w.spelling.get("attention_backend") if w.spelling is not None else None
        said = f' ({w.by}: "{flag} local requires --spec local")' if flag else ""  # its own error, quoted
        return (f"attention_backend 'local' needs the local layer spec{said}; keep attention_backend auto, flash, "
                "fused or unfused")
    return None


@rule
def bf16_not_with_fp16(w: WorkloadShape, s: Mapping[str, Any], v: Reader) -> str | None:
    if w.fp16 and v(s, "bf16"):
        return "bf16 cannot be combined with the workload's fp16 (--fp16); keep bf16 = false"
    return None


# async_tp's rules depend on torchtitan's version and compile components: torchtitan.knob_space_for holds them.
