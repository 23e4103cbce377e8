"""Framework adapters: knob space, launch spec, log parser, failure classifier.

One registry binds a contract's ``workload.adapter`` to its adapter class and, for a contract read from a
file or locked in a run directory, to the contract's folder (``base_dir``): Megatron and torchtitan read
``workload.launch`` relative to it, as ``infrarsi init`` checked it. Every stage builds its adapter here.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Adapter, FrameworkRejected, ParsedRun
    from .registry import SPECS as ADAPTERS  # noqa: F401


def __getattr__(name: str) -> Any:
    """``Adapter``, ``FrameworkRejected`` and ``ParsedRun`` (adapters/base.py) and ``ADAPTERS`` (workload.adapter ->
    the module of its FrameworkSpec: adapters/registry.py), imported when first used: a trial's program under
    ``adapters/<framework>/`` (Megatron's CPU training loop) imports this package without paying for the contract,
    the catalog and the registry."""
    if name == "ADAPTERS":
        from .registry import SPECS

        return SPECS
    if name in ("Adapter", "FrameworkRejected", "ParsedRun"):
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def adapter_class(name: str) -> type[Adapter]:
    """The adapter class for a contract's ``workload.adapter``."""
    from .registry import adapter_ref

    module, cls = adapter_ref(name)
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def get_adapter(name: str, *, base_dir: str | Path | None = None) -> Adapter:
    """The adapter for a contract's ``workload.adapter``; ``base_dir`` is the folder its launch files are
    relative to (None: the working directory)."""
    return adapter_class(name)(base_dir=base_dir)


def contract_adapter(name: str, contract_path: str | Path) -> Adapter:
    """:func:`get_adapter` for the contract in ``contract_path``: launch files relative to its folder."""
    return get_adapter(name, base_dir=Path(contract_path).resolve().parent)


def run_adapter(name: str, run_dir: str | Path) -> Adapter:
    """:func:`get_adapter` for a locked run: bound to the locked contract's folder (the lock's
    ``contract_path``); unbound when the run directory holds no readable lock."""
    from ..rundir import RunDir

    try:
        path = json.loads(RunDir(run_dir).lock_bytes() or b"")["contract_path"]
    except (ValueError, KeyError, TypeError):
        return get_adapter(name)
    return contract_adapter(name, path)


__all__ = ["ADAPTERS", "Adapter", "FrameworkRejected", "ParsedRun", "adapter_class", "contract_adapter", "get_adapter",
           "run_adapter"]
