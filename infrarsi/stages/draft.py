"""Drafting a contract from a plain-language request and a launch script.

``draft_contract(request, launch, llm=...)`` returns contract TOML, already checked with
``Contract.model_validate``. Offline (the default when no endpoint is configured, and the fallback
when the LLM's draft fails validation twice) the draft is deterministic:

* workload: the adapter guessed from the launch's program (``pretrain_gpt.py`` -> megatron,
  ``infrarsi.workloads.minigpt`` -> minigpt, torchtitan's ``--job.config_file`` -> torchtitan) and the
  fixed workload arguments parsed from its command line (``contract.model.FIXED_WORKLOAD_KEYS`` plus
  the adapter's own fixed flags);
* hardware: devices from the launcher (torchrun ``--nproc_per_node x --nnodes``, srun tasks), the
  device kind and memory from the request ("8 H100s", "80 GB"), else a guess marked for review;
* scope: every knob the adapter exposes with its domain, minus the topics the request puts off limits
  ("don't touch the data pipeline" removes num_workers; "keep the parallel layout" removes the
  parallel degrees; "no kernel changes" empties scope.files and the kernel_* knobs);
* baseline: the knob values the launch already sets; budget: "N trials" / "N hours" from the request.

An LLM draft is held to the request and to the referee:

* it keeps the parsed workload arguments exactly, and no variable of ``workload.script_env`` or
  ``workload.env`` may change them as the adapter reads the launch (the variable a script reads for the
  global batch is a knob that would change the task: contract.invariants.env_violations);
* it may tighten the loss, timing and spot-check settings, never loosen them below the defaults, nor let
  unisolated trials promote (``invariants.isolation.allow_unisolated``)
  (:data:`FLOOR`; ``INFRARSI_SPOT_EVERY`` only 1..the default, no other ``INFRARSI_*`` variable);
* it names only known knobs and values, and nothing the request puts off limits;

otherwise its errors are fed back once, then the offline draft is used. A draft that passes may still widen
the scope beyond what the request asks for (a knob, a value or a file glob the offline draft, which follows
the request, does not have): :func:`widenings` lists each; ``--yes`` refuses to lock such a draft, and without
``--yes`` the list is shown for the user's confirmation. Nothing here locks a contract: ``infrarsi init`` does
that, and only with ``--yes`` or on a reviewed file.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..contract.model import FIXED_WORKLOAD_KEYS, Contract, Loss, Timing
from ..knobs import Knob
from ..priors import llm as llm_mod
from ..priors.llm import LLMConfig

log = logging.getLogger("infrarsi.priors")

# Topics a request can put off limits: (pattern, knob names or name prefixes ending in "*").
TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"data[ -]?(pipeline|loader|loading)|dataloader|input pipeline|num[_ ]workers", ("num_workers",)),
    (r"parallel(ism)?\b(?! ?(attention|optimizer))|\btp\b|\bpp\b|\bcp\b|\bep\b|sharding|topology|layout",
     ("tensor_parallel", "pipeline_parallel", "virtual_pipeline", "context_parallel", "expert_parallel",
      "data_parallel", "sequence_parallel")),
    (r"precision|fp8|bf16|numerics|dtype", ("bf16", "fp8_recipe")),
    (r"nccl|network|env(ironment)?( var(iable)?s?)?\b", ("nccl_*",)),
    (r"overlap", ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "async_tp")),
    (r"recompute|recomputation|checkpointing", ("recompute_granularity", "recompute_method", "recompute_num_layers")),
    (r"kernel|source code|\bcode\b|patch", ("kernel_*",)),
    (r"compile", ("torch_compile", "async_tp")),
    (r"optimi[sz]er", ("distributed_optimizer", "adam_impl", "cpu_offload")),
    (r"offload", ("cpu_offload",)),
    (r"\bgc\b|garbage", ("manual_gc",)),
    (r"attention", ("attention_backend",)),
    (r"\bmoe\b|expert", ("moe_token_dispatcher", "moe_grouped_gemm", "expert_parallel")),
    (r"micro[- ]?batch", ("micro_batch_size",)),
    (r"thread", ("intra_op_threads",)),
)
_NEGATION = re.compile(
    r"\b(don'?t|do not|never|not|no|without|avoid|leave\b.*\balone|keep\b.*\b(fixed|as[- ]is|unchanged|same)|"
    r"must not|shouldn'?t|can'?t|cannot)\b"
)
_GPUS = (  # device kind, memory GiB per device
    (r"gb200|b200", "B200-180GB", 180.0), (r"h200", "H200-141GB", 141.0), (r"h100|h800", "H100-80GB", 80.0),
    (r"a100.{0,6}40", "A100-40GB", 40.0), (r"a100", "A100-80GB", 80.0), (r"l40s?", "L40S-48GB", 48.0),
    (r"mi300x", "MI300X-192GB", 192.0), (r"\bcpu\b", "cpu", 0.75),
)


# ------------------------------------------------------------------------------------ the launch
@dataclass
class ParsedLaunch:
    adapter: str
    program: str  # the program (script or -m module) as written
    fixed: dict[str, Any] = field(default_factory=dict)  # Megatron names, underscores
    flags: dict[str, Any] = field(default_factory=dict)  # every other --flag: value (True for switches)
    world_size: int | None = None
    notes: list[str] = field(default_factory=list)
    setting: dict[str, Any] | None = None  # catalog knob values, when the adapter's own parser read the launch
    knobs: list[Knob] | None = None  # the adapter's knob space for this launch, likewise


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _args_to_dict(args: list[str]) -> dict[str, Any]:
    """``--num-layers 32 --bf16 --lr=3e-4`` -> {"num_layers": 32, "bf16": True, "lr": 0.0003}."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, _, inline = a[2:].partition("=")
            key = name.replace("-", "_").replace(".", "__") if not name.startswith("job.") else name
            if inline:
                out[key] = _value(inline)
                i += 1
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                vals = []
                j = i + 1
                while j < len(args) and not args[j].startswith("--"):
                    vals.append(_value(args[j]))
                    j += 1
                out[key] = vals[0] if len(vals) == 1 else vals
                i = j
            else:
                out[key] = True
                i += 1
        else:
            i += 1
    return out


