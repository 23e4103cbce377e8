"""Adapter: what the core needs from a framework. One module per framework under ``adapters/``.

The tuner and the models never know Megatron from torchtitan: adapters translate at the edge.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract.model import Contract
from ..errors import FrameworkRejected  # noqa: F401 -- its old home: adapters raise it, runner and stages catch it
from ..knobs import KnobSpace
from ..trial.launch import LaunchSpec
from ..trial.parsed import ParsedRun


def scoped_space(space: KnobSpace, contract: Contract, framework: str) -> KnobSpace:
    """``space`` restricted to the contract's ``scope.knobs`` (the whole space when the scope names none);
    a knob the framework cannot set is an error that lists the ones it can."""
    if not contract.scope.knobs:
        return space
    unknown = [k for k in contract.scope.knobs if k not in space]
    if unknown:
        raise ValueError(f"scope.knobs names {unknown}, which {framework} cannot set; known: {', '.join(space.names)}")
    return space.restrict(contract.scope.knobs)


class Adapter(abc.ABC):
    name: str = ""
    measured_time: bool = True
    """False when the step times a trial prints are modelled, not measured (the simulated clusters): the
    harness then does not hold them against its own clock (execute/clock.py)."""

    runs_own_program: bool = False
    """The adapter launches its own program (minigpt, the simulated cluster): a ``workload.entrypoint`` must name
    what it launches, or it would be ignored."""
    fixed_flags: tuple[str, ...] = ()
    """Program arguments besides the contract's ``FIXED_WORKLOAD_KEYS`` that define the task (a contract draft
    locks them)."""
    estimate_module: str = ""
    """The module (dotted, under ``infrarsi``, e.g. ``adapters.torchtitan.estimate``) whose ``estimate(contract, setting,
    adapter=...)`` runs one fake step of this framework's real model ("": no pre-flight estimate)."""
    estimate_needs: str = ""
    """The package that estimate imports ("": none beyond torch); without it the run uses the analytical offset."""
    estimate_progress: bool = False
    """Its estimate takes minutes and takes a ``progress`` callback (one line per step of the fake step)."""
    step_model: str = ""
    """Where the step-time model (estimate/step_model.py) reads this framework's model and cluster: "args" (the
    contract's ``[workload.args]``, as the simulated clusters do), "launch" (the model flags of the parsed launch,
    ``parsed(contract).fixed``) or "" (no predicted step time)."""
    memory_offset: str = "analytical"
    """What the run stage's memory model refines by default: "estimate" (the fake step, for trials that cost
    minutes or a GPU allocation) or "analytical" (for trials that cost about what an estimate does)."""

    def __init__(self, base_dir: str | Path | None = None) -> None:
        self.base_dir = Path(base_dir) if base_dir else None
        """The folder the contract's launch files are relative to (None: the working directory)."""

    @classmethod
    def own_knobs(cls) -> list[Any] | None:
        """The knobs of an adapter that runs its own program, whatever the launch (a contract draft offers them);
        None: the catalog's knobs for the launch's workload."""
        return None

    @abc.abstractmethod
    def knob_space(self, contract: Contract) -> KnobSpace:
        """The knobs this workload exposes, restricted to the contract's scope."""

    @abc.abstractmethod
    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        """The launch for one setting (a kernel candidate is the value of its ``kernel_<op>`` knob)."""

    @abc.abstractmethod
    def parse(self, contract: Contract, stdout: str, stderr: str, returncode: int | None) -> ParsedRun:
        """Status, metrics and evidence from a finished trial's output."""

    def batch_launch(self, contract: Contract, setting: Mapping[str, Any], spec: LaunchSpec) -> LaunchSpec:
        """The launch of ``setting`` inside a batch job (what ``apply`` writes into job.sbatch); ``spec``, the
        launch as a person runs it, by default."""
        return spec

    def launch_warnings(self, contract: Contract) -> list[str]:
        """What reading the contract's launch could not check, one line each (a Megatron program's flags with no
        tree to check them against: adapters/megatron/flags.py); ``init`` and ``apply`` print them. [] by default."""
        return []

    def trial_form(self, contract: Contract, spec: LaunchSpec, setting: Mapping[str, Any]) -> LaunchSpec:
        """``spec`` (``launch(contract, setting)``, the launch a person runs) as a trial on this machine runs it
        (a CPU contract's launcher, threads and memory cap; the working directory); ``spec`` by default. Whatever
        runs or measures a trial calls it after ``launch``; whatever reads or writes the user's launch does not."""
        return spec

    def trial_outputs(self, spec: LaunchSpec) -> LaunchSpec:
        """The launch as a trial runs it: where the framework writes (checkpoints, TensorBoard, logs) pointed into
        the trial's directory with ``spec.TRIAL_DIR`` (the repository is read-only to a trial). Only the runner calls
        it: ``launch`` stays the launch a person runs (apply writes it)."""
        return spec


