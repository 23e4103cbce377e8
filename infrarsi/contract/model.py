"""The task contract: what is trained, how it is measured, what the tuner may change.

Loaded once, at the edge (TOML -> pydantic). Unknown keys are errors. Every field says what it
means where it is declared. The contract is the referee: the tuner can never win by changing the
workload (model, global batch, sequence length, data) or the measurement (warm-up, window, metric).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from ..errors import ContractError

GiB = 2**30

# Workload arguments that define the task. A setting may never change them (Megatron spelling).
FIXED_WORKLOAD_KEYS = (
    "global_batch_size", "seq_length", "num_layers", "hidden_size", "num_attention_heads",
    "num_query_groups", "ffn_hidden_size", "vocab_size", "num_experts", "moe_router_topk",
    "train_iters", "seed", "data_path", "lr", "tokenizer",
)


# A contract's name becomes a folder (infrarsi-tuned/<name>/, the bank's run id): one plain path component.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# The validation context key under which a loader that may import adapters/ hands in the registered adapter names
# (adapters/registry.py's SPECS): contract/ sits below adapters/ and does not know which frameworks exist.
ADAPTERS = "adapters"


def _adapter_name(v: str, info: ValidationInfo) -> str:
    """A framework's name as the registry spells it (a Python identifier); one of the registered names when the
    loader hands them in (``load_contract(path, adapters=...)``: ``infrarsi init``, ``Workload.of_file``)."""
    names = (info.context or {}).get(ADAPTERS)
    if names is not None and v not in names:
        listed = [repr(n) for n in names]
        words = " or ".join([", ".join(listed[:-1]), listed[-1]] if len(listed) > 1 else listed)
        raise ValueError(f"{v!r} is no registered adapter; use one of {words}")
    if not v.isidentifier():
        raise ValueError(f"{v!r} is no adapter name (a registered framework's name, e.g. 'minigpt')")
    return v


AdapterName = Annotated[str, AfterValidator(_adapter_name)]


class _Section(BaseModel):
    # the docstring under each field is its description (docs/contract.md is generated from them)
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class Workload(_Section):
    adapter: AdapterName
    """Which adapter understands this workload's launch and logs."""
    entrypoint: str = ""
    """The command before the arguments, e.g. "python -m infrarsi.workloads.minigpt"."""
    launch: str = ""
    """A launch script or config file the adapter parses (Megatron/torchtitan), relative to the contract."""
    cwd: str = ""
    """The folder the launch runs from, relative to the contract (default: the git repository that holds the
    contract, else the contract's folder). Relative paths inside the launch (a job file, ``$PWD``) resolve against
    it, as the shell would, in knobs, estimate, trials and apply."""
    args: dict[str, Any] = {}
    """Fixed workload arguments (Megatron names with underscores): never changed by a setting."""
    env: dict[str, str] = {}
    """Environment every trial gets, whatever its adapter (the runner sets it; a variable the adapter sets for a
    setting wins)."""
    script_args: list[str] = []
    """The launch script's positional arguments ($1, $2, ...), as the job passes them (Megatron's examples
    take the checkpoint, vocab and data paths this way)."""
    script_env: dict[str, str] = {}
    """Variables the launch script reads from the job's environment (PWD, SLURM_NNODES, SLURM_JOB_ID, ...):
    used to read the script, never set for trials. PWD defaults to ``cwd``."""
    pass_env: list[str] = []
    """Names of variables of the environment infrarsi runs in that every trial inherits as they are (an isolated
    trial otherwise gets only what the frameworks need: PATH, CUDA_*, NCCL_*, OMP_*, TORCH*, TRITON*, HF_*, SLURM_*,
    ...; docs/isolation.md). Their values are read at each launch and never recorded."""


