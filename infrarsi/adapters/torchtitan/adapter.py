"""torchtitan: read a launch in either config style, rewrite it for any setting, read its logs.

Two styles exist:

- 0.2.x: a TOML job file (``[parallelism]``, ``[training]``, ``[activation_checkpoint]``,
  ``[compile]``, ``[quantize.linear.float8]``, ...) given as ``--job.config_file FILE`` (or
  ``CONFIG_FILE=FILE ./run_train.sh``), optionally followed by ``--section.field VALUE`` overrides.
- 0.3.x: ``--module M --config C`` (a Python config function) plus ``--section.field VALUE``
  overrides (``_`` and ``-`` spellings both accepted) and, last of all, the activation-checkpoint
  subcommand ``activation-checkpoint:{none,selective,full,memory-budget}``.

A config function's own values (``llama3_70b`` sets TP 8 and full recompute) come from a table of
the functions torchtitan ships (:data:`CONFIGS_03`); model dimensions come from a table of model
flavors (:data:`FLAVORS`). torchtitan fields map onto the same fixed names as Megatron:
``training.seq_len`` -> ``seq_length``, ``training.global_batch_size`` (or local batch x DP when it is
-1) -> ``global_batch_size``, ``training.steps`` -> ``train_iters``.

:func:`emit_torchtitan` never edits the TOML file: it rewrites or appends ``--section.field``
overrides on the command line (keeping the activation-checkpoint subcommand last), so the job file
and every unrelated argument survive byte for byte. When a setting changes the local batch or the DP
degree and the job derives the global batch (``global_batch_size = -1``), the fixed global batch is

The parts: the tables (``configs``), reading (``launch``), rewriting
(``emit``), logs and failures (``log``), the trial's launcher and caps
(``trial``); this module holds the knob space, the checks and the adapter, and re-exports the
names callers use.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...contract.model import Contract
from ...contract.place import launch_cwd, launch_path
from ...trial import LaunchSpec
from ...knobs import Constraint, Derived, Knob, KnobSpace
from ...knobs.catalog import check_setting, space_for_fixed
from ...transformer import data_parallel
from . import trial as torchtitan_trial
from ..base import LaunchFileAdapter, LaunchTarget, ParsedRun, full_setting, scoped_space
from ..equivalence import raise_if_different
from .check import FrameworkRejected, check_torchtitan
from .configs import CONFIGS_03, DEFAULTS_02, DEFAULTS_03, FLAVORS, FRAMEWORK, SUBCOMMAND
from .emit import JOBS_DIR, emit_torchtitan, emit_torchtitan_args
from .equivalence import check_launch, compare
from .spelling import SPELLING
from .launch import (
    Override, TorchtitanLaunch, TorchtitanLaunchError, parse_toml_job, parse_torchtitan, parse_torchtitan_argv,
    parse_torchtitan_file, split_overrides, with_world,
)
from .log import (StepLog, classify_torchtitan_failure, parse_torchtitan_log,
                             parse_torchtitan_output, to_metrics)

__all__ = [
    "CONFIGS_03", "DEFAULTS_02", "DEFAULTS_03", "FLAVORS", "FRAMEWORK", "JOBS_DIR", "Override", "StepLog",
    "TorchtitanAdapter", "TorchtitanLaunch", "TorchtitanLaunchError", "classify_torchtitan_failure", "emit_torchtitan",
    "emit_torchtitan_args", "knob_space_for", "parse_toml_job", "parse_torchtitan", "parse_torchtitan_argv",
    "parse_torchtitan_file", "parse_torchtitan_log", "parse_torchtitan_output", "split_overrides", "to_metrics",
    "violations", "with_world",
]


# --------------------------------------------------------------------------- space and checks
# torchtitan 0.2.2 config/job_config.py: ActivationCheckpoint.selective_ac_option = "2" (every second block).
SELECTIVE_AC_DEFAULT_02 = "2"
_MULTI_STAGE = ("Interleaved", "Looped", "ZBV", "DualPipe")  # schedules with more than one stage per rank


def replicate_knob(parsed: TorchtitanLaunch) -> Knob:
    """``data_parallel_replicate`` (``parallelism.data_parallel_replicate_degree``): HSDP's replicas; the shard
    degree is data_parallel / replicate. Its default is the launch's own degree, so an HSDP job stays HSDP."""
    rep = int(parsed.values.get("parallelism.data_parallel_replicate_degree", 1))
    world = parsed.world_size
    dom = [d for d in (1, 2, 4, 8, 16, 32, 64) if not world or world % d == 0]
    return Knob(name="data_parallel_replicate", kind="int", domain=sorted({*dom, rep}), default=rep,
                group="parallelism",
                doc="HSDP replicas; shard degree = data_parallel / replicate (replicate = data_parallel is DDP)")


