"""Adapter for the embedded ``minigpt`` workload (infrarsi/workloads/minigpt.py).

It speaks Megatron-LM's dialect: the same flag names for shared knobs and the same log lines, parsed by
``megatron_log``. Knob names are the catalog's (micro_batch_size, recompute_granularity, ...); the ones
only this workload has are intra_op_threads, torch_compile, adam_impl and kernel_<op>.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..contract.model import Contract, ContractError
from ..execute.spec import LaunchSpec
from ..execute.trial import TrialStatus
from ..knobs import Constraint, Knob, KnobSpace
from .base import Adapter, ParsedRun
from .megatron_log import classify_failure, parse_log, to_metrics

KERNEL_OPS = ("rmsnorm", "swiglu", "rope", "cross_entropy", "add_rmsnorm")

# Fixed workload arguments the workload accepts (Megatron names, underscores).
FIXED_FLAGS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "vocab_size",
               "global_batch_size", "train_iters", "lr", "weight_decay", "clip_grad", "seed")


def knobs() -> list[Knob]:
    """The workload's knobs, with Megatron spellings where Megatron has the knob."""
    return [
        Knob(name="micro_batch_size", kind="int", domain=(1, 2, 4, 8, 16), default=1, group="memory",
             spelling={"minigpt": "--micro-batch-size", "megatron": "--micro-batch-size"},
             doc="samples per forward/backward; the rest of the global batch is gradient accumulation"),
        Knob(name="data_parallel", kind="int", domain=(1, 2), default=1, group="parallelism",
             spelling={"minigpt": "torchrun --nproc-per-node"}, doc="processes (gloo DDP on the CPU)"),
        Knob(name="recompute_granularity", kind="categorical", domain=("none", "selective", "full"), default="none",
             group="memory", spelling={"minigpt": "--recompute-granularity", "megatron": "--recompute-granularity"},
             doc="selective: recompute the attention core; full: recompute whole layers"),
        Knob(name="recompute_method", kind="categorical", domain=("uniform", "block"), default="uniform", group="memory",
             spelling={"minigpt": "--recompute-method", "megatron": "--recompute-method"}),
        Knob(name="recompute_num_layers", kind="int", domain=(1, 2, 4), default=1, group="memory",
             spelling={"minigpt": "--recompute-num-layers", "megatron": "--recompute-num-layers"}),
        Knob(name="bf16", kind="bool", group="precision", spelling={"minigpt": "--bf16", "megatron": "--bf16"}),
        Knob(name="attention_backend", kind="categorical", domain=("auto", "unfused"), default="auto", group="kernel",
             spelling={"minigpt": "--attention-backend", "megatron": "--attention-backend"},
             doc="auto: SDPA; unfused: explicit softmax(QK^T)V, storing S x S probabilities"),
        Knob(name="overlap_grad_reduce", kind="bool", group="communication",
             spelling={"minigpt": "--overlap-grad-reduce", "megatron": "--overlap-grad-reduce"}),
        Knob(name="intra_op_threads", kind="int", domain=(1, 2), default=2, group="runtime",
             spelling={"minigpt": "--intra-op-threads"}),
        Knob(name="torch_compile", kind="bool", group="compile", spelling={"minigpt": "--torch-compile"}),
        Knob(name="adam_impl", kind="categorical", domain=("foreach", "fused"), default="foreach", group="kernel",
             spelling={"minigpt": "--adam-impl"}),
    ]


