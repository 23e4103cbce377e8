"""Megatron-LM, one module per part: the flag tables and program-argument readers (:mod:`.args`), the launch
reader and the adapter (:mod:`.adapter`), the writer (:mod:`.emit`), the log parser (:mod:`.log`),
megatron-core's own checks (:mod:`.check`), and the verdict on a launch's flags (:mod:`.flags`) against the parser
of the Megatron tree it runs, read from source (:mod:`.tree`); megatron-core's training as the CPU trials run it
(:mod:`.cpu`) and the pre-flight estimate (:mod:`.estimate`).

The names callers use are re-exported here, imported when first used (``infrarsi.adapters.megatron.X``): a CPU
trial's program (:mod:`.cpu`) imports this package without paying for the adapter's imports (pydantic, the
contract, the catalog)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    **dict.fromkeys(("COUPLED_FLAGS", "FRAMEWORK", "KNOB_FLAGS", "Item", "MegatronAdapter", "MegatronLaunch",
                     "MegatronLaunchError", "emit_megatron", "emit_megatron_args", "knob_env", "knob_space_for",
                     "parse_megatron", "parse_megatron_argv", "parse_megatron_file", "parse_megatron_output",
                     "split_items", "violations"), "adapter"),
    **dict.fromkeys(("FrameworkRejected", "check_megatron", "megatron_core_check", "megatron_parallel_check"), "check"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
