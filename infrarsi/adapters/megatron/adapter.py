"""Megatron-LM: read a launch (script or command), rewrite it for any setting, read its logs.

A launch is a ``torchrun ... pretrain_gpt.py ARGS`` command (also under ``srun`` or as a bare
``python pretrain_gpt.py``), on its own or at the end of a bash script in the style of Megatron-LM's
``examples/`` (see :mod:`infrarsi.launch.command`). :func:`parse_megatron` returns

- ``fixed``: the workload arguments that define the task, Megatron names with underscores
  (``num_layers``, ``hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``seq_length``,
  ``global_batch_size``, ``num_experts``, ``moe_router_topk``, ...);
- ``setting``: every catalog knob Megatron can express, read from the flags and the environment
  (a knob the launch does not mention has Megatron's default);
- the world size, when the launcher or the script's variables state it.

:func:`emit_megatron` rewrites the program arguments for another setting: a knob's flag is replaced
where it stands (``--flag=v`` stays in that form), removed when the new value is the default of a
switch, or appended at the end; every other token is kept byte for byte, unknown flags included.

This module is the adapter; the launch it reads is :mod:`.launch` (its type and readers), the flag tables and the
readers of program arguments are in :mod:`.args`, the writer in :mod:`.emit` (all re-exported here), the log parser
in :mod:`.log`.

Validation is twofold: the catalog's constraints (:mod:`infrarsi.knobs.catalog`) and megatron-core's
own ``TransformerConfig`` (which raises, e.g., "num_attention_heads (32) must be a multiple of
tensor_model_parallel_size (3)").
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...contract.model import Contract
from ...contract.place import launch_cwd, launch_path
from ...trial import LaunchSpec
from ...trial import Metrics, TrialStatus
from ...knobs import KnobSpace
from ...knobs.catalog import check_setting, space_for_fixed
from ...transformer import data_parallel
from . import equivalence, flags
from . import log as megatron_log
from .check import FrameworkRejected, check_megatron, megatron_core_check, megatron_parallel_check
from ..base import LaunchFileAdapter, LaunchTarget, ParsedRun, scoped_space
from .args import COUPLED_FLAGS, FRAMEWORK, KNOB_FLAGS, Item, MegatronLaunchError, split_items
from .emit import emit_megatron, emit_megatron_args, knob_env
from .launch import MegatronLaunch, parse_megatron, parse_megatron_argv, parse_megatron_file, with_world
from .spelling import SPELLING

__all__ = ["COUPLED_FLAGS", "FRAMEWORK", "KNOB_FLAGS", "Item", "MegatronAdapter", "MegatronLaunch", "MegatronLaunchError",
           "emit_megatron", "emit_megatron_args", "knob_env", "knob_space_for", "parse_megatron", "parse_megatron_argv",
           "parse_megatron_file", "parse_megatron_output", "split_items", "violations"]


# --------------------------------------------------------------------------- validation
def _space(parsed: MegatronLaunch, include: Mapping[str, Any] | None) -> KnobSpace:
    from ..registry import spec

    return space_for_fixed(parsed.fixed, world_size=parsed.world_size, spelling=SPELLING,
                           framework=spec(FRAMEWORK).title, include=include,
                           expert_tensor_parallel=parsed.expert_tensor_parallel, device=parsed.device)


def knob_space_for(parsed: MegatronLaunch, *, include_current: bool = True) -> KnobSpace:
    """The catalog space for this launch's workload, world size and device."""
    return _space(parsed, parsed.setting if include_current else None)


