"""Adapter for the embedded ``minigpt`` workload (infrarsi/workloads/minigpt.py).

It speaks Megatron-LM's dialect: the same flag names for shared knobs (its :data:`SPELLING` is read from Megatron's)
and the same log lines, parsed by ``megatron_log``. Shared knobs are the catalog's (micro_batch_size,
recompute_granularity, ...), with their kinds and defaults read from ``knobs.catalog`` and domains narrowed to what
this workload supports; the ones only this workload has are intra_op_threads, adam_impl and kernel_<op>.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..contract.model import Contract, ContractError
from ..trial import LaunchSpec
from ..trial import TrialStatus
from ..knobs import Constraint, Knob, KnobSpace, catalog
from ..kernels.ops import OPS as KERNEL_OPS  # the model below takes every op (its hooks: workloads/minigpt.py)
from ..knobs.spelling import Spelling
from ..transformer import CAUSAL_MATMULS
from .base import Adapter, ParsedRun
from .spec import FrameworkSpec
from .megatron.log import classify_failure, parse_log, to_metrics
from .megatron.spelling import SPELLING as _MEGATRON_FLAGS


# Fixed workload arguments the workload accepts (Megatron names, underscores).
FIXED_FLAGS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "vocab_size",
               "global_batch_size", "train_iters", "lr", "weight_decay", "clip_grad", "seed")


# The catalog knobs this workload has: the domain it supports here (None = the catalog's) and what the knob
# really does in minigpt (None = the catalog's doc). Kind, group and default come from the catalog; the flag is
# SPELLING's below.
_SHARED: dict[str, tuple[tuple[Any, ...] | None, str | None]] = {
    "micro_batch_size": ((1, 2, 4, 8, 16), "samples per forward/backward; the rest of the global batch is gradient "
                         "accumulation"),
    "data_parallel": ((1, 2), "processes (gloo DDP on the CPU)"),
    "recompute_granularity": (None, "selective: recompute the attention core; full: recompute whole layers"),
    "recompute_method": (None, None),
    "recompute_num_layers": ((1, 2, 4), None),
    "bf16": (None, None),
    "attention_backend": (("auto", "unfused"), "auto: SDPA; unfused: explicit softmax(QK^T)V, storing S x S "
                          "probabilities"),
    "overlap_grad_reduce": (None, None),
    "torch_compile": (None, None),
}
# minigpt's flags: for a knob Megatron has, Megatron's flag; for one Megatron lacks (torch_compile), the knob's
# name as a flag; then the knobs only this workload has. data_parallel is no flag: it is the number of processes
# (torchrun --nproc-per-node).
SPELLING = Spelling(flags={
    **{n: _MEGATRON_FLAGS.get(n) or f"--{n.replace('_', '-')}" for n in _SHARED if n != "data_parallel"},
    "intra_op_threads": "--intra-op-threads",
    "adam_impl": "--adam-impl",
})


def _from_catalog(name: str, domain: tuple[Any, ...] | None, doc: str | None) -> Knob:
    k = catalog.knob(name)
    return Knob(**{**k.model_dump(), "domain": domain or k.domain, "doc": doc or k.doc})


def knobs() -> list[Knob]:
    """The workload's knobs: catalog knobs with minigpt's domains, and the three only this workload has."""
    return [
        *(_from_catalog(name, dom, doc) for name, (dom, doc) in _SHARED.items()),
        Knob(name="intra_op_threads", kind="int", domain=(1, 2), default=2, group="runtime"),
        Knob(name="adam_impl", kind="categorical", domain=("foreach", "fused"), default="foreach", group="kernel"),
    ]


_KNOBS = {k.name: k for k in knobs()}


def _flag(name: str, value: Any) -> list[str]:
    """argv for one knob value: a bool flag when true, else ``--flag value``."""
    k = _KNOBS[name]
    flag = SPELLING.flags[name]
    if k.kind == "bool":
        return [flag] if value else []
    return [flag, str(value)]


def _workload_default(flag: str) -> Any:
    """The workload's own default for a fixed argument (what a contract that does not set it gets)."""
    from ..workloads.minigpt import build_parser

    return build_parser().get_default(flag)