def knob_space_for(parsed: TorchtitanLaunch, *, include_current: bool = True) -> KnobSpace:
    """The catalog space for this launch: torchtitan's knobs, its defaults, and its own rules (0.2.x: SP follows
    TP; 0.3.x config functions fix fp8 in code). Derived knobs follow their parents: data parallel from the
    layout, the replicate degree from data parallel (the job's own when it divides, else the largest that
    does), the distributed optimizer from FSDP's shard degree; torchtitan splits pipeline stages unevenly."""
    from ..registry import spec

    defaults = {"recompute_granularity": "selective", "bf16": True}
    space = space_for_fixed(parsed.fixed, world_size=parsed.world_size, spelling=SPELLING,
                            framework=spec(FRAMEWORK).title,
                            include=parsed.setting if include_current else None, defaults=defaults,
                            expert_tensor_parallel=1, device=parsed.device, uneven_stages=True)
    rep = int(parsed.values.get("parallelism.data_parallel_replicate_degree", 1))
    knobs = [*space.knobs, replicate_knob(parsed)]
    dp0 = next((k.default for k in knobs if k.name == "data_parallel"), None)
    if dp0:  # the derived knob's default follows the default degrees: FSDP over dp / rep ranks
        knobs = [k.with_domain(k.domain, dp0 // math.gcd(rep, dp0) > 1) if k.name == "distributed_optimizer" else k
                 for k in knobs]
    if parsed.style == "cli":
        knobs = [k.with_domain([parsed.setting["fp8_recipe"]]) if k.name == "fp8_recipe" else k for k in knobs]
    cons = [*space.constraints, *_torchtitan_rules(parsed)]
    derived = [*space.derived, *_torchtitan_derived(parsed)]
    if parsed.style == "toml":
        def sp_follows_tp(s: Mapping[str, Any]) -> str | None:
            tp, sp = s.get("tensor_parallel", 1), s.get("sequence_parallel", False)
            if bool(sp) != (tp > 1):
                return (f"torchtitan 0.2 applies sequence parallelism exactly when TP > 1 "
                        f"(tp = {tp}, sequence_parallel = {sp})")
            return None

        cons.append(Constraint("sp_follows_tp", sp_follows_tp))
        # sequence_parallel has no 0.2 field; it is derived, so it stays in the space for the rule
        derived.append(Derived("sequence_parallel", lambda s: s.get("tensor_parallel", 1) > 1))
    return KnobSpace(knobs, cons, derived)


def _torchtitan_derived(parsed: TorchtitanLaunch) -> list[Derived]:
    def replicate(s: Mapping[str, Any]) -> int | None:
        dp, rep = s.get("data_parallel"), s.get("data_parallel_replicate", 1)
        return math.gcd(rep, dp) if dp and dp % rep else None  # HSDP's split follows data parallel

    def optimizer_sharded(s: Mapping[str, Any]) -> bool | None:
        dp = s.get("data_parallel")
        return dp // s.get("data_parallel_replicate", 1) > 1 if dp else None

    return [Derived("data_parallel_replicate", replicate, always=False),
            Derived("distributed_optimizer", optimizer_sharded)]


def _torchtitan_rules(parsed: TorchtitanLaunch) -> list[Constraint]:
    """The rules torchtitan adds to the catalog's: the replicate degree divides data parallel, FSDP's optimizer
    sharding, pipeline stages that fit the layers, and async TP (which compiles the model)."""
    components = list(parsed.values.get("compile.components") or ["model", "loss"])
    style = parsed.style
    L = parsed.fixed.get("num_layers")
    schedule = str(parsed.values.get("parallelism.pipeline_parallel_schedule")
                   or ("Interleaved1F1B" if style == "cli" else "1F1B"))
    per_rank = 2 if schedule.startswith(_MULTI_STAGE) else 1
    first = int(parsed.values.get("parallelism.pipeline_parallel_first_stage_less_layers", 1))
    last = int(parsed.values.get("parallelism.pipeline_parallel_last_stage_less_layers", 1))

    def dp_covers_replicate(s: Mapping[str, Any]) -> str | None:
        dp, rep = s.get("data_parallel"), s.get("data_parallel_replicate", 1)
        if dp is None or dp % rep == 0:
            return None
        return (f"data_parallel {dp} is not a multiple of data_parallel_replicate {rep}: the shard degree would be "
                f"{dp} / {rep} (torchtitan: \"dp_shard must -1 or >=1\"); choose a multiple of {rep}")

    def optimizer_sharded_by_fsdp(s: Mapping[str, Any]) -> str | None:
        dp, rep = s.get("data_parallel"), s.get("data_parallel_replicate", 1)
        if dp is None:
            return None
        want = dp // rep > 1
        if bool(s.get("distributed_optimizer", want)) != want:
            return (f"torchtitan shards optimizer state exactly when FSDP's shard degree is above 1 (data_parallel "
                    f"{dp} / replicate {rep} = {dp // rep}): distributed_optimizer must be {want}")
        return None

    def pp_stages_fit_layers(s: Mapping[str, Any]) -> str | None:
        # torchtitan's generate_llm_fqn_per_model_part: stages = pp x stages per rank over layers + the embedding
        # and output weights, each stage at least max(weights) layers; the stages may be uneven
        pp = s.get("pipeline_parallel", 1)
        if pp <= 1 or not L:
            return None
        stages, eff = pp * per_rank, L + first + last
        if eff // stages < max(1, first, last):
            return (f"pipeline parallel {pp} x {per_rank} stage(s) per rank ({schedule}) = {stages} stages over "
                    f"{L} layers + {first} + {last} (embedding, output) = {eff}: a stage would have fewer than "
                    f"{max(1, first, last)} layer(s)")
        return None

    def expert_grid_fits_fsdp(s: Mapping[str, Any]) -> str | None:
        # torchtitan's build_mesh: the sparse mesh is (pp, dp_replicate, efsdp, ep, etp) with efsdp =
        # dp_shard * cp * tp / (etp * ep); the replicas are not part of it (etp = 1 in both eras here)
        ep, dp, rep = s.get("expert_parallel", 1), s.get("data_parallel"), s.get("data_parallel_replicate", 1)
        if ep <= 1 or not dp or dp % rep:
            return None
        inner = (dp // rep) * s.get("context_parallel", 1) * s.get("tensor_parallel", 1)
        if inner % ep:
            return (f"expert parallel {ep} does not divide shard {dp // rep} x cp {s.get('context_parallel', 1)} x "
                    f"tp {s.get('tensor_parallel', 1)} = {inner} (torchtitan's expert mesh borrows from those, not "
                    f"from the {rep} replicas)")
        return None

    def async_tp_needs_compiled_model(s: Mapping[str, Any]) -> str | None:
        if not s.get("async_tp"):
            return None
        if style == "toml" and s.get("tensor_parallel", 1) <= 1:
            return None  # 0.2.x: no TP mesh, async TP is inert
        if not s.get("torch_compile") or "model" not in components:
            return (f"async_tp needs torch_compile with 'model' in compile.components (the job compiles "
                    f"{components}; torchtitan: \"Async TP requires 'model' in --compile.components and "
                    f"--compile.enable\")")
        return None

    return [Constraint(fn.__name__, fn) for fn in (dp_covers_replicate, optimizer_sharded_by_fsdp,
                                                    pp_stages_fit_layers, expert_grid_fits_fsdp,
                                                    async_tp_needs_compiled_model)]


def violations(parsed: TorchtitanLaunch, setting: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem with ``setting`` (default: the launch's own), its derived knobs followed first."""
    s = dict(parsed.setting if setting is None else {**parsed.setting, **setting})
    space = knob_space_for(parsed)
    s = dict(space.derive(s))
    out: list[str] = list(parsed.problems)
    if parsed.world_size and s.get("data_parallel") is None:
        inner = s["tensor_parallel"] * s["pipeline_parallel"] * s["context_parallel"]
        out.append(f"world_size({parsed.world_size}) is not divisible by tp({s['tensor_parallel']}) * "
                   f"pp({s['pipeline_parallel']}) * cp({s['context_parallel']}) = {inner}")
    out.extend(v.message for v in check_setting(space, s))
    return out


# --------------------------------------------------------------------------- adapter
class TorchtitanAdapter(LaunchFileAdapter):
    """torchtitan through its job file or config function and command-line overrides."""

    name = FRAMEWORK
    estimate_module = "adapters.torchtitan.estimate"
    estimate_needs = "torchtitan"
    memory_offset = "estimate"
    step_model = "launch"  # the flavour and the parallelism fields, as parsed (estimate/step_model.py)
    last_word = SUBCOMMAND  # 0.3's activation-checkpoint choice stays last

    def __init__(self, base_dir: str | Path | None = None) -> None:
        super().__init__(base_dir)
        self._cache: dict[str, TorchtitanLaunch] = {}
        self._before: dict[int, dict[str, Any]] = {}  # the user's launch as the framework reads it, per parse

    def cost_model_fields(self, contract: Contract) -> dict[str, Any]:
        """torchtitan's training as the step-time model prices it: FSDP2 per block (``dp_sharding = "per_block"``),
        selective AC as the job sets it (0.2.x: ``activation_checkpoint.selective_ac_option``, "op" or every n-th
        block, default "2" in torchtitan 0.2.2's ActivationCheckpoint config; 0.3.x: ``SelectiveAC`` is op-level,
        every second matmul), and llama3's SwiGLU feed-forward with an output layer separate from the embedding;
        eager kernels (no torch.compile) and the job's AdamW implementation (workloads/simulated/eager.py).
        ValueError for other models (their MoE routing and attention are not priced) or an unknown AC option."""
        parsed = self.parsed(contract)
        name = parsed.fixed.get("model_name")
        if name != "llama3":
            raise ValueError(f"model.name = {name!r}: the step-time model prices torchtitan's llama3 flavours only "
                             "(dense, SwiGLU)")
        option = "op" if parsed.style == "cli" else str(
            parsed.values.get("activation_checkpoint.selective_ac_option", SELECTIVE_AC_DEFAULT_02))
        if option != "op" and not (option.isdigit() and int(option) >= 1):
            raise ValueError(f"activation_checkpoint.selective_ac_option = {option!r}: use 'op' or a positive integer "
                             "(every n-th block recomputed)")
        # AdamW's kernels (0.2.2's and 0.3's default "fused"; 0.3's "fused_opt_states_bf16" priced as "fused")
        implementation = str(parsed.values.get("optimizer.implementation", "fused"))
        return {"dp_sharding": "per_block", "selective_recompute": option, "swiglu": True,
                "untie_embeddings_and_output_weights": True, "kernels": "eager",
                "optimizer_implementation": implementation if implementation in ("foreach", "for-loop") else "fused"}

    def parsed(self, contract: Contract) -> TorchtitanLaunch:
        key = contract.model_dump_json(include={"workload", "hardware"})
        if key not in self._cache:
            w = contract.workload
            if w.launch:
                p = launch_path(w, self.base_dir)
                if not p.is_file():
                    raise TorchtitanLaunchError(f"workload.launch {w.launch!r} does not exist (looked at {p})")
                out = parse_torchtitan_file(p, env={**w.script_env, **w.env}, world_size=contract.hardware.devices,
                                            args=w.script_args, cwd=launch_cwd(w, self.base_dir))
            elif w.entrypoint:
                out = parse_torchtitan(w.entrypoint, env=w.env, base_dir=self.base_dir,
                                       world_size=contract.hardware.devices)
            else:
                raise TorchtitanLaunchError("workload: set launch (a TOML job file or launch script) or entrypoint")
            if out.world_size is None:
                out = with_world(out, contract.hardware.devices)
            out.device = contract.hardware.kind
            self._cache[key] = out
        return self._cache[key]

    def knob_space(self, contract: Contract) -> KnobSpace:
        space = torchtitan_trial.with_runtime_knobs(knob_space_for(self.parsed(contract)), contract)
        return scoped_space(space, contract, "torchtitan")

    def full_setting(self, contract: Contract, setting: Mapping[str, Any]) -> dict[str, Any]:
        """The launch's own values, the baseline, ``setting`` (:func:`~infrarsi.adapters.base.full_setting`), with
        ``data_parallel`` following the world size when neither the baseline nor ``setting`` chooses it (a layout
        change keeps the world, as torchtitan's ``-1`` shard degree does)."""
        parsed = self.parsed(contract)
        s = full_setting(parsed.setting, contract, setting)
        world = parsed.world_size or contract.hardware.devices
        if "data_parallel" not in contract.baseline and "data_parallel" not in setting and world:
            derived = data_parallel(world, s["tensor_parallel"], s["pipeline_parallel"], s["context_parallel"])
            if derived:
                s["data_parallel"] = derived
        return s

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        parsed = self.parsed(contract)
        full = self.full_setting(contract, setting)
        spec = emit_torchtitan(parsed, full, world_size=contract.hardware.devices,
                               time_limit_s=contract.invariants.timing.timeout_s)
        if parsed.problems:
            raise TorchtitanLaunchError("; ".join(parsed.problems))
        world = parsed.world_size or contract.hardware.devices
        rejected = check_torchtitan(parsed, spec.argv, env=spec.env, world_size=world) if parsed.style == "toml" else []
        if rejected:  # torchtitan's own word, before any launch
            raise FrameworkRejected("; ".join(rejected))
        setting_now = dict(knob_space_for(parsed).derive(full))
        refused, diffs, self._before[id(parsed)] = check_launch(parsed, spec.argv, spec.env, setting_now,
                                                                world=world, before=self._before.get(id(parsed)))
        if refused:
            raise FrameworkRejected("; ".join(refused))
        raise_if_different(diffs, "the emitted torchtitan launch")  # computes the user's job, or no launch
        return spec

    def trial_form(self, contract: Contract, spec: LaunchSpec, setting: Mapping[str, Any]) -> LaunchSpec:
        """``spec`` (this adapter's launch of ``setting``) as a trial runs it: where the launch's relative paths were
        read from, the kernel patches' launcher, the threads, and on a CPU contract the launcher and the cap
        (trial.py)."""
        if contract.workload.launch:  # it runs where its relative paths were read from
            spec = spec.model_copy(update={"cwd": str(launch_cwd(contract.workload, self.base_dir))})
        full = self.full_setting(contract, setting)
        return torchtitan_trial.trial_spec(spec, contract, full)  # the launcher, the cap, the threads

    def trial_outputs(self, spec: LaunchSpec) -> LaunchSpec:
        """``job.dump_folder`` (checkpoints, TensorBoard, profiles) is the trial's own ``outputs`` folder."""
        return spec.model_copy(update={"argv": torchtitan_trial.dump_folder_in_trial(list(spec.argv))})

    @classmethod
    def read_file(cls, path: Path, text: str, *, world_size: int | None = None) -> TorchtitanLaunch:
        return parse_torchtitan(text, path=str(path), base_dir=path.parent, world_size=world_size)

    @classmethod
    def read_path(cls, path: Path) -> TorchtitanLaunch:
        return parse_torchtitan_file(path)

    @staticmethod
    def launch_space(parsed: TorchtitanLaunch) -> KnobSpace:
        return knob_space_for(parsed)

    @staticmethod
    def launch_violations(parsed: TorchtitanLaunch, *, core: bool = True) -> list[str]:
        return violations(parsed)

    def reread(self, contract: Contract, text: str, files: Mapping[str, str] | None = None) -> TorchtitanLaunch:
        """``text`` read as the contract's launch script is (the same environment, arguments, working directory
        and job-file folder; ``files``: the scripts it runs, edited): what ``apply`` would write, read back."""
        parsed = self.parsed(contract)
        rw = parsed.read_with
        return parse_torchtitan(text, path=str(launch_path(contract.workload, self.base_dir)), env=rw.get("env"),
                                base_dir=parsed.base_dir, args=rw.get("args"), cwd=rw.get("cwd"),
                                world_size=contract.hardware.devices, files=files)

    def differences(self, contract: Contract, setting: Mapping[str, Any], text: str,
                    files: Mapping[str, str] | None = None) -> list[str]:
        """What differs, by torchtitan's reading, between the user's launch and the launch file ``text`` (a
        script, or the job file itself) that the complete ``setting`` does not explain."""
        parsed = self.parsed(contract)
        world = parsed.world_size or contract.hardware.devices
        if parsed.launch is None:  # a bare job file: read the edited copy as torchtitan would
            with tempfile.TemporaryDirectory() as d:
                job = Path(d) / launch_path(contract.workload, self.base_dir).name
                job.write_text(text)
                return compare(parsed, ["--job.config_file", str(job)], parsed.env, setting, world=world)
        q = self.reread(contract, text, files)
        return compare(parsed, q.launch.argv() if q.launch else [], q.env, setting, world=world)

    def reading(self, contract: Contract, text: str, files: Mapping[str, str] | None = None
                ) -> tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]:
        """(program arguments, environment, setting, fixed) of ``text`` read as the launch script (``files``: the
        scripts it runs, edited): what an in-place edit compares."""
        q = self.reread(contract, text, files)
        return q.launch.args if q.launch else [], q.env, q.setting, q.fixed

    def edit(self, contract: Contract, changes: Mapping[str, Any]) -> LaunchTarget:
        """The user's overrides rewritten for ``changes`` (the activation-checkpoint choice last) and the launch's
        environment; for a bare job file, the fields the tuned launch changes in it. A setting that needs the
        project's own launcher (kernel patches; a CPU contract's torchrun) or a derived copy of the job file
        cannot be written into the user's launch."""
        parsed = self.parsed(contract)
        full = self.full_setting(contract, changes)
        spec = emit_torchtitan(parsed, full, world_size=contract.hardware.devices)
        if parsed.launch is None:  # a bare job file: the fields the tuned launch changes go into it
            got = parse_torchtitan_argv(spec.argv, env=spec.env,
                                        base_dir=launch_path(contract.workload, self.base_dir).parent)
            return LaunchTarget(env=spec.env, job_values={k: v for k, v in got.values.items()
                                                          if parsed.values.get(k) != v and k != "job.config_file"})
        if torchtitan_trial.own_launcher(spec, contract, full):
            raise TorchtitanLaunchError("the tuned launch changes the launcher itself; nothing to edit in place")
        n = len(parsed.launch.launcher) + len(parsed.launch.program)
        args = list(spec.argv[n:])
        if any(a.endswith(".toml") and f"/{JOBS_DIR}/" in a for a in args) or \
                f"/{JOBS_DIR}/" in spec.env.get("CONFIG_FILE", ""):
            raise TorchtitanLaunchError("the tuned setting changes the job file itself (an empty model.converters); "
                                        "edit it by hand: set converters = [] in its [model] table")
        return LaunchTarget(args=args, env=spec.env)

    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        parsed = self.parsed(contract)
        gbs, seq = parsed.fixed.get("global_batch_size"), parsed.fixed.get("seq_length")
        return parse_torchtitan_output(stdout, stderr, returncode, warmup_steps=contract.invariants.timing.warmup_steps,
                                       measured_steps=contract.invariants.timing.measured_steps,
                                       world_size=parsed.world_size or contract.hardware.devices,
                                       tokens_per_step=(gbs * seq) if gbs and seq else None,
                                       cpu=contract.hardware.kind.lower() == "cpu",
                                       final_step=parsed.fixed.get("train_iters"))
