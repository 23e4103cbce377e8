"""One simulated trial: the setting checked against the space, memory, then (if it fits) the step time with
one reproducible noise draw, TFLOP/s and MFU."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...knobs import Setting
from .layout import _layout, model_flops_per_iteration
from .memory import MemoryBreakdown, _memory
from .space import space_for
from .step_time import _step_time
from .workload import SimWorkload, get_workload

DEFAULT_NOISE_CV = 0.02  # run-to-run step-time CV of a quiet dedicated cluster


@dataclass(frozen=True)
class SimResult:
    """One simulated trial. OOM: ``step_time_s`` is None (as in real life, nothing was measured)."""

    step_time_s: float | None
    peak_memory_bytes: float  # max reserved on the most loaded GPU (the capacity-governed peak)
    oom: bool
    tflops_per_gpu: float | None
    mfu: float | None  # against the bf16 dense peak
    noise_free_step_time_s: float | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    memory: MemoryBreakdown | None = None



def _noise(seed: int | None, key: str, cv: float, n: int = 1) -> list[float]:
    """``n`` multiplicative log-normal factors with mean 1 and coefficient of variation ``cv``."""
    if cv <= 0:
        return [1.0] * n
    rng = random.Random(f"{seed}:{key}") if seed is not None else random.Random()
    sigma = math.sqrt(math.log1p(cv * cv))
    return [math.exp(rng.gauss(-sigma * sigma / 2, sigma)) for _ in range(n)]


def check_setting(workload: str | SimWorkload, setting: Mapping[str, Any]) -> Setting:
    """The setting completed with defaults (and data_parallel derived when missing), or ValueError with every
    violated rule on one line each."""
    w = get_workload(workload)
    space = space_for(w)
    s = dict(setting)
    if "data_parallel" not in s:
        tp, pp, cp = (s.get(k, 1) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))
        s["data_parallel"] = w.world_size // max(1, tp * pp * cp)
    full = space.complete(s)
    bad = space.validate({**full, **{k: v for k, v in s.items() if k not in full}})
    if bad:
        raise ValueError("invalid setting: " + "; ".join(v.message for v in bad))
    return full


def simulate(workload: str | SimWorkload | Mapping[str, Any], setting: Mapping[str, Any], *, seed: int | None = None,
             noise_cv: float = DEFAULT_NOISE_CV, validate: bool = True) -> SimResult:
    """One trial of ``setting`` on ``workload``: the step time (one noisy draw; ``noise_cv=0`` for the
    noise-free model), the peak memory, and OOM (then no step time). ``seed`` makes the noise
    reproducible (different settings still get independent draws). Raises ValueError for a setting that
    breaks the space's rules (Megatron would refuse it at start-up)."""
    w = get_workload(workload)
    s = check_setting(w, setting) if validate else setting
    lay = _layout(w, s)
    mem = _memory(w, lay)
    if mem.oom:
        return SimResult(step_time_s=None, peak_memory_bytes=mem.reserved, oom=True, tflops_per_gpu=None, mfu=None,
                         memory=mem)
    base, phases = _step_time(w, lay)
    key = Setting(s).key() if not isinstance(s, Setting) else s.key()
    t = base * _noise(seed, key, noise_cv)[0]
    tf = model_flops_per_iteration(w.model) / (t * w.world_size)
    return SimResult(step_time_s=t, peak_memory_bytes=mem.reserved, oom=False, tflops_per_gpu=tf / 1e12,
                     mfu=tf / w.spec.peak_bf16_flops, noise_free_step_time_s=base, phases_s=phases, memory=mem)