def parse_launch(path: Path) -> ParsedLaunch:
    """The launch read by its adapter's own parser (Megatron, torchtitan) when that succeeds, else by
    :func:`parse_command` (the last training command's ``--flag value`` pairs)."""
    from ..adapters import adapter_class
    from ..adapters.base import LaunchFileAdapter

    generic = parse_command(path)
    cls = adapter_class(generic.adapter)
    if not issubclass(cls, LaunchFileAdapter):
        return generic
    try:
        mp = cls.read_path(path)
        return ParsedLaunch(adapter=generic.adapter, program=generic.program, fixed=dict(mp.fixed), flags=generic.flags,
                            world_size=mp.world_size, notes=list(mp.notes), setting=dict(mp.setting),
                            knobs=list(cls.launch_space(mp).knobs))
    except (ValueError, OSError) as e:  # the adapter's parser refused the script: say why, keep the generic read
        generic.notes.append(f"the {generic.adapter} adapter could not read the launch ({e}); args read literally")
        return generic


def parse_command(path: Path) -> ParsedLaunch:
    """The training command in a launch script (or a one-line command file), split into its parts."""
    text = Path(path).read_text()
    argv: list[str] = []
    program, args, world = "", [], None
    try:
        from ..launch.chain import follow
        from ..launch.command import is_python, split_launcher

        def runs_program(argv: list[str]) -> bool:  # not a wrapper of another script (srun bash train.sh)
            head = argv[0] if argv else ""
            if not (any(x in head for x in ("torchrun", "srun", "python", "deepspeed")) or is_python(head)):
                return False
            prog = split_launcher(argv).program
            return bool(prog) and Path(prog[0]).name not in ("bash", "sh") and \
                (not prog[0].endswith(".sh") or Path(prog[0]).name == "run_train.sh")

        # the last command that runs a program is the training launch, read through the scripts that run it
        fol = follow(text, path=str(path), env={}, args=None, cwd=None, claims=runs_program)
        if fol.command is not None:
            cmd = fol.command
            ln = split_launcher(cmd.argv, env=cmd.env, sbatch=fol.sbatch, line=cmd.line)
            argv, program, args, world = cmd.argv, " ".join(ln.program), ln.args, ln.world_size
    except Exception as e:  # an unsupported script: fall back to the last line with flags
        log.warning("launch %s: %s; reading its last command line literally", path, e)
    if not argv:
        joined = re.sub(r"\\\n", " ", text)
        lines = [ln for ln in joined.splitlines() if "--" in ln and not ln.lstrip().startswith("#")]
        argv = shlex.split(lines[-1]) if lines else []
        k = next((i for i, w in enumerate(argv) if w.endswith(".py") or w == "-m"), None)
        if k is not None:
            program = " ".join(argv[k:k + 2]) if argv[k] == "-m" else argv[k]
            args = argv[k + (2 if argv[k] == "-m" else 1):]
        for name, val in zip(argv, argv[1:]):
            if name in ("--nproc_per_node", "--nproc-per-node") and val.isdigit():
                world = int(val) * (world or 1)
            if name == "--nnodes" and val.isdigit():
                world = (world or 1) * int(val)
    flags = _args_to_dict(args)
    from ..adapters import adapter_class
    from ..adapters.registry import draft_framework

    adapter = draft_framework(program, flags)

    fixed_keys = set(FIXED_WORKLOAD_KEYS) | set(adapter_class(adapter).fixed_flags)
    fixed = {k: v for k, v in flags.items() if k in fixed_keys}
    notes = [] if program else [f"no training command found in {path}; fill [workload] by hand"]
    return ParsedLaunch(adapter=adapter, program=program, fixed=fixed,
                        flags={k: v for k, v in flags.items() if k not in fixed}, world_size=world, notes=notes)


