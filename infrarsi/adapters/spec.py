"""FrameworkSpec: what the project knows of one framework, in one frozen value per framework.

Each framework declares its spec in its own folder (``adapters/<framework>/spec.py``; minigpt and the simulated
clusters in their single modules, ``adapters/minigpt.py`` and ``adapters/simulated.py``) and the registry
(``adapters/registry.py``) lists it in one line. Callers outside ``adapters/<framework>/`` ask the spec (through the
registry or a Workload), never compare a framework's name:

* ``adapter``: where the adapter class lives, ``"module:Class"`` under ``infrarsi.adapters`` (imported on first use);
* ``claims(argv)``: whether a command line (launcher included, as ``launch/command.split_launcher`` splits it) runs
  this framework's training program; ``job_suffixes``: file suffixes that are this framework's job file (``.toml``);
  ``looks_for``: what that is, in words (the error when no framework claims a launch file);
* ``drafts(program, flags)``: whether a launch read literally (a lower-cased program, its ``--flag value`` pairs)
  looks like this framework's, for a contract draft when the adapter's own parser cannot read it; ``drafts_any``:
  the framework a draft falls back to when no other claims it;
* ``rewrite_profile(argv, setting, env, cwd)``: ``infrarsi-launch``'s rewrite of a command for a promoted profile,
  -> (the launch, rule violations); None: the framework has no command to rewrite;
* ``spelling``: how it writes the catalog's knobs (``knobs.spelling.Spelling``: knob -> flag or field, its defaults and
  domains where they differ), the one table of them, in its own folder;
* ``flops_convention``: how its logs count model FLOPs (``transformer.Transformer.flops_per_token``);
* ``fidelity(parsed, settings, refused, world=, why=)``: its fidelity count (:mod:`.fidelity`: round trips and false
  refusals, by its own config code); None: it emits no launch file to read back;
* ``step_pricing``: how the step-time model (``estimate/step_model.py``) prices its training (:class:`StepPricing`);
  None: it prices no job of this framework's own;
* ``simulated``: its trials' step times are modelled, not measured (a what-if cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..knobs.spelling import Spelling
from ..transformer import FlopsConvention

if TYPE_CHECKING:
    from ..trial import LaunchSpec
    from .fidelity import Counts

ProfileRewrite = Callable[[list[str], Mapping[str, Any], Mapping[str, str], "str | Path"], "tuple[LaunchSpec, list[str]]"]


def _never(*_: Any) -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class StepPricing:
    """How the step-time model prices one way of training (``SimWorkload.dp_sharding``), above the per-GPU work
    where the model is optimistic (estimate/step_model.py's CALIBRATED_MIN): the interval it was checked to, the
    knobs it reads beyond ``SIM_KNOBS``, and what a launch of this framework sets that it cannot price."""

    dp_sharding: str  # "per_iteration" (data parallelism reduced once per iteration) or "per_block" (FSDP2's)
    regime: str  # the regime a prediction names ("calibrated")
    interval: tuple[float, float]  # measured / predicted step time, (low, high)
    source: str  # where the interval comes from, one line
    reads: tuple[str, ...] = ()  # knobs the model reads beyond SIM_KNOBS
    unread_as: str  # what a knob it does not read is priced as ("as at ...")
    refuses: Mapping[str, str] = field(default_factory=dict)  # a model field of the parsed launch -> why it is not
    # priced, naming it as the launch spells it


@dataclass(frozen=True, kw_only=True)
class FrameworkSpec:
    name: str
    title: str = ""  # how prose names it ("Megatron"); default: name
    adapter: str  # "module:Class" under infrarsi.adapters
    claims: Callable[[list[str]], bool] = _never
    job_suffixes: tuple[str, ...] = ()
    looks_for: str = ""  # what detection looks for, in words ("" : not detected from a launch file)
    drafts: Callable[[str, Mapping[str, Any]], bool] = _never
    drafts_any: bool = False
    rewrite_profile: ProfileRewrite | None = None
    spelling: Spelling = field(default_factory=Spelling)  # knob -> its flag or field (adapters/<fw>/spelling.py)
    flops_convention: FlopsConvention  # how its logs count FLOPs (transformer.CAUSAL_MATMULS, FULL_ACTIVE)
    fidelity: Callable[..., Counts] | None = None  # adapters/<framework>/fidelity.py's counts
    step_pricing: StepPricing | None = None
    simulated: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"FrameworkSpec name {self.name!r}: use a Python identifier (the contract's "
                             "workload.adapter)")
        if not self.title:
            object.__setattr__(self, "title", self.name)
        if self.adapter.count(":") != 1:
            raise ValueError(f"FrameworkSpec {self.name}: adapter={self.adapter!r}; write it as 'module:Class'")
