"""Ground truth: the peak of a real trial, for comparing with the estimate (tests, benchmarks, calibration).

A real minigpt process is launched exactly as the adapter launches a trial, without the contract's memory cap
(an estimate is checked against what a setting really takes, not against where it would stop) and with as few
iterations as reach the peak (two: the second carries the optimizer state). Its peak is the trial's own figure:
the peak data segment, parsed from the memory line by the same parser trials use.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .result import EstimateError

if TYPE_CHECKING:
    from ..contract.model import Contract


def minigpt_argv(contract: Contract, setting: Mapping[str, Any], *, iters: int = 2) -> tuple[list[str], dict[str, str]]:
    """The trial's argv and environment as the contract's adapter (minigpt's) launches ``setting``."""
    from ..adapters import get_adapter

    ad = get_adapter(contract.workload.adapter)
    spec = ad.launch(contract, ad.knob_space(contract).complete(dict(setting)))
    argv = list(spec.argv)
    i = argv.index("--train-iters")
    argv[i + 1] = str(iters)
    env = {**os.environ, **spec.env}
    env.pop("INFRARSI_MEMORY_CAP_BYTES", None)
    return argv, env


def measured_peak_minigpt(contract: Contract, setting: Mapping[str, Any], *, iters: int = 2, timeout_s: float = 600) -> float:
    """Peak bytes (the busiest rank's) of a real, uncapped minigpt run of ``setting``."""
    return measured_minigpt(contract, setting, iters=iters, timeout_s=timeout_s)[0]


def measured_minigpt(contract: Contract, setting: Mapping[str, Any], *, iters: int = 2,
                     timeout_s: float = 600) -> tuple[float, float]:
    """(peak bytes, median step seconds after the first two iterations, or of all when fewer) of a real run."""
    import statistics

    from ..adapters.minigpt import parse_log  # the reader minigpt's trials are parsed with (adapter.parse)

    argv, env = minigpt_argv(contract, setting, iters=iters)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    log = parse_log(p.stdout)
    if p.returncode != 0 or not log.max_reserved_mb:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise EstimateError(f"the real run of {dict(setting)} failed (exit {p.returncode}): {' | '.join(tail)}")
    steps = [it.step_ms / 1000.0 for it in log.iterations if it.step_ms is not None]
    steps = steps[2:] or steps
    return max(log.max_reserved_mb.values()) * 2**20, statistics.median(steps) if steps else float("nan")