# ------------------------------------------------------------------------------- knobs and scope
def adapter_knobs(parsed: ParsedLaunch) -> list[Knob]:
    """The knobs the adapter exposes for this workload: its parser's space, else the catalog
    (``infrarsi.knobs.catalog.space_for_fixed``) or ``infrarsi.adapters.minigpt.knobs``."""
    if parsed.knobs is not None:
        return list(parsed.knobs)
    from ..adapters import adapter_class

    own = adapter_class(parsed.adapter).own_knobs()
    if own is not None:
        return own
    from ..adapters.registry import spec
    from ..knobs.catalog import space_for_fixed

    fw = spec(parsed.adapter)
    return list(space_for_fixed(parsed.fixed, world_size=parsed.world_size, spelling=fw.spelling,
                                framework=fw.title).knobs)


def off_limits(request: str) -> set[str]:
    """Knob names (and "prefix*" patterns) that negative clauses of the request put off limits."""
    out: set[str] = set()
    for clause in re.split(r"[.;!?\n]|,\s*(?:but|and)\b|\bbut\b", request.lower()):
        if not _NEGATION.search(clause):
            continue
        for pattern, names in TOPICS:
            if re.search(pattern, clause):
                out.update(names)
    return out


def _excluded(name: str, banned: set[str]) -> bool:
    return name in banned or any(b.endswith("*") and name.startswith(b[:-1]) for b in banned)


def _baseline(parsed: ParsedLaunch, knobs: list[Knob]) -> dict[str, Any]:
    """Knob values the launch sets (the adapter parser's setting, else each knob's flag spelling),
    where they differ from the knob's default."""
    if parsed.setting is not None:
        by_name = {k.name: k for k in knobs}
        return {n: v for n, v in parsed.setting.items() if n in by_name and v is not None and v != by_name[n].default}
    from ..adapters.registry import spec

    spelling = spec(parsed.adapter).spelling
    out: dict[str, Any] = {}
    for k in knobs:
        flag = spelling.get(k.name) or ""
        if not flag.startswith("--"):
            continue
        key = flag[2:].replace("-", "_")
        if key in parsed.flags:
            raw = parsed.flags[key]
            try:
                v = k.coerce(raw if k.kind != "bool" else (True if raw is True else raw))
            except ValueError:
                continue
            if v != k.default:
                out[k.name] = v
    if parsed.flags.get("recompute_activations") is True and "recompute_granularity" not in out:
        out["recompute_granularity"] = "selective"  # Megatron's shorthand
    return out


