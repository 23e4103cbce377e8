"""Adapter for simulated GPU clusters (infrarsi/workloads/simulated/).

A trial is a real process, ``python -m infrarsi.workloads.simulated``, that prints Megatron-LM's log
lines (or a CUDA out-of-memory traceback and exit 1), parsed by ``megatron_log`` like any Megatron run.
The contract names the workload in ``[workload.args]``::

    args = { reference = "dense8b-h100x8", seed = 1234 }                    # a reference workload
    args = { num_layers = 24, hidden_size = 2048, ..., gpu = "H200", nodes = 4 }   # or its own dims

Run settings in the args: ``seed`` (data order and noise), ``noise_cv`` (run-to-run step-time CV,
default 0.02), ``train_iters``. Every launch of the same setting draws fresh noise (as a real rerun
does), reproducibly: the n-th launch of a setting in a session uses noise stream n.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from ..contract.model import Contract, ContractError
from ..trial import LaunchSpec
from ..trial import TrialStatus
from ..knobs import KnobSpace, Setting
from ..transformer import CAUSAL_MATMULS
from ..workloads import simulated as sim
from .base import Adapter, ParsedRun
from .spec import FrameworkSpec
from .megatron.log import classify_failure, parse_log, to_metrics

# The file an out-of-memory traceback names: the trial prints Megatron-LM's log (megatron.log parses it), its
# traceback frame included (workloads/simulated/process.py takes it as --oom-frame)
OOM_FRAME = "megatron/training/training.py"


def workload_for(contract: Contract) -> sim.SimWorkload:
    """The simulated workload a contract describes; ContractError names the field and the fix."""
    args = dict(contract.workload.args)
    if not (args.get("reference") or args.get("workload")):
        args.setdefault("gpu", contract.hardware.kind)
        args.setdefault("name", contract.name)
    try:
        w = sim.workload_from_args(args)
    except ValueError as e:
        raise ContractError(str(e)) from None
    if contract.hardware.devices != w.world_size:
        raise ContractError(
            f"hardware.devices = {contract.hardware.devices} but workload {w.name!r} runs on {w.nodes} node(s) x "
            f"{w.spec.gpus_per_node} {w.spec.name} = {w.world_size} GPUs; set hardware.devices = {w.world_size}")
    cap = w.spec.memory_bytes / sim.GiB
    if abs(contract.hardware.memory_capacity_gib - cap) > 0.02 * cap:
        raise ContractError(f"hardware.memory_capacity_gib = {contract.hardware.memory_capacity_gib} but a simulated "
                            f"{w.spec.name} has {cap:.1f} GiB; set hardware.memory_capacity_gib = {cap:.1f}")
    return w


class SimulatedAdapter(Adapter):
    name = "simulated"
    runs_own_program = True
    measured_time = False  # the step times are the analytical model's, printed in a fraction of a second
    step_model = "args"

    def __init__(self, base_dir=None) -> None:
        super().__init__(base_dir)
        self._launches: dict[str, int] = {}  # setting key -> launches so far (noise stream per rerun)

    def knob_space(self, contract: Contract) -> KnobSpace:
        """The workload's space (:func:`~infrarsi.workloads.simulated.space_for`) restricted to the contract's
        scope: knobs not in scope are pinned at the baseline (data_parallel stays derived)."""
        w = workload_for(contract)
        full = sim.space_for(w)
        unknown = sorted(set(contract.scope.knobs) - set(full.names))
        if unknown:
            raise ContractError(f"scope.knobs names {unknown}, which the simulated workload does not have; "
                                f"known: {', '.join(full.names)}")
        bad_base = sorted(set(contract.baseline) - set(full.names))
        if bad_base:
            raise ContractError(f"baseline names {bad_base}, which the simulated workload does not have; "
                                f"known: {', '.join(full.names)}")
        scope = contract.scope.knobs or {k.name: list(k.domain) for k in full.knobs}  # empty = everything
        domains: dict[str, list[Any]] = {}
        for k in full.knobs:
            base = contract.baseline.get(k.name, k.default)
            if k.name in scope:
                try:
                    dom = [k.coerce(v) for v in scope[k.name]]
                except ValueError as e:
                    raise ContractError(f"scope.knobs.{k.name}: {e}") from None
                domains[k.name] = dom
            elif k.name == "data_parallel":
                domains[k.name] = list(k.domain)  # derived from tp, pp, cp and the world size
            else:
                try:
                    domains[k.name] = [k.coerce(base)]
                except ValueError as e:
                    raise ContractError(f"baseline.{k.name}: {e}") from None
        space = full.restrict(domains, keep=full.names)
        # the baseline is the reference level of every in-scope knob (priors speak relative to it)
        knobs = [k.with_domain(k.domain, contract.baseline[k.name]) if k.name in contract.baseline
                 and contract.baseline[k.name] in k.domain else k for k in space.knobs]
        return KnobSpace(knobs, space.constraints)

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        w = workload_for(contract)
        args = contract.workload.args
        t = contract.invariants.timing
        need = max(t.warmup_steps + t.measured_steps, contract.invariants.loss.compare_steps)
        iters = int(args.get("train_iters", need))
        if iters < need:
            raise ContractError(f"workload.args.train_iters = {iters} < warm-up {t.warmup_steps} + measured "
                                f"{t.measured_steps} (or loss compare_steps); raise train_iters to at least {need}")
        s = dict(setting)
        key = Setting(s).key()
        n = self._launches.get(key, 0)
        self._launches[key] = n + 1
        seed = int(args.get("seed", 1234))
        ref = args.get("reference") or args.get("workload")
        if ref in sim.WORKLOADS and w.model == sim.WORKLOADS[ref].model and (w.gpu, w.nodes) == (
                sim.WORKLOADS[ref].gpu, sim.WORKLOADS[ref].nodes):
            wl = str(ref)  # the reference itself (its dims may be repeated in the contract for readers and the bank)
        else:
            wl = json.dumps({k: v for k, v in w.model.model_dump().items()} | {"gpu": w.gpu, "nodes": w.nodes,
                                                                                "name": w.name}, sort_keys=True)
        argv = [sys.executable, "-m", "infrarsi.workloads.simulated", "--workload", wl,
                "--setting", json.dumps(s, sort_keys=True), "--seed", str(seed), "--rerun", str(n),
                "--noise-cv", str(float(args.get("noise_cv", sim.DEFAULT_NOISE_CV))), "--train-iters", str(iters),
                "--oom-frame", OOM_FRAME]
        env = {**contract.workload.env, "PYTHONUNBUFFERED": "1"}
        return LaunchSpec(argv=argv, env=env, processes=1, nodes=1, devices=1, time_limit_s=t.timeout_s)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        w = workload_for(contract)
        log = parse_log(stdout)
        t = contract.invariants.timing
        tokens = w.model.global_batch_size * w.model.seq_length
        metrics = to_metrics(log, warmup_steps=t.warmup_steps, measured_steps=t.measured_steps, tokens_per_step=tokens,
                             peak_flops=contract.hardware.peak_flops or w.spec.peak_bf16_flops)
        failure = classify_failure(stderr + "\n" + stdout)
        if returncode == 0 and failure is None and metrics.step_time_s is not None:
            return ParsedRun(status=TrialStatus.OK, metrics=metrics)
        no_time = metrics.model_copy(update={"step_time_s": None})
        if failure is not None:
            status, reason, evidence = failure
            return ParsedRun(status=status, metrics=no_time, evidence=evidence, reason=reason)
        tail = (stderr or stdout).strip().splitlines()[-5:]
        if returncode == 0:
            return ParsedRun(status=TrialStatus.CRASH, metrics=no_time, evidence=tail,
                             reason="exited 0 without the measured iteration lines")
        return ParsedRun(status=TrialStatus.CRASH, metrics=no_time, evidence=tail, reason=f"exit code {returncode}")


SPEC = FrameworkSpec(name="simulated", title="simulated Megatron-LM", adapter="simulated:SimulatedAdapter",
                     flops_convention=CAUSAL_MATMULS, simulated=True)