def violations(parsed: MegatronLaunch, setting: Mapping[str, Any] | None = None, *, core: bool = True) -> list[str]:
    """Every problem with ``setting`` (default: the launch's own): catalog constraints, then
    megatron-core's TransformerConfig. Messages show the numbers."""
    s = dict(parsed.setting if setting is None else {**parsed.setting, **setting})
    s = dict(knob_space_for(parsed).derive(s))  # derived knobs follow; values Megatron ignores are mapped
    out: list[str] = []
    if parsed.world_size and s.get("data_parallel") is None:
        inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
        out.append(f"world_size({parsed.world_size}) is not divisible by tp({s['tensor_parallel']}) * "
                   f"pp({s['pipeline_parallel']}) * cp({s['context_parallel']}) = {inner}")
    space = _space(parsed, s)
    out.extend(parsed.problems)
    out.extend(v.message for v in check_setting(space, s))
    if core:
        out.extend(megatron_core_check(parsed.fixed, s))
        if not out:  # and the process groups megatron-core would make
            out.extend(megatron_parallel_check(s, world_size=parsed.world_size,
                                               expert_tensor_parallel=parsed.expert_tensor_parallel))
    return out


# --------------------------------------------------------------------------- adapter
def _launch_from_contract(contract: Contract, base_dir: Path | None) -> MegatronLaunch:
    w = contract.workload
    if w.launch:
        p = launch_path(w, base_dir)
        if not p.is_file():
            raise MegatronLaunchError(f"workload.launch {w.launch!r} does not exist (looked at {p}); give the "
                                      "launch script's path relative to the contract's folder")
        return parse_megatron_file(p, env={**w.script_env, **w.env}, args=w.script_args, cwd=launch_cwd(w, base_dir))
    if not w.entrypoint:
        raise MegatronLaunchError("workload: set launch (a Megatron launch script) or entrypoint "
                                  "(e.g. \"torchrun --nproc-per-node 8 pretrain_gpt.py\") with [workload.args]")
    argv = shlex.split(w.entrypoint)
    for key, val in w.args.items():
        flag = "--" + key.replace("_", "-")
        if val is True:
            argv.append(flag)
        elif val is False or val is None:
            continue
        else:
            argv.extend([flag, *str(val).split()] if key in ("data_path",) else [flag, str(val)])
    return parse_megatron_argv(argv, env=w.env, source="contract workload", check_flags=True,
                               cwd=launch_cwd(w, base_dir), near=(base_dir,) if base_dir is not None else ())