def _fixed(contract: Contract, name: str) -> Any:
    """A fixed workload argument: the contract's, else the workload's default."""
    args = contract.workload.args
    return args[name] if name in args else _workload_default(name)


def constraints(contract: Contract) -> list[Constraint]:
    gbs = int(_fixed(contract, "global_batch_size"))
    d = {name: k.default for name, k in _KNOBS.items()}  # a knob a setting leaves out is at its default

    def batch_divides(s: Mapping[str, Any]) -> str | None:
        mbs, dp = s.get("micro_batch_size", d["micro_batch_size"]), s.get("data_parallel", d["data_parallel"])
        if gbs % (mbs * dp):
            return f"global batch {gbs} is not divisible by micro batch {mbs} x data parallel {dp} = {mbs * dp}"
        return None

    def recompute_options(s: Mapping[str, Any]) -> str | None:
        if s.get("recompute_granularity", d["recompute_granularity"]) != "full" and (
                s.get("recompute_method", d["recompute_method"]) != d["recompute_method"]
                or s.get("recompute_num_layers", d["recompute_num_layers"]) != d["recompute_num_layers"]):
            return "recompute_method and recompute_num_layers apply only with recompute_granularity=full"
        return None

    def overlap_needs_dp(s: Mapping[str, Any]) -> str | None:
        if s.get("overlap_grad_reduce", d["overlap_grad_reduce"]) and s.get("data_parallel", d["data_parallel"]) < 2:
            return "overlap_grad_reduce needs data_parallel > 1 (nothing to reduce)"
        return None

    def threads_fit(s: Mapping[str, Any]) -> str | None:
        dp, threads = s.get("data_parallel", d["data_parallel"]), s.get("intra_op_threads", d["intra_op_threads"])
        if dp * threads > contract.hardware.devices * 2:
            return f"data_parallel {dp} x intra_op_threads {threads} = {dp * threads} exceeds the cores"
        return None

    return [Constraint("batch_divides", batch_divides), Constraint("recompute_options", recompute_options),
            Constraint("overlap_needs_dp", overlap_needs_dp), Constraint("threads_fit", threads_fit)]