# --------------------------------------------------------------------------------------- TOML
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string: JSON's escapes are valid TOML


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def to_toml(data: dict[str, Any], comments: dict[str, str] | None = None) -> str:
    """A small TOML writer for contract drafts (tables, scalars, lists). ``comments``: dotted table -> text."""
    comments = comments or {}
    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in d.items() if isinstance(v, dict)}
        if prefix:
            lines.append("")
            for c in comments.get(prefix, "").splitlines():
                lines.append(f"# {c}")
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in subs.items():
            table(f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k), v)

    table("", data)
    return "\n".join(lines).lstrip("\n") + "\n"


# -------------------------------------------------------------------------------------- drafts
def _hardware(request: str, world: int | None) -> tuple[dict[str, Any], list[str]]:
    low = request.lower()
    notes = []
    kind, mem = "", 0.0
    for pat, name, gib in _GPUS:
        if re.search(pat, low):
            kind, mem = name, gib
            break
    m = re.search(r"(\d+(?:\.\d+)?)\s*gi?b\b", low)
    if m:
        mem = float(m.group(1))
    elif kind == "cpu":
        notes.append("memory_capacity_gib 0.75 is the embedded example's per-process cap: set this run's")
    if not mem:
        mem = 80.0
        notes.append("memory_capacity_gib is a guess (80): set it to the per-device memory")
    if not kind:
        kind = "unknown"
        notes.append('kind is unknown: name the device ("H100-80GB") so the bank can compare runs')
    devices = world
    m = re.search(r"(\d+)\s*(?:x\s*)?(?:[a-z0-9-]+\s+)?(?:gpus?|devices|ranks|[abhl]\d{2,3}s?)\b", low)
    if devices is None and m:
        devices = int(m.group(1))
    return {"kind": kind, "devices": max(1, devices or 1), "memory_capacity_gib": mem}, notes


def offline_draft(request: str, launch: Path) -> str:
    """The deterministic draft (see the module doc)."""
    parsed = parse_launch(launch)
    knobs = adapter_knobs(parsed)
    banned = off_limits(request)
    hw, notes = _hardware(request, parsed.world_size)
    notes = parsed.notes + notes
    scope_knobs = {k.name: list(k.domain) for k in knobs if len(k.domain) > 1 and not _excluded(k.name, banned)}
    if not knobs:
        notes.append("the adapter's knob list was not available: scope.knobs is empty (= the whole space); "
                     "remove what the request puts off limits by listing the allowed knobs")
    baseline = {k: v for k, v in _baseline(parsed, knobs).items() if k in scope_knobs or _excluded(k, banned)}
    files = [] if _excluded("kernel_x", banned) else ["kernels/**/*.py"]
    budget: dict[str, Any] = {}
    low = request.lower()
    if m := re.search(r"(\d+)\s*trials", low):
        budget["max_trials"] = int(m.group(1))
    if m := re.search(r"(\d+(?:\.\d+)?)\s*(?:device[- ])?hours?", low):
        budget["max_device_hours"] = float(m.group(1))
    launch_ref = str(Path(launch).resolve())  # absolute: the adapters resolve a relative path from where infrarsi runs
    workload: dict[str, Any] = {"adapter": parsed.adapter, "launch": launch_ref}
    from ..adapters import adapter_class

    if adapter_class(parsed.adapter).runs_own_program:
        workload = {"adapter": parsed.adapter, "entrypoint": "python " + parsed.program}
    workload["args"] = parsed.fixed
    data: dict[str, Any] = {
        "name": re.sub(r"[^A-Za-z0-9_-]+", "-", Path(launch).stem).strip("-") or "draft",
        "workload": workload,
        "hardware": hw,
        "scope": {"files": files, "knobs": scope_knobs},
    }
    if baseline:
        data["baseline"] = baseline
    if budget:
        data["budget"] = budget
    removed = sorted(n for n in banned if any(_excluded(k.name, {n}) for k in knobs) or n.endswith("*"))
    comments = {
        "workload.args": "Fixed: parsed from the launch; these define the task and never change.",
        "scope.knobs": "What the tuner may change." + (f" Off limits per the request: {', '.join(removed)}." if removed else ""),
        "hardware": "\n".join(notes),
    }
    header = [f"# Contract draft for: {request.strip()[:200]}",
              f"# From launch {launch}. Review every section, then: infrarsi init THIS_FILE"]
    text = "\n".join(header) + "\n" + to_toml(data, comments)
    Contract.model_validate(tomllib.loads(text))  # a draft that does not validate is a bug here, not the user's
    return text


class DraftAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    toml: str  # the whole contract as TOML text
    notes: str  # what the reviewer should check


# The referee's floor: (section, field, which way is stricter). A draft may move each only that way.
FLOOR: tuple[tuple[str, str, str], ...] = (
    ("loss", "compare_steps", "higher"), ("loss", "rtol", "lower"), ("loss", "exact_rtol", "lower"),
    ("loss", "spread_factor", "lower"), ("loss", "precision_fraction", "lower"), ("loss", "seed_runs", "higher"),
    ("timing", "measured_steps", "higher"),
)
SPOT_ENV = "INFRARSI_SPOT_EVERY"  # kernels/insitu.py: 1 call in N is spot-checked; 0 = none
SPOT_EVERY_DEFAULT = 50  # insitu.spot_every()'s default: a draft may check more often, never less


def floor_problems(c: Contract) -> list[str]:
    """Where a draft loosens the referee below its defaults: the loss and timing invariants, and the spot checks
    through an environment variable (one line each, naming the field and the floor)."""
    out = []
    defaults = {"loss": Loss(), "timing": Timing()}
    for section, name, stricter in FLOOR:
        v, d = getattr(getattr(c.invariants, section), name), getattr(defaults[section], name)
        if (v < d) if stricter == "higher" else (v > d):
            out.append(f"invariants.{section}.{name} = {v!r} is looser than the referee's floor {d!r}: a draft may "
                       f"only make it {'larger' if stricter == 'higher' else 'smaller'}")
    if c.invariants.isolation.allow_unisolated:
        out.append("invariants.isolation.allow_unisolated = true lets trials that ran without isolation promote a "
                   "candidate: that is the user's choice to write by hand, not a draft's; remove it")
    for where, env in (("workload.env", c.workload.env), ("workload.script_env", c.workload.script_env)):
        for var, val in env.items():
            if var == SPOT_ENV and where == "workload.env":
                every = int(val) if val.strip().isdigit() else -1
                if not 1 <= every <= SPOT_EVERY_DEFAULT:
                    out.append(f"{where}.{var} = {val!r} loosens the kernel spot checks (default: 1 call in "
                               f"{SPOT_EVERY_DEFAULT}; 0 turns them off): a draft may set 1..{SPOT_EVERY_DEFAULT} only")
            elif var.startswith("INFRARSI_"):
                out.append(f"{where}.{var}: infrarsi's own variables are the harness's, not a draft's to set; remove it")
    return out