class MegatronAdapter(LaunchFileAdapter):
    """Megatron-LM through its launch script: catalog knobs, rewritten launches, log parsing."""

    name = FRAMEWORK
    estimate_module = "adapters.megatron.estimate.peak"
    estimate_needs = "megatron.core"
    step_model = "launch"
    memory_offset = "estimate"
    estimate_progress = True
    extra_env_keys = frozenset({"CUDA_DEVICE_MAX_CONNECTIONS"})
    launch_setting_is_baseline = True
    has_framework_check = True
    framework_check_by = "megatron-core's own config code"

    def __init__(self, base_dir: str | Path | None = None) -> None:
        super().__init__(base_dir)
        self._cache: dict[str, MegatronLaunch] = {}
        self._before: dict[int, dict[str, Any]] = {}  # the user's launch as Megatron reads it, per parse

    def parsed(self, contract: Contract) -> MegatronLaunch:
        key = contract.model_dump_json(include={"workload", "hardware"})
        if key not in self._cache:
            parsed = _launch_from_contract(contract, self.base_dir)  # its flags judged as it is read
            parsed.device = contract.hardware.kind
            if parsed.world_size is None:  # the launch does not say: the contract's devices do
                with_world(parsed, contract.hardware.devices)
            self._cache[key] = parsed
        return self._cache[key]

    def knob_space(self, contract: Contract) -> KnobSpace:
        return scoped_space(knob_space_for(self.parsed(contract)), contract, "Megatron")

    def launch_warnings(self, contract: Contract) -> list[str]:
        return list(self.parsed(contract).warnings)

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        parsed = self.parsed(contract)
        s = self.full_setting(contract, setting)
        if parsed.world_size and "data_parallel" not in setting:  # None when it does not divide (checked below)
            s["data_parallel"] = data_parallel(parsed.world_size, s["tensor_parallel"], s["pipeline_parallel"],
                                               s["context_parallel"])
        spec = emit_megatron(parsed, s, time_limit_s=contract.invariants.timing.timeout_s)
        if parsed.problems:
            raise MegatronLaunchError("; ".join(parsed.problems))
        prog = parsed.launch.program[-1]  # the program's arguments follow it in the emitted command
        at = len(spec.argv) - 1 - list(spec.argv)[::-1].index(prog) if prog in spec.argv else len(spec.argv)
        why = flags.emitted_refusal(parsed.known_flags, list(spec.argv[at + 1:]))
        if why:  # a knob's flag the fork's parser lacks: the trial would exit on it, so it is not launched
            raise FrameworkRejected(why)
        rejected = check_megatron(parsed, s)  # megatron-core's own word, before any launch
        if rejected:
            raise FrameworkRejected("; ".join(rejected))
        key = id(parsed)  # the user's launch, read once per parse; the emitted one must compute the same job
        if key not in self._before:
            self._before[key] = equivalence.reading(parsed.argv(), parsed.env)
        equivalence.check_equivalent(parsed, spec.argv, spec.env, s, before=self._before[key])
        return spec

    def trial_form(self, contract: Contract, spec: LaunchSpec, setting: Mapping[str, Any]) -> LaunchSpec:
        """``spec`` (this adapter's launch of ``setting``) as a trial runs it: where the launch's relative paths were
        read from, and on a CPU contract torchrun as this interpreter's, the threads and the memory cap (a setting
        the CPU launcher refuses raises FrameworkRejected)."""
        from .cpu.trial import cpu_trial

        if contract.workload.launch:  # it runs where its relative paths were read from
            spec = spec.model_copy(update={"cwd": str(launch_cwd(contract.workload, self.base_dir))})
        return cpu_trial(spec, contract)

    def trial_outputs(self, spec: LaunchSpec) -> LaunchSpec:
        return spec.model_copy(update={"argv": trial_outputs(spec.argv)})

    def batch_launch(self, contract: Contract, setting: Mapping[str, Any], spec: LaunchSpec) -> LaunchSpec:
        """Megatron's launcher rebuilt as ``srun`` for a batch job."""
        parsed = self.parsed(contract)
        return emit_megatron(parsed, self.full_setting(contract, setting), launcher="srun",
                             time_limit_s=spec.time_limit_s)

    def edit(self, contract: Contract, changes: Mapping[str, Any]) -> LaunchTarget:
        """The user's program arguments with each knob's flag rewritten where it stands, and the launch's
        environment with the knobs' variables (the launcher and program stay the user's)."""
        parsed = self.parsed(contract)
        s = self.full_setting(contract, changes)
        return LaunchTarget(args=emit_megatron_args(parsed.args, s, num_layers=parsed.fixed.get("num_layers")),
                            env=knob_env(s, parsed.env))

    def model_shape(self, contract: Contract) -> dict[str, Any]:
        return dict(self.parsed(contract).fixed)

    @classmethod
    def read_file(cls, path: Path, text: str, *, world_size: int | None = None) -> MegatronLaunch:
        parsed = parse_megatron(text, path=str(path))
        if world_size and not parsed.world_size:
            with_world(parsed, world_size)
        return parsed

    @classmethod
    def read_path(cls, path: Path) -> MegatronLaunch:
        return parse_megatron_file(path)

    @staticmethod
    def launch_space(parsed: MegatronLaunch) -> KnobSpace:
        return knob_space_for(parsed)

    @staticmethod
    def launch_violations(parsed: MegatronLaunch, *, core: bool = True) -> list[str]:
        return violations(parsed, core=core)

    def reread(self, contract: Contract, text: str, files: Mapping[str, str] | None = None) -> MegatronLaunch:
        """``text`` read as the contract's launch file is (the same environment, arguments and working directory;
        ``files``: the chain's other scripts, edited): what ``apply`` would write, read back."""
        rw = self.parsed(contract).read_with
        return parse_megatron(text, path=str(launch_path(contract.workload, self.base_dir)), env=rw.get("env"),
                              args=rw.get("args"), cwd=rw.get("cwd"), files=files)

    def differences(self, contract: Contract, setting: Mapping[str, Any], text: str,
                    files: Mapping[str, str] | None = None) -> list[str]:
        """What differs, by Megatron's reading, between the user's launch and the launch file ``text`` (``files``:
        the chain's other scripts, edited) that the complete ``setting`` does not explain."""
        q = self.reread(contract, text, files)
        return equivalence.compare(self.parsed(contract), q.argv(), q.env, setting)

    def reading(self, contract: Contract, text: str, files: Mapping[str, str] | None = None
                ) -> tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]:
        """(program arguments, environment, setting, fixed) of ``text`` read as the launch file (``files``: the
        chain's other scripts, edited): what an in-place edit compares."""
        q = self.reread(contract, text, files)
        return q.args, q.env, q.setting, q.fixed

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        fixed = self.parsed(contract).fixed if (contract.workload.launch or contract.workload.entrypoint) else contract.fixed
        tokens = (fixed.get("global_batch_size") or 0) * (fixed.get("seq_length") or 0) or None
        return parse_megatron_output(stdout, stderr, returncode, warmup_steps=contract.invariants.timing.warmup_steps,
                                     measured_steps=contract.invariants.timing.measured_steps,
                                     tokens_per_step=tokens, peak_flops=contract.hardware.peak_flops)