def constraints(contract: Contract) -> list[Constraint]:
    gbs = int(contract.workload.args.get("global_batch_size", 16))

    def batch_divides(s: Mapping[str, Any]) -> str | None:
        mbs, dp = s.get("micro_batch_size", 1), s.get("data_parallel", 1)
        if gbs % (mbs * dp):
            return f"global batch {gbs} is not divisible by micro batch {mbs} x data parallel {dp} = {mbs * dp}"
        return None

    def recompute_options(s: Mapping[str, Any]) -> str | None:
        if s.get("recompute_granularity", "none") != "full" and (
                s.get("recompute_method", "uniform") != "uniform" or s.get("recompute_num_layers", 1) != 1):
            return "recompute_method and recompute_num_layers apply only with recompute_granularity=full"
        return None

    def overlap_needs_dp(s: Mapping[str, Any]) -> str | None:
        if s.get("overlap_grad_reduce") and s.get("data_parallel", 1) < 2:
            return "overlap_grad_reduce needs data_parallel > 1 (nothing to reduce)"
        return None

    def threads_fit(s: Mapping[str, Any]) -> str | None:
        need = s.get("data_parallel", 1) * s.get("intra_op_threads", 1)
        if need > contract.hardware.devices * 2:
            return f"data_parallel {s.get('data_parallel', 1)} x intra_op_threads {s.get('intra_op_threads', 1)} = {need} exceeds the cores"
        return None

    return [Constraint("batch_divides", batch_divides), Constraint("recompute_options", recompute_options),
            Constraint("overlap_needs_dp", overlap_needs_dp), Constraint("threads_fit", threads_fit)]


def _workload_default(flag: str) -> Any:
    """The workload's own default for a fixed argument (what a contract that does not set it gets)."""
    from ..workloads.minigpt import build_parser

    return build_parser().get_default(flag)


class MiniGPTAdapter(Adapter):
    name = "minigpt"

    def knob_space(self, contract: Contract) -> KnobSpace:
        all_knobs = {k.name: k for k in knobs()}
        for op in KERNEL_OPS:  # a kernel knob exists when the contract lists candidates for it
            name = f"kernel_{op}"
            if name in contract.scope.knobs:
                dom = tuple(dict.fromkeys(["reference", *contract.scope.knobs[name]]))
                all_knobs[name] = Knob(name=name, kind="categorical", domain=dom, default="reference", group="kernel",
                                       spelling={"minigpt": f"--kernel {op}=PATH"})
        unknown = sorted(set(contract.scope.knobs) - set(all_knobs))
        fixed = [k for k in unknown if k in FIXED_FLAGS]
        if fixed:
            k = fixed[0]
            value = contract.workload.args.get(k, _workload_default(k))
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

    def launch(self, contract: Contract, setting: Mapping[str, Any], *, patches: Mapping[str, str] | None = None) -> LaunchSpec:
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
        s = dict(setting)
        argv += ["--micro-batch-size", str(s.get("micro_batch_size", 1))]
        if s.get("recompute_granularity", "none") != "none":
            argv += ["--recompute-granularity", s["recompute_granularity"]]
            if s["recompute_granularity"] == "full":
                argv += ["--recompute-method", s.get("recompute_method", "uniform"),
                         "--recompute-num-layers", str(s.get("recompute_num_layers", 1))]
        if s.get("bf16"):
            argv.append("--bf16")
        argv += ["--attention-backend", s.get("attention_backend", "auto")]
        if s.get("overlap_grad_reduce"):
            argv.append("--overlap-grad-reduce")
        argv += ["--intra-op-threads", str(s.get("intra_op_threads", 2))]
        if s.get("torch_compile"):
            argv.append("--torch-compile")
        argv += ["--adam-impl", s.get("adam_impl", "foreach")]
        kern = dict(patches or {})
        for op in KERNEL_OPS:
            v = s.get(f"kernel_{op}", "reference")
            if v != "reference":
                kern[op] = v
        for op, path in sorted(kern.items()):
            argv += ["--kernel", f"{op}={path}"]
        argv += ["--log-interval", "1", "--timing-log-level", "1"]
        if contract.hardware.peak_flops:
            argv.append("--log-throughput")
        dp = int(s.get("data_parallel", 1))
        module = ["-m", "infrarsi.workloads.minigpt"]
        if dp > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(dp), *module]
        else:
            cmd = [sys.executable, *module]
        cap = contract.hardware.memory_capacity_bytes
        env = {**contract.workload.env, "INFRARSI_MEMORY_CAP_BYTES": str(cap), "OMP_NUM_THREADS": str(s.get("intra_op_threads", 2)),
               "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        return LaunchSpec(argv=cmd + argv, env=env, processes=dp, devices=dp, time_limit_s=t.timeout_s, memory_cap_bytes=cap)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        log = parse_log(stdout)
        a = contract.workload.args
        tokens = int(a.get("global_batch_size", 16)) * int(a.get("seq_length", 256))
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
