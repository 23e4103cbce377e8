"""The registry of frameworks: one line per framework, naming the module that holds its :class:`FrameworkSpec`.

Adding a framework is its folder (``adapters/<framework>/`` with ``spec.py``) and its line here. What differs per
framework is asked of the spec: :func:`framework_of` (the one detection of a command line), :func:`framework_of_file`
(of a launch file, read through the scripts it runs) and :func:`draft_framework` (of a launch read literally).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from .spec import FrameworkSpec

# workload.adapter -> the module (under infrarsi.adapters) whose SPEC describes it
SPECS: dict[str, str] = {
    "minigpt": "minigpt",
    "megatron": "megatron.spec",
    "torchtitan": "torchtitan.spec",
    "simulated": "simulated",
}


class DetectError(ValueError):
    """The framework of a launch could not be told; the message says what was looked for."""


@cache
def spec(name: str) -> FrameworkSpec:
    """The spec of a contract's ``workload.adapter``; ValueError names the registered ones."""
    if name not in SPECS:
        raise ValueError(f"unknown adapter {name!r}; use one of {', '.join(SPECS)}")
    s = importlib.import_module(f"infrarsi.adapters.{SPECS[name]}").SPEC
    assert isinstance(s, FrameworkSpec) and s.name == name, f"adapters/{SPECS[name]}: SPEC is not {name!r}'s"
    return s


def specs() -> list[FrameworkSpec]:
    return [spec(n) for n in SPECS]


def framework_of(argv: list[str]) -> str | None:
    """The framework whose training program ``argv`` runs (through its launcher: torchrun, srun, python), or None."""
    return next((s.name for s in specs() if s.claims(argv)), None)


def framework_of_file(path: Path, text: str) -> str:
    """The framework of a launch file (a job file by its suffix; a script read through the scripts it runs), or a
    DetectError naming what was looked for."""
    from ..launch.bash import ScriptError
    from ..launch.chain import follow

    by_suffix = [s.name for s in specs() if path.suffix in s.job_suffixes]
    if by_suffix:
        return by_suffix[0]
    try:
        fol = follow(text, path=str(path), env={}, args=None, cwd=None, claims=lambda a: framework_of(a) is not None)
    except ScriptError as e:
        raise DetectError(str(e)) from None
    if fol.command is not None:
        fw = framework_of(fol.command.argv)
        assert fw is not None
        return fw
    wanted = " or ".join(s.looks_for for s in specs() if s.looks_for)
    raise DetectError(f"{path}: no launch found: expected {wanted}" + (f" ({fol.missed[0]})" if fol.missed else ""))


def draft_framework(program: str, flags: Mapping[str, Any]) -> str:
    """The framework a contract draft names for a launch read literally: the first whose ``drafts`` claims it,
    else the one marked ``drafts_any``."""
    low = program.lower()
    found = next((s.name for s in specs() if s.drafts(low, flags)), None)
    return found or next(s.name for s in specs() if s.drafts_any)


def simulated(name: str) -> bool:
    """Whether a run of ``workload.adapter`` = ``name`` is a what-if cluster (modelled step times, no device time)."""
    return spec(name).simulated


def launch_file_frameworks() -> str:
    """The frameworks whose launch files are read, in words: "Megatron or torchtitan"."""
    return " or ".join(s.title for s in specs() if s.looks_for)


def profile_frameworks() -> tuple[str, ...]:
    """The frameworks ``infrarsi-launch --profile`` can rewrite a command of."""
    return tuple(s.name for s in specs() if s.rewrite_profile is not None)


def adapter_ref(name: str) -> tuple[str, str]:
    module, cls = spec(name).adapter.split(":")
    return module, cls


__all__ = ["DetectError", "SPECS", "adapter_ref", "draft_framework", "framework_of", "framework_of_file",
           "launch_file_frameworks", "profile_frameworks", "simulated", "spec", "specs"]