class Hardware(_Section):
    kind: str = "cpu"
    """A name for the device kind ("cpu", "H100-80GB", ...): recorded in the bank."""
    devices: int = Field(1, ge=1)
    """Devices (processes) available to one trial."""
    memory_capacity_gib: float = Field(gt=0)
    """Per-device memory capacity. On the CPU: each process's data-segment limit (RLIMIT_DATA)."""
    peak_flops: float | None = Field(None, gt=0)
    """Per-device peak FLOP/s for MFU; leave unset when unknown (MFU is then reported as unknown)."""

    @property
    def memory_capacity_bytes(self) -> int:
        return int(self.memory_capacity_gib * GiB)


class Timing(_Section):
    warmup_steps: int = Field(2, ge=0)
    """Steps excluded from the measurement (compile, allocator warm-up)."""
    measured_steps: int = Field(4, ge=1)
    """Steady-state steps measured after the warm-up."""
    metric: Literal["median_step_time"] = "median_step_time"
    """What a trial's time is: the median of the measured steps' wall times."""
    timeout_s: float = Field(600, gt=0)
    """A trial still running after this many seconds is killed and recorded as timeout."""
    pending_timeout_s: float = Field(3600, gt=0)
    """Slurm: a job still waiting in the queue after this many seconds stops the run, which says why
    (the trial stays recorded for a resume). Held jobs are not waited for: they are launched again."""
    startup_allowance_s: float = Field(0.0, ge=0)
    """Seconds of start-up a setting may spend beyond the baseline's (launch to its first step line, plus its
    shutdown: its time outside its steps) without being charged for them per step: what ``torch.compile`` or
    autotuning spends before training. A trial that ran longer outside its steps than the baseline's, this and a
    slack is scored by its end-to-end bound, which counts this much as free (execute/end_to_end.py). No measurement
    tells such a start-up from steps computed before their lines, so this much is trusted: a trial could hide up to
    this / (warmup_steps + measured_steps) seconds of computation per step. 0 (the default): none; a slower start-up
    is charged to the window's steps."""

    @field_validator("startup_allowance_s", mode="before")  # before the bound: this message names the fix
    @classmethod
    def _startup(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not 0 <= v < float("inf"):  # NaN too
            raise ValueError(f"is {v}: seconds of extra start-up a setting may spend, 0 or more (0: none; e.g. 60 for "
                             f"a torch.compile that takes a minute more than the baseline to its first step)")
        return v


class Loss(_Section):
    """The loss referee (infrarsi.contract.numerics): loss and gradient norm, step for step, on the fixed
    data order, against bands the doctor calibrates from the baseline's own spread."""

    compare_steps: int = Field(4, ge=1)
    """The window: how many leading iterations of the loss and grad-norm traces are compared."""
    rtol: float = Field(0.02, gt=0)
    """The precision knobs' band when the doctor could not run the baseline with another seed; also the
    doctor's check that the baseline reproduces its own loss trace."""
    exact_rtol: float = Field(1e-4, gt=0)
    """Floor of the exact knobs' tolerance (fp32 reassociation: a different micro-batch split, kernel)."""
    spread_factor: float = Field(10.0, ge=1)
    """Exact tolerance = max(exact_rtol, spread_factor x the same-seed repeat spread)."""
    precision_fraction: float = Field(0.1, gt=0, le=1)
    """Precision band = max(exact, precision_fraction x the spread between seeds): well inside what a new
    seed does to the training."""
    seed_runs: int = Field(1, ge=0)
    """Baseline runs the doctor makes with seed + 1, + 2, ... to measure the seed spread (needs a `seed`
    workload argument; 0 = none)."""


class Isolation(_Section):
    """Where the trials run (execute/isolation.py): the size of their scratch, and what promotion accepts as evidence."""

    allow_unisolated: bool = False
    """Promote a candidate whose verification pairs include trials that ran without isolation (a Slurm node
    without bubblewrap, a machine without it, INFRARSI_ISOLATION=off). Such a trial could read the run's records
    and the seal key and write outside its directory; the repository and the seals are checked after it, but
    what it read cannot be taken back. Off (the default): such a candidate is not promoted, and the report says
    why."""
    scratch_gib: float = Field(4.0, gt=0)
    """Size of each writable scratch folder of an isolated trial, in GiB (/tmp, /dev/shm, the home folder, a cache
    folder the launch names: each a tmpfs of this size, in memory as it fills). A trial that fills one gets ENOSPC
    there; the disk the runner records on stays free."""


class Invariants(_Section):
    timing: Timing = Timing()
    """How step time is measured."""
    loss: Loss = Loss()
    """How a trial's loss is checked against the baseline's."""
    isolation: Isolation = Isolation()
    """Which trials' evidence promotion accepts."""


class Scope(_Section):
    knobs: dict[str, list[Any]] = {}
    """Knobs the tuner may change, each with its allowed values; empty = the adapter's whole space."""
    files: list[str] = []
    """Globs (relative to the repository) that code patches may write, e.g. "kernels/rmsnorm/*.py"."""


class Budget(_Section):
    max_trials: int = Field(20, ge=1)
    """Search trials `run` makes (the baseline and the re-verification pairs are not counted)."""
    max_device_hours: float = Field(1.0, gt=0)
    """Device time (wall seconds x devices, all trials) after which `run` stops searching."""
    parallel_trials: int = Field(1, ge=1)
    """Trials in flight at once (the executor must have room for them)."""
    doctor_repeats: int = Field(5, ge=2)
    """How many times doctor runs the baseline to measure noise."""
    doctor_max_repeats: int = Field(10, ge=2)
    """How far doctor may raise its baseline repeats (each lowers the minimum detectable effect) when the noise hides
    the speedup ``confirm_speedup`` asks for; past this it stops the run with the noise named."""
    confirm_speedup: float = Field(1.0, gt=0)
    """The relative speedup (1.0 = 2x, 0.2 = 1.2x) the run must be able to confirm: when the measured noise means
    verification could, within ``verify_pairs``, confirm only a larger one, doctor raises its repeats or stops the run
    early, with the figures and the fix. The default stops only a run that could not confirm even 2x."""
    verify_pairs: int = Field(12, ge=3)
    """The most interleaved A/B pairs one candidate's verification runs: pairs are added one by one until the
    sequential interval clears 1 + mde, falls below it, or these run out (verify/speedup.py)."""
    rebaseline_every: int = Field(6, ge=0)
    """Search trials between two runs of the baseline during the search (0: never), so each setting is compared to a
    baseline measured close in time; the baseline also runs again when the machine's load shifts."""
    prune: bool = True
    """Stop a search trial once its measured steps so far show it slower than the best setting so far by more than
    the doctor's detectable effect (a one-sided 95% bound from the doctor's noise and the steps' own spread:
    execute/prune.py); it is recorded ``pruned`` with its step time's lower bound, never promoted. A setting as fast as
    the best is stopped in under 5% of trials (BENCHMARKS.md). false: every trial runs its whole contract."""
    end_at_last_step: bool = True
    """End each trial (the doctor's, the search's, the verification's alike) once every line it is measured by has
    come: the line of its last step (the window's end, the loss check's last step, the process's own last step where
    its lines state it) from every rank that prints one, then a quiet spell of 1 s or a quarter step without a change
    to what its record reads (execute/tail_stop.py); it is recorded as finished, its shutdown (a framework's sleep,
    the process groups' teardown, a checkpoint save, the interpreters' exit) not run. The doctor's warm-up run is
    ended after its first step line (its figures are not data). false: every trial runs to its own exit (a launch
    whose record needs what it prints or writes after its last step)."""
    skip_over_capacity: bool = True
    """Do not launch a setting whose estimated peak (the fake-step estimate, where the contract has one) is above
    capacity by more than the estimate's stated error (search/skip.py); it is recorded ``skipped``."""


class Contract(_Section):
    name: str
    """The job's name: a folder name (infrarsi-tuned/<name>/) and the experience bank's run id."""
    workload: Workload
    """What is trained and how it is launched: fixed for every trial."""
    hardware: Hardware
    """What one trial runs on."""
    invariants: Invariants = Invariants()
    """How a trial is measured and refereed: the tuner cannot change it."""
    scope: Scope = Scope()
    """What the tuner may change."""
    baseline: dict[str, Any] = {}
    """The baseline setting (knobs not named take the adapter's default)."""
    budget: Budget = Budget()
    """How much the search may spend."""

    @model_validator(mode="after")
    def _check(self) -> "Contract":
        if not NAME_PATTERN.fullmatch(self.name) or ".." in self.name:
            raise ValueError(f"name {self.name!r} becomes a folder name (infrarsi-tuned/<name>/): use letters, digits, "
                             f"'.', '_' and '-' only (no '/', no '..', at most 128 characters)")
        for where, table in (("scope.knobs", self.scope.knobs), ("baseline", self.baseline)):
            locked = sorted(set(table) & set(self.workload.args) - set(FIXED_WORKLOAD_KEYS))
            if locked:
                k = locked[0]
                raise ValueError(f"{where} names {k}, which [workload.args] locks to {self.workload.args[k]!r}: a locked "
                                 f"argument cannot be tuned; remove {k} from {where}, or from [workload.args] to tune it")
        for where, table in (("scope.knobs", self.scope.knobs), ("baseline", self.baseline)):
            bad = sorted(set(table) & set(FIXED_WORKLOAD_KEYS))
            if bad:
                raise ValueError(
                    f"{where} names fixed workload argument(s) {bad}: they define the task and cannot be tuned; "
                    f"set them under [workload.args]"
                )
        for name in self.workload.pass_env:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"workload.pass_env lists {name!r}, which is no environment variable's name: use "
                                 f"letters, digits and '_' (not starting with a digit), e.g. pass_env = [\"WANDB_ENTITY\"]")
        # the keys are written unquoted (`export NAME=...` in a trial's sbatch.sh, apply's launch.sh and sbatch.sh):
        # a name that is not a name (a newline, a ';') would write a command of its own there
        for where, table in (("workload.env", self.workload.env), ("workload.script_env", self.workload.script_env)):
            for name in table:
                if not ENV_NAME.fullmatch(name):
                    raise ValueError(f"{where} has the key {name!r}, which is no environment variable's name: use "
                                     f"letters, digits and '_' (not starting with a digit), e.g. OMP_NUM_THREADS")
        for k, dom in self.scope.knobs.items():
            if not dom:
                raise ValueError(f"scope.knobs.{k} is empty; list at least one allowed value")
        return self

    @property
    def fixed(self) -> dict[str, Any]:
        """The fixed workload arguments: these never change."""
        return dict(self.workload.args)


