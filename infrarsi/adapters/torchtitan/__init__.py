"""torchtitan, one module per part: the tables of what torchtitan ships (:mod:`.configs`), the launch reader
(:mod:`.launch`), the writer (:mod:`.emit`), logs and failures (:mod:`.log`), the trial's launcher and caps
(:mod:`.trial`), torchtitan's own config checks (:mod:`.check`, 0.3 through :mod:`.v03`) and the adapter
(:mod:`.adapter`). The names callers use are re-exported here."""

from .adapter import (CONFIGS_03, DEFAULTS_02, DEFAULTS_03, FLAVORS, FRAMEWORK, JOBS_DIR, Override, StepLog,
                      TorchtitanAdapter, TorchtitanLaunch, TorchtitanLaunchError, classify_torchtitan_failure,
                      emit_torchtitan, emit_torchtitan_args, knob_space_for, parse_toml_job, parse_torchtitan,
                      parse_torchtitan_argv, parse_torchtitan_file, parse_torchtitan_log, parse_torchtitan_output,
                      split_overrides, to_metrics, violations, with_world)
from .check import FrameworkRejected, check_torchtitan

__all__ = [
    "CONFIGS_03", "DEFAULTS_02", "DEFAULTS_03", "FLAVORS", "FRAMEWORK", "FrameworkRejected", "JOBS_DIR", "Override",
    "StepLog", "TorchtitanAdapter", "TorchtitanLaunch", "TorchtitanLaunchError", "check_torchtitan",
    "classify_torchtitan_failure", "emit_torchtitan", "emit_torchtitan_args", "knob_space_for", "parse_toml_job",
    "parse_torchtitan", "parse_torchtitan_argv", "parse_torchtitan_file", "parse_torchtitan_log",
    "parse_torchtitan_output", "split_overrides", "to_metrics", "violations", "with_world",
]