def widenings(c: Contract, base: Contract, knobs: list[Knob], banned: set[str] = frozenset()) -> list[str]:
    """Every way ``c``'s scope is wider than ``base``'s (the offline draft, which follows the request): a knob it
    does not have (a value other than the baseline's), a value outside its list, a file glob none of its globs
    holds, or an empty knob table (= the adapter's whole space). Each line says when the request forbade it."""
    from ..contract.scope import glob_within

    by_name = {k.name: k for k in knobs}
    out = []

    def off(name: str) -> str:
        return " (the request puts it off limits)" if _excluded(name, banned) else ""

    if base.scope.knobs and not c.scope.knobs:
        out.append(f"scope.knobs is empty, which means every knob of the adapter; the request's scope has "
                   f"{len(base.scope.knobs)}: {', '.join(sorted(base.scope.knobs))}")
    for name, dom in c.scope.knobs.items():
        fixed = base.baseline.get(name, by_name[name].default if name in by_name else None)
        allowed = base.scope.knobs.get(name, [fixed])
        extra = [v for v in dom if v not in allowed]
        if extra:
            what = "is not in the request's scope" if name not in base.scope.knobs else f"widens {allowed}"
            out.append(f"scope.knobs.{name} = {dom!r} {what}{off(name)}")
    code = _excluded("kernel_x", banned)
    for g in c.scope.files:
        if not any(glob_within(g, wide) for wide in base.scope.files):
            why = " (the request puts code changes off limits)" if code else ""
            out.append(f"scope.files {g!r} is wider than the request's {base.scope.files}{why}")
    return out


