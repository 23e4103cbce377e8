"""Megatron-LM, one module per part: the flag tables and program-argument readers (:mod:`.args`), the launch
reader and the adapter (:mod:`.adapter`), the writer (:mod:`.emit`), the log parser (:mod:`.log`),
megatron-core's own checks (:mod:`.check`), and the verdict on a launch's flags (:mod:`.flags`) against the parser
of the Megatron tree it runs, read from source (:mod:`.tree`). The names callers use are re-exported here."""

from .adapter import (COUPLED_FLAGS, FRAMEWORK, KNOB_FLAGS, Item, MegatronAdapter, MegatronLaunch, MegatronLaunchError,
                      emit_megatron, emit_megatron_args, knob_env, knob_space_for, parse_megatron, parse_megatron_argv,
                      parse_megatron_file, parse_megatron_output, split_items, violations)
from .check import FrameworkRejected, check_megatron, megatron_core_check, megatron_parallel_check

__all__ = ["COUPLED_FLAGS", "FRAMEWORK", "KNOB_FLAGS", "FrameworkRejected", "Item", "MegatronAdapter", "MegatronLaunch",
           "MegatronLaunchError", "check_megatron", "emit_megatron", "emit_megatron_args", "knob_env", "knob_space_for",
           "megatron_core_check", "megatron_parallel_check", "parse_megatron", "parse_megatron_argv",
           "parse_megatron_file", "parse_megatron_output", "split_items", "violations"]
