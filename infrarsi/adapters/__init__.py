"""Framework adapters: knob space, launch spec, log parser, failure classifier."""

from .base import Adapter, FrameworkRejected, ParsedRun


def get_adapter(name: str) -> Adapter:
    """The adapter for a contract's ``workload.adapter``."""
    if name == "minigpt":
        from .minigpt import MiniGPTAdapter

        return MiniGPTAdapter()
    if name == "megatron":
        from .megatron import MegatronAdapter

        return MegatronAdapter()
    if name == "torchtitan":
        from .torchtitan import TorchtitanAdapter

        return TorchtitanAdapter()
    if name == "simulated":
        from .simulated import SimulatedAdapter

        return SimulatedAdapter()
    raise ValueError(f"unknown adapter {name!r}; use one of minigpt, megatron, torchtitan, simulated")


def run_adapter(name: str, run_dir) -> Adapter:
    """:func:`get_adapter` for a locked run: adapters that read launch files (Megatron, torchtitan) resolve
    ``workload.launch`` relative to the locked contract's folder, as ``infrarsi init`` checked it."""
    import inspect
    from pathlib import Path

    import json

    from ..rundir import RunDir

    adapter = get_adapter(name)
    if "base_dir" not in inspect.signature(type(adapter).__init__).parameters:
        return adapter
    try:
        path = json.loads(RunDir(run_dir).lock_bytes() or b"")["contract_path"]
    except (ValueError, KeyError, TypeError):
        return adapter
    return type(adapter)(base_dir=Path(path).parent)


__all__ = ["Adapter", "FrameworkRejected", "ParsedRun", "get_adapter", "run_adapter"]