def _draft_checker(parsed: ParsedLaunch, knobs: list[Knob], *, base: Contract | None = None,
                   banned: set[str] = frozenset(), launch: Path | None = None):
    by_name = {k.name: k for k in knobs}

    def check(ans: DraftAnswer) -> list[str]:
        try:
            data = tomllib.loads(ans.toml)
        except tomllib.TOMLDecodeError as e:
            return [f"toml: not valid TOML: {e}"]
        try:
            c = Contract.model_validate(data)
        except ValidationError as e:
            return [f"toml: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:10]]
        problems = []
        if parsed.fixed and dict(c.workload.args) != parsed.fixed:
            problems.append(f"workload.args must be exactly the launch's fixed arguments {parsed.fixed}; "
                            f"got {dict(c.workload.args)}")
        if c.workload.adapter != parsed.adapter:
            problems.append(f"workload.adapter must be {parsed.adapter!r} for this launch")
        for name, dom in c.scope.knobs.items():
            if by_name and name not in by_name and not name.startswith("kernel_"):
                problems.append(f"scope.knobs.{name}: unknown knob; known: {sorted(by_name)}")
            elif name in by_name:
                bad = [v for v in dom if v not in by_name[name].domain]
                if bad:
                    problems.append(f"scope.knobs.{name}: {bad} not in its domain {list(by_name[name].domain)}")
        problems += floor_problems(c)
        if base is not None:  # what the request forbade is not the draft's to put back
            problems += [w for w in widenings(c, base, knobs, banned) if "off limits" in w]
        if launch is not None and not problems:
            problems += env_problems(c, launch)
        return problems

    return check


def env_problems(c: Contract, launch: Path) -> list[str]:
    """:func:`~infrarsi.contract.invariants.env_violations` for a draft: the launch read by its adapter with the
    draft's environment, against the fixed arguments the draft locks."""
    import inspect

    from ..adapters import get_adapter
    from ..contract.invariants import env_violations

    cls = type(get_adapter(c.workload.adapter))
    if "base_dir" not in inspect.signature(cls.__init__).parameters:
        return []
    try:
        return env_violations(c, cls(base_dir=Path(launch).resolve().parent))
    except (ValueError, OSError) as e:  # the adapter cannot read the launch with this environment
        return [f"workload: the launch does not read with the draft's environment ({' '.join(str(e).split())[:200]})"]


def review(text: str, request: str, launch: Path) -> tuple[list[str], list[str]]:
    """(problems, widenings) of a drafted contract: what no draft may do (loosen the referee, change what the
    workload fixes) and where its scope is wider than the request's."""
    c = Contract.model_validate(tomllib.loads(text))
    base = Contract.model_validate(tomllib.loads(offline_draft(request, launch)))
    parsed = parse_launch(launch)
    return floor_problems(c) + env_problems(c, launch), widenings(c, base, adapter_knobs(parsed), off_limits(request))


def draft_contract(request: str, launch: Path, *, llm: LLMConfig | None = None,
                   record_dir: Path | None = None) -> str:
    """Contract TOML for ``request`` about the training launched by ``launch``, validated.

    ``llm`` None = the environment's endpoint, or the offline draft when none is configured.
    ``record_dir``: the run directory (LLM exchanges go to ``record_dir/llm/``).
    """
    base = offline_draft(request, launch)
    cfg = llm_mod.resolve(llm)
    if cfg is None:
        return base
    parsed = parse_launch(launch)
    messages = [
        {"role": "system", "content": "You write InfraRSI task contracts (TOML) for tuning a training launch without "
         "changing what it computes. Keep [workload.args] exactly as given; restrict [scope] to what the request "
         "allows; use only knobs and values that appear in the starting draft; never loosen [invariants] below "
         "the defaults, and set no variable that changes the workload."},
        {"role": "user", "content": f"Request: {request}\n\nLaunch script ({launch}):\n{Path(launch).read_text()[:6000]}\n\n"
         f"Starting draft (valid):\n{base}\nReturn the revised contract as TOML in `toml`, and what to review in `notes`."},
    ]
    checker = _draft_checker(parsed, adapter_knobs(parsed), base=Contract.model_validate(tomllib.loads(base)),
                             banned=off_limits(request), launch=Path(launch))
    ans = llm_mod.ask(cfg, stage="contract", messages=messages, schema=DraftAnswer, check=checker, record_dir=record_dir)
    if not ans.ok:
        log.warning("LLM contract draft unusable (%s); using the offline draft", ans.error)
        return base
    notes = "".join(f"# {ln}\n" for ln in ans.value.notes.strip().splitlines() if ln.strip())
    return f"# Contract draft (LLM {cfg.model}) for: {request.strip()[:200]}\n{notes}" + ans.value.toml.strip() + "\n"


def draft_path(run_dir: Path) -> Path:
    """Where `infrarsi init --from-request` writes its draft: next to the run directory."""
    run = Path(run_dir)
    return run.parent / f"{run.name}.contract.toml"


def init_from_request(request: str, launch: Path | None, run_dir: Path, *, yes: bool, console: Any, err: Any,
                      llm: LLMConfig | None = None) -> int:
    """The `infrarsi init --from-request` branch: draft, write next to the run dir, lock only with --yes and only a
    draft whose scope is no wider than the request's (a wider one is listed for the user's confirmation)."""
    from rich.markup import escape

    if launch is None or not Path(launch).is_file():
        what = "--launch is required with --from-request" if launch is None else f"--launch {launch}: no such file"
        err.print(f"[bold red]error:[/] {what}; give the launch script the request is about (e.g. --launch train_gpt.sh)")
        return 2
    out = draft_path(run_dir)
    try:
        text = draft_contract(request, Path(launch), llm=llm, record_dir=run_dir)
    except (OSError, ValueError) as e:
        err.print(f"[bold red]error:[/] cannot draft a contract from {launch}: {e}")
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    try:
        problems, wider = review(text, request, Path(launch))
    except (OSError, ValueError) as e:
        err.print(f"[bold red]error:[/] the draft in {out} cannot be checked against the request: {e}")
        return 1
    listed = "".join(f"\n  - {w}" for w in wider)
    if problems:  # no draft may do these, reviewed or not (the LLM's checker already refused them: a bug if here)
        err.print(f"[bold red]error:[/] the draft in {out} is not locked: {problems[0]}"
                  + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""), soft_wrap=True)
        return 1
    if not yes:
        console.print(text, markup=False)
        if wider:
            console.print(f"[bold yellow]the draft widens the scope beyond the request[/]; confirm each before you "
                          f"lock it:{escape(listed)}", soft_wrap=True)
        console.print(f"[bold]draft[/] written to {out} -- review it, then lock it with: "
                      f"infrarsi init {out} --run-dir {run_dir}")
        return 0
    if wider:
        err.print(f"[bold red]error:[/] not locked (--yes): the draft widens the scope beyond the request; review "
                  f"{out}, then lock it with `infrarsi init {out} --run-dir {run_dir}` if you want each of these:"
                  f"{escape(listed)}", soft_wrap=True)
        return 1
    from . import init as stage

    console.print(f"[bold]draft[/] written to {out}; locking it (--yes)")
    return stage.run(out, run_dir, console=console, err=err)