# Megatron's flags that name where a run writes: a trial writes into its own directory (the repository is read-only
# to it), RUN_DIR/trials/<n>/outputs/<name>. --load stays: it is read.
OUTPUT_FLAGS = {"--save": "checkpoints", "--tensorboard-dir": "tensorboard", "--wandb-save-dir": "wandb",
                "--memory-snapshot-path": "memory_snapshot.pickle", "--non-persistent-global-ckpt-dir":
                "checkpoints-global", "--non-persistent-local-ckpt-dir": "checkpoints-local"}


def trial_outputs(argv: list[str]) -> list[str]:
    """``argv`` with the value of every output flag (:data:`OUTPUT_FLAGS`, ``--flag v`` or ``--flag=v``) pointed
    into the trial's directory (``spec.TRIAL_DIR``, filled in at launch)."""
    from ...trial import OUTPUTS, TRIAL_DIR

    out = list(argv)
    for i, tok in enumerate(out):
        flag, eq, _ = tok.partition("=")
        if flag not in OUTPUT_FLAGS:
            continue
        where = f"{TRIAL_DIR}/{OUTPUTS}/{OUTPUT_FLAGS[flag]}"
        if eq:
            out[i] = f"{flag}={where}"
        elif i + 1 < len(out) and not out[i + 1].startswith("--"):
            out[i + 1] = where
    return out


def parse_megatron_output(stdout: str, stderr: str, returncode: int | None, *, warmup_steps: int,
                          measured_steps: int, tokens_per_step: int | None = None,
                          peak_flops: float | None = None) -> ParsedRun:
    """Status, metrics and evidence of a finished Megatron run (logs read by :mod:`.log`)."""
    text = stdout + "\n" + stderr
    log = megatron_log.parse_log(text)
    metrics = megatron_log.to_metrics(log, warmup_steps=warmup_steps, measured_steps=measured_steps,
                                      tokens_per_step=tokens_per_step, peak_flops=peak_flops)
    failure = megatron_log.classify_failure(text)
    if failure is not None:
        status, reason, evidence = failure
        return ParsedRun(status=status, metrics=_without_step_time(metrics), evidence=evidence, reason=reason)
    if returncode not in (0, None):
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
        return ParsedRun(status=TrialStatus.CRASH, metrics=_without_step_time(metrics), evidence=tail,
                         reason=f"exit code {returncode}")
    if metrics.step_time_s is None:
        return ParsedRun(status=TrialStatus.CRASH, metrics=metrics, reason=(
            f"the log has {len(log.iterations)} iteration lines; the measured window ends at iteration "
            f"{warmup_steps + measured_steps}"))
    return ParsedRun(status=TrialStatus.OK, metrics=metrics)


def _without_step_time(m: Metrics) -> Metrics:
    return m.model_copy(update={"step_time_s": None})