def full_setting(own: Mapping[str, Any], contract: Contract, setting: Mapping[str, Any]) -> dict[str, Any]:
    """The one merge of a trial's values: the launch's ``own`` (what the user's launch sets), then the contract's
    baseline, then ``setting`` (later wins)."""
    return {**own, **contract.baseline, **dict(setting)}


@dataclass(frozen=True)
class LaunchTarget:
    """What the user's launch reads as once a setting is written into it, in the user's own form (the launcher
    and program as the user wrote them: no trial rewrite, no trial outputs, no working directory): the program
    arguments after the launcher and program, and the launch's environment; for a launch that is a bare job file,
    the job-file fields to set instead (``"section.field" -> value``)."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    job_values: dict[str, Any] | None = None


class LaunchFileAdapter(Adapter):
    """An adapter that reads the user's own launch file (``workload.launch``: a script or a job file) and can read
    an edited copy back: what ``knobs`` describes, what ``apply`` edits in place and checks."""

    has_framework_check: bool = False
    """:meth:`launch_violations` with ``core`` also puts the setting to the framework's own config code (seconds:
    it imports torch), beyond the catalog's rules."""
    framework_check_by: str = ""
    """What that check runs, in words, for the line that says it is running ("its own config code")."""
    extra_env_keys: frozenset[str] = frozenset()
    """Environment variables an in-place edit may set besides the knobs' own (the catalog's ``Knob.env``)."""
    last_word: str = ""
    """A regex for the start of the program argument that stays last in the launch command (an in-place edit adds
    flags before it and changes it where it stands); "": none."""

    @abc.abstractmethod
    def parsed(self, contract: Contract) -> Any:
        """The user's launch as this framework reads it (cached per contract)."""

    def full_setting(self, contract: Contract, setting: Mapping[str, Any]) -> dict[str, Any]:
        """Every knob a launch of ``setting`` runs with: :func:`full_setting` over the launch's own values (what
        :meth:`parsed` read). The one merge for a launch file; ``Workload.full_setting`` asks it here."""
        return full_setting(self.parsed(contract).setting, contract, setting)

    @abc.abstractmethod
    def reread(self, contract: Contract, text: str, files: Mapping[str, str] | None = None) -> Any:
        """``text`` read as the contract's launch file is read (its environment, arguments, working directory);
        ``files``: the texts of the scripts it runs (path -> text), read instead of the disk's (an edit of them)."""

    @abc.abstractmethod
    def differences(self, contract: Contract, setting: Mapping[str, Any], text: str,
                    files: Mapping[str, str] | None = None) -> list[str]:
        """What differs, by the framework's reading, between the user's launch and the launch file ``text`` (and
        ``files``, as :meth:`reread`) that the complete ``setting`` does not explain ([] when it computes the
        user's job)."""

    @abc.abstractmethod
    def reading(self, contract: Contract, text: str, files: Mapping[str, str] | None = None
                ) -> tuple[list[str], dict[str, str], dict[str, Any], dict[str, Any]]:
        """(program arguments, environment, setting, fixed) of ``text`` read as the launch file (``files``: as
        :meth:`reread`)."""

    def model_shape(self, contract: Contract) -> dict[str, Any]:
        """The model's shape as the analytical memory estimate reads it (Megatron's names), from the launch; {}
        when the framework's launch does not speak those names."""
        return {}

    def cost_model_fields(self, contract: Contract) -> dict[str, Any]:
        """How this framework trains, as the step-time model prices it (estimate/step_model.py): fields of
        ``SimWorkload`` (``dp_sharding``, ``selective_recompute``) and of its ``ModelSpec`` the launch implies rather
        than states (``swiglu``, ``untie_embeddings_and_output_weights``); {}: Megatron's defaults and the launch's
        own model flags. ValueError (one line, naming the field) for a launch the model cannot price."""
        return {}

    launch_setting_is_baseline: bool = False
    """A contract without a ``[baseline]`` is estimated at the knobs its launch sets (its flags), not at the
    catalog's defaults."""

    @abc.abstractmethod
    def edit(self, contract: Contract, changes: Mapping[str, Any]) -> LaunchTarget:
        """The user's launch (as :meth:`parsed` read it) with the knob ``changes`` written in: what ``apply`` makes
        the user's files read as, where each knob is written (:mod:`infrarsi.apply.launch_edit`). ``changes``:
        the tuned setting as :meth:`launch` takes it, merged with the launch's own values as :meth:`launch` merges
        them. Never the trial's form. ValueError (one line) when the change cannot be written into the user's
        launch (e.g. it needs a launcher of the project's own)."""

    def env_keys(self) -> set[str]:
        """The environment variables the knobs of this framework are (its spelling takes the catalog's environment
        knobs), and :attr:`extra_env_keys`."""
        from ..knobs.catalog import knobs_for
        from .registry import spec

        spelling = spec(self.name).spelling
        return set(spelling.env_vars(knobs_for(spelling))) | set(self.extra_env_keys)

    def describe(self, contract: Contract, *, core: bool = True) -> dict[str, Any]:
        """What ``infrarsi knobs`` shows for the contract's launch, as :meth:`describe_file` gives it."""
        return self.describe_launch(self.parsed(contract), core=core)

    @classmethod
    def describe_file(cls, path: Path, text: str, *, world_size: int | None = None, core: bool = True) -> dict[str, Any]:
        """What ``infrarsi knobs`` shows for a bare launch file ``text`` at ``path`` (its relative paths from its
        own folder; ``world_size`` where it does not say)."""
        return cls.describe_launch(cls.read_file(path, text, world_size=world_size), core=core)

    @classmethod
    @abc.abstractmethod
    def read_file(cls, path: Path, text: str, *, world_size: int | None = None) -> Any:
        """A bare launch file's ``text`` read as this framework reads it (no contract; paths from its folder)."""

    @classmethod
    @abc.abstractmethod
    def read_path(cls, path: Path) -> Any:
        """The launch file at ``path`` read as this framework reads it, with no environment and no contract."""

    @staticmethod
    @abc.abstractmethod
    def launch_space(parsed: Any) -> KnobSpace:
        """The catalog's space for a launch read by :meth:`read_file` or :meth:`read_path`."""

    @staticmethod
    @abc.abstractmethod
    def launch_violations(parsed: Any, *, core: bool = True) -> list[str]:
        """Every problem with a launch's own setting: the catalog's rules, then (``core``, where
        :attr:`has_framework_check`) the framework's own config code."""

    @classmethod
    def describe_launch(cls, parsed: Any, *, core: bool = True) -> dict[str, Any]:
        """framework, fixed, setting (one key per knob of the space), spelling (knob -> how the framework writes it:
        a flag, a field, ``env:VAR``; a knob it derives from others has none), violations, world_size, space, notes,
        warnings (what the reader could not check, e.g. flags with no parser to check them against), parsed."""
        from .registry import spec

        space = cls.launch_space(parsed)
        table = spec(cls.name).spelling
        written = {k.name: table.written(k) for k in space.knobs}
        return {"framework": cls.name, "fixed": dict(parsed.fixed),
                "setting": {k.name: parsed.setting.get(k.name) for k in space.knobs},
                "spelling": {n: w for n, w in written.items() if w is not None},
                "violations": cls.launch_violations(parsed, core=core), "world_size": parsed.world_size,
                "space": space, "notes": list(parsed.notes), "warnings": list(getattr(parsed, "warnings", ())),
                "parsed": parsed}
