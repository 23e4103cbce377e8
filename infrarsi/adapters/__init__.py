"""Framework adapters: knob space, launch spec, log parser, failure classifier."""

from .base import Adapter, ParsedRun


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


__all__ = ["Adapter", "ParsedRun", "get_adapter"]
