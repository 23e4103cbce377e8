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

from ..fakestep.result import EstimateError

if TYPE_CHECKING:
    from ..contract.model import Contract


def minigpt_argv(contract: Contract, setting: Mapping[str, Any], *, iters: int = 2) -> tuple[list[str], dict[str, str]]:
    """The trial's argv and environment as the contract's adapter (minigpt's) launches ``setting``."""
    from ..adapters import get_adapter

    ad = get_adapter(contract.workload.adapter)
    full = ad.knob_space(contract).complete(dict(setting))
    spec = ad.trial_form(contract, ad.launch(contract, full), full)  # it runs as a trial does
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


# The sizes fakestep/overhead.py's constants are measured at (its docstring says why).
TINY = {"num_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "seq_length": 16, "vocab_size": 64,
        "global_batch_size": 1}
MEDIUM = {"num_layers": 2, "hidden_size": 192, "num_attention_heads": 6, "seq_length": 512, "vocab_size": 512,
          "global_batch_size": 8}


def _resized(contract: Contract, args: dict[str, Any]) -> Any:
    wl = contract.workload.model_copy(update={"args": {**contract.workload.args, **args}})
    return contract.model_copy(update={"workload": wl})


def calibrate(contract: Contract = None, threads: tuple[int, ...] = (1, 2)) -> dict[str, float]:
    """Measure ``BASE`` (per threads and dtype) and ``FRAGMENTATION`` of :mod:`infrarsi.fakestep.overhead` on this
    machine; returns them by name."""
    from pathlib import Path

    from ..contract.model import load_contract
    from .minigpt import estimate

    if contract is None:
        contract = load_contract(Path(__file__).resolve().parents[2] / "contracts/minigpt-cpu.toml")
    tiny, medium = _resized(contract, TINY), _resized(contract, MEDIUM)
    out: dict[str, float] = {}
    for t in threads:
        for bf16 in (False, True):
            s = {"micro_batch_size": 1, "intra_op_threads": t, "attention_backend": "auto", "bf16": bf16}
            out[f"base cpu {t} {'bf16' if bf16 else 'fp32'}"] = measured_peak_minigpt(tiny, s) - estimate(tiny, s).tracked_bytes
    s = {"micro_batch_size": 8, "intra_op_threads": 1, "attention_backend": "auto"}
    e = estimate(medium, s)
    transient = e.tracked.get("Activation", 0) + e.tracked.get("Temp", 0)
    out["fragmentation cpu"] = (measured_peak_minigpt(medium, s) - e.tracked_bytes - out["base cpu 1 fp32"]) / transient
    return out