class MiniGPTAdapter(Adapter):
    name = "minigpt"
    runs_own_program = True
    fixed_flags = FIXED_FLAGS
    estimate_module = "estimate.minigpt"

    @classmethod
    def own_knobs(cls) -> list[Knob]:
        return list(knobs())

    def knob_space(self, contract: Contract) -> KnobSpace:
        all_knobs = {k.name: k for k in knobs()}
        for op in KERNEL_OPS:  # a kernel knob exists when the contract lists candidates for it
            name = f"kernel_{op}"
            if name in contract.scope.knobs:
                dom = tuple(dict.fromkeys(["reference", *contract.scope.knobs[name]]))
                all_knobs[name] = Knob(name=name, kind="categorical", domain=dom, default="reference", group="kernel")
        unknown = sorted(set(contract.scope.knobs) - set(all_knobs))
        fixed = [k for k in unknown if k in FIXED_FLAGS]
        if fixed:
            k = fixed[0]
            value = _fixed(contract, k)
            raise ContractError(f"scope.knobs names {k}, a fixed workload argument of minigpt locked to {value!r} "
                                f"(set it under [workload.args]); it defines the task and cannot be a knob")
        if unknown:
            raise ContractError(f"scope.knobs names {unknown}, which minigpt does not have; known: {sorted(all_knobs)}")
        chosen = []
        for name, k in all_knobs.items():
            if contract.scope.knobs and name not in contract.scope.knobs:
                base = contract.baseline.get(name, k.default)
                chosen.append(k.with_domain([base], default=base))  # out of scope: pinned at the baseline
            elif name in contract.scope.knobs:
                dom = list(contract.scope.knobs[name])
                try:
                    dom = [k.coerce(v) for v in dom] if not name.startswith("kernel_") else ["reference", *[v for v in dom if v != "reference"]]
                except ValueError as e:
                    raise ContractError(f"scope.knobs.{name}: {e}") from None
                base = contract.baseline.get(name, k.default)
                chosen.append(k.with_domain(dom, default=base if base in dom else None))
            else:
                chosen.append(k)
        return KnobSpace(chosen, constraints(contract))

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        args = dict(contract.workload.args)
        t = contract.invariants.timing
        need = max(t.warmup_steps + t.measured_steps, contract.invariants.loss.compare_steps)
        if int(args.get("train_iters", need)) < need:
            raise ContractError(f"workload.args.train_iters = {args['train_iters']} < warm-up {t.warmup_steps} + measured "
                                f"{t.measured_steps} (or loss compare_steps); raise train_iters to at least {need}")
        args.setdefault("train_iters", need)
        argv: list[str] = []
        for k in FIXED_FLAGS:
            if k in args:
                argv += [f"--{k.replace('_', '-')}", str(args[k])]
        s = {name: setting.get(name, k.default) for name, k in _KNOBS.items()}  # unset: the knob's default
        argv += _flag("micro_batch_size", s["micro_batch_size"])
        if s["recompute_granularity"] != "none":
            argv += _flag("recompute_granularity", s["recompute_granularity"])
            if s["recompute_granularity"] == "full":
                argv += _flag("recompute_method", s["recompute_method"])
                argv += _flag("recompute_num_layers", s["recompute_num_layers"])
        for name in ("bf16", "attention_backend", "overlap_grad_reduce", "intra_op_threads", "torch_compile", "adam_impl"):
            argv += _flag(name, s[name])
        kern = {}
        for op in KERNEL_OPS:
            v = setting.get(f"kernel_{op}", "reference")
            if v != "reference":
                kern[op] = v
        for op, path in sorted(kern.items()):
            argv += ["--kernel", f"{op}={path}"]
        argv += ["--log-interval", "1", "--timing-log-level", "1"]
        if contract.hardware.peak_flops:
            argv.append("--log-throughput")
        dp = int(s["data_parallel"])
        module = ["-m", "infrarsi.workloads.minigpt"]
        if dp > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(dp), *module]
        else:
            cmd = [sys.executable, *module]
        cap = contract.hardware.memory_capacity_bytes
        env = {**contract.workload.env, "INFRARSI_MEMORY_CAP_BYTES": str(cap), "OMP_NUM_THREADS": str(s["intra_op_threads"]),
               "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        return LaunchSpec(argv=cmd + argv, env=env, processes=dp, devices=dp, time_limit_s=t.timeout_s, memory_cap_bytes=cap)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        log = parse_log(stdout)
        tokens = int(_fixed(contract, "global_batch_size")) * int(_fixed(contract, "seq_length"))
        t = contract.invariants.timing
        metrics = to_metrics(log, warmup_steps=t.warmup_steps, measured_steps=t.measured_steps, tokens_per_step=tokens,
                             peak_flops=contract.hardware.peak_flops)
        failure = classify_failure(stderr + "\n" + stdout)
        if returncode == 0 and failure is None and metrics.step_time_s is not None:
            return ParsedRun(status=TrialStatus.OK, metrics=metrics)
        if failure is not None:
            status, reason, evidence = failure
            return ParsedRun(status=status, metrics=metrics.model_copy(update={"step_time_s": None}), evidence=evidence,
                             reason=reason)
        tail = (stderr or stdout).strip().splitlines()[-5:]
        if returncode == 0:
            return ParsedRun(status=TrialStatus.CRASH, metrics=metrics.model_copy(update={"step_time_s": None}),
                             evidence=tail, reason="exited 0 without the measured iteration lines")
        return ParsedRun(status=TrialStatus.CRASH, metrics=metrics.model_copy(update={"step_time_s": None}), evidence=tail,
                         reason=f"exit code {returncode}")


def _drafts(program: str, flags: Mapping[str, Any]) -> bool:
    """The embedded workload's own program (``-m infrarsi.workloads.minigpt``)."""
    return "infrarsi.workloads.minigpt" in program


SPEC = FrameworkSpec(name="minigpt", adapter="minigpt:MiniGPTAdapter", drafts=_drafts, flops_convention=CAUSAL_MATMULS,
                     spelling=SPELLING)
