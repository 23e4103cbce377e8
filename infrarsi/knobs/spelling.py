"""Spelling: how one framework writes the catalog's knobs, handed to the catalog by the framework's spec.

Each framework holds its own table in its own place (``adapters/<framework>/spelling.py``, or its single module) and
its :class:`~infrarsi.adapters.spec.FrameworkSpec` names it; ``knobs/`` never looks a framework up. The table maps a
catalog knob's name to the framework's flag (``--tensor-model-parallel-size``) or config field
(``parallelism.tensor_parallel_degree``). A knob the table leaves out is one the framework cannot express: it is
left out of that framework's space, except the knobs every space keeps (``data_parallel``, derived from the world
size where no flag sets it) and those in ``derived``. Environment knobs (``Knob.env``: ``NCCL_ALGO``...) are the
catalog's own, the same variable for every framework whose table says ``env=True``::

    Spelling(flags={"tensor_parallel": "--tensor-model-parallel-size"}, env=True,
             domains={"fp8_recipe": ("none", "delayed")})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .knob import Knob

ENV_PREFIX = "env:"
"""How a knob that is an environment variable is written where a spelling is shown (``env:NCCL_ALGO``)."""


@dataclass(frozen=True, kw_only=True)
class Spelling:
    flags: Mapping[str, str] = field(default_factory=dict)
    """Knob name -> the framework's flag or field (catalog knobs, and the framework's own knobs)."""
    env: bool = False
    """The framework takes the catalog's environment knobs (``Knob.env``) from the launch's environment."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Knob name -> the framework's default, where it differs from the catalog's (what a launch that says nothing
    gets)."""
    domains: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """Knob name -> the values the framework can express, where fewer than the catalog's domain."""
    derived: tuple[str, ...] = ()
    """Catalog knobs the framework sets through others, kept in its space so that a setting says the same thing in
    every framework (tied by a rule of the framework's space)."""

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.flags.items() if not v or v.startswith(ENV_PREFIX)}
        if bad:
            raise ValueError(f"Spelling: {bad}: a flag or field per knob; an environment knob is the catalog's "
                             f"(Knob.env) and is taken with env=True")

    def __contains__(self, name: object) -> bool:
        return name in self.flags

    def get(self, name: str) -> str | None:
        """The flag or field of knob ``name``; None when the table has none."""
        return self.flags.get(name)

    def written(self, knob: Knob) -> str | None:
        """How the framework writes ``knob``: its flag or field, ``env:VAR`` for an environment knob it takes, else
        None (a knob it cannot set, or one derived from others)."""
        if knob.name in self.flags:
            return self.flags[knob.name]
        if self.env and knob.env:
            return f"{ENV_PREFIX}{knob.env}"
        return None

    def expresses(self, knob: Knob) -> bool:
        """Whether the framework's space holds ``knob``: spelled, an environment knob it takes, data parallelism
        (derived from the world size where no flag sets it) or one of :attr:`derived`."""
        return (self.written(knob) is not None or knob.name == "data_parallel" or knob.name in self.derived)

    def env_vars(self, knobs: list[Knob]) -> dict[str, str]:
        """Variable -> knob name for the environment knobs of ``knobs`` the framework takes."""
        return {k.env: k.name for k in knobs if self.env and k.env}