def load_contract(path: str | Path, *, adapters: Collection[str] | None = None) -> Contract:
    """Read and validate a contract TOML file. Errors are one line per problem, naming the field. ``adapters``: the
    registered adapter names ``workload.adapter`` must be one of (the caller reads them from adapters/registry.py;
    None: its form only is checked, as for a contract already locked by ``infrarsi init``)."""
    p = Path(path)
    if p.is_dir():
        raise ContractError(f"contract {p} is a directory; pass the .toml contract file itself (see contracts/)")
    if not p.is_file():
        raise ContractError(f"contract file {p} does not exist; pass the path to a .toml contract (see contracts/)")
    try:
        data = tomllib.loads(p.read_text())
    except UnicodeDecodeError as e:
        raise ContractError(f"{p}: not a text file (byte 0x{e.object[e.start]:02x} at offset {e.start} is not UTF-8); "
                            f"pass the .toml contract (see contracts/)") from None
    except tomllib.TOMLDecodeError as e:
        raise ContractError(f"{p}: not valid TOML: {e}") from None
    try:
        return Contract.model_validate(data, context=None if adapters is None else {ADAPTERS: tuple(adapters)})
    except ValidationError as e:
        raise ContractError(f"{p}: " + "; ".join(_one_line(err) for err in e.errors())) from None


def _one_line(err: dict[str, Any]) -> str:
    loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown key; remove it or check its spelling"
    if err["type"] == "missing":
        return f"{loc}: required; add it to the contract"
    return f"{loc}: {msg}"
