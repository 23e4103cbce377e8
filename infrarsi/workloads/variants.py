"""Perturbed simulated clusters: landscapes whose physics the priors and the analytical estimate do not know.

The offline priors (``priors/offline.py``) and the analytical memory estimate share constants and formulas
with the simulator (``workloads/simulated/``), so a search scored only on the simulator measures the priors
as much as the search. A :class:`Variant` draws, from a seed, a cluster that behaves differently:

- hardware: GEMM and attention efficiency x U(0.8, 1.15), HBM x U(0.8, 1.2), NVLink x U(0.6, 1.4),
  InfiniBand x U(0.5, 1.5), kernel-launch time x U(0.5, 2);
- memory constants: activations, transient buffers and the memory outside the allocator each x U(0.6, 1.6),
  weights + optimizer state x U(0.85, 1.25) (what the estimate cannot know: allocator behaviour, buffers,
  workspace sizes);
- compute efficiency per parallel layout: a log-normal factor per (TP, PP) pair and per context-parallel
  and expert-parallel degree (sd 0.05): some layouts map onto the machine better than any formula says;
- two interactions the offline model does not have: two knob pairs drawn at random, each with a random
  log-time effect per value combination (sd 0.06).

Every variant keeps the base workload's space and validity rules and has an exhaustive optimum
(:meth:`Variant.optimum`), so a tuner's pick can be scored as a fraction of it.

    v = Variant("dense70b-h100x64", seed=3)
    r = v.simulate(setting, seed=0, noise_cv=0.02)   # SimResult: step time x factor, perturbed peak
    v.optimum()                                      # Optimum(setting, step_time_s, n_valid, n_oom)
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..knobs import KnobSpace, Setting
from .simulated import (
    DEFAULT_NOISE_CV, MemoryBreakdown, Optimum, SimResult, SimWorkload, _Layout, _layout, _memory, _noise, _step_time,
    check_setting, exhaustive_optimum, get_workload, model_flops_per_iteration, space_for,
)

LAYOUT_SD = 0.05  # log time: per-layout compute efficiency the formulas miss
INTERACTION_SD = 0.06  # log time: per value pair of a random knob pair
# Knobs whose pairs may carry a hidden interaction (the ones every simulated space has).
_PAIRABLE = ("tensor_parallel", "pipeline_parallel", "micro_batch_size", "recompute_granularity",
             "sequence_parallel", "tp_comm_overlap", "distributed_optimizer", "virtual_pipeline",
             "overlap_grad_reduce", "context_parallel")


@dataclass(frozen=True)
class MemoryScales:
    weights: float
    activations: float
    transient: float
    outside: float  # memory outside the caching allocator (context, workspaces, communication buffers)

    def device_used(self, m: MemoryBreakdown) -> float:
        frag = m.reserved / m.allocated if m.allocated else 1.0
        alloc = m.weights_and_optimizer * self.weights + m.activations * self.activations + m.transient * self.transient
        return alloc * frag + (m.device_used - m.reserved) * self.outside

    def reserved(self, m: MemoryBreakdown) -> float:
        frag = m.reserved / m.allocated if m.allocated else 1.0
        return (m.weights_and_optimizer * self.weights + m.activations * self.activations
                + m.transient * self.transient) * frag


@dataclass
class Variant:
    """A seeded perturbation of a simulated workload; see the module docstring."""

    base: str
    seed: int
    memory_bytes: float | None = None  # the device capacity, when not the base GPU's (an OOM-heavy landscape)
    workload: SimWorkload = field(init=False)
    mem: MemoryScales = field(init=False)
    _layout_log: dict[tuple, float] = field(init=False)
    _pairs: list[tuple[str, str, dict[tuple, float]]] = field(init=False)

    def __post_init__(self) -> None:
        rng = random.Random(f"variant:{self.base}:{self.seed}")
        w = get_workload(self.base)
        u = rng.uniform
        spec = w.spec.model_copy(update={
            "gemm_eff": min(0.95, w.spec.gemm_eff * u(0.8, 1.15)),
            "attn_eff_fwd": min(0.9, w.spec.attn_eff_fwd * u(0.8, 1.15)),
            "attn_eff_bwd": min(0.9, w.spec.attn_eff_bwd * u(0.8, 1.15)),
            "hbm_bytes_per_s": w.spec.hbm_bytes_per_s * u(0.8, 1.2),
            "nvlink_bytes_per_s": w.spec.nvlink_bytes_per_s * u(0.6, 1.4),
            "ib_bytes_per_s": w.spec.ib_bytes_per_s * u(0.5, 1.5),
            "launch_bound_s": w.spec.launch_bound_s * u(0.5, 2.0),
        })
        name = f"{w.name}~v{self.seed}"
        if self.memory_bytes is not None:  # the same draws (the same cluster) with another device capacity
            spec = spec.model_copy(update={"memory_bytes": int(self.memory_bytes)})
            name += f"~mem{self.memory_bytes / 2**30:.2f}G"
        # a new model, not model_copy: a copy would carry the base's cached ``spec``
        self.workload = SimWorkload(name=name, model=w.model, gpu=w.gpu, nodes=w.nodes,
                                    doc=w.doc, baseline=w.baseline, gpu_spec=spec)
        self.mem = MemoryScales(weights=u(0.85, 1.25), activations=u(0.6, 1.6), transient=u(0.6, 1.6),
                                outside=u(0.6, 1.6))
        sp = self.space
        self._layout_log = {}
        for key in itertools.product(*(sp[k].domain if k in sp else (1,) for k in ("tensor_parallel", "pipeline_parallel"))):
            self._layout_log[("tp_pp", *key)] = rng.gauss(0.0, LAYOUT_SD)
        for k in ("context_parallel", "expert_parallel"):
            if k in sp:
                for v in sp[k].domain:
                    self._layout_log[(k, v)] = rng.gauss(0.0, LAYOUT_SD) if v != 1 else 0.0
        names = [k for k in _PAIRABLE if k in sp and len(sp[k].domain) > 1]
        self._pairs = []
        for a, b in rng.sample(list(itertools.combinations(names, 2)), 2):
            table = {(x, y): rng.gauss(0.0, INTERACTION_SD) for x in sp[a].domain for y in sp[b].domain}
            self._pairs.append((a, b, table))

    @property
    def name(self) -> str:
        return self.workload.name

    @cached_property
    def space(self) -> KnobSpace:
        return space_for(self.base)

    @property
    def capacity(self) -> float:
        return float(self.workload.spec.memory_bytes)

    @property
    def baseline(self) -> dict[str, Any]:
        return dict(self.workload.baseline)

    def describe(self) -> str:
        a, b = self._pairs[0][:2], self._pairs[1][:2]
        m = self.mem
        return (f"{self.name}: memory x weights {m.weights:.2f}, activations {m.activations:.2f}, transient "
                f"{m.transient:.2f}, outside {m.outside:.2f}; hidden interactions {a[0]} x {a[1]}, {b[0]} x {b[1]}")

    def time_factor(self, s: Mapping[str, Any]) -> float:
        """The multiplier on the simulator's step time for setting ``s``."""
        log = self._layout_log[("tp_pp", s.get("tensor_parallel", 1), s.get("pipeline_parallel", 1))]
        for k in ("context_parallel", "expert_parallel"):
            if k in s:
                log += self._layout_log.get((k, s[k]), 0.0)
        for a, b, table in self._pairs:
            log += table.get((s.get(a), s.get(b)), 0.0)
        return math.exp(log)

    def simulate(self, setting: Mapping[str, Any], *, seed: int | None = None,
                 noise_cv: float = DEFAULT_NOISE_CV) -> SimResult:
        """One trial: as :func:`~infrarsi.workloads.simulated.simulate`, on the perturbed cluster."""
        w = self.workload
        s = check_setting(w, setting)
        lay = _layout(w, s)
        mem = _memory(w, lay)
        used, reserved = self.mem.device_used(mem), self.mem.reserved(mem)
        if used > mem.capacity:
            return SimResult(step_time_s=None, peak_memory_bytes=reserved, oom=True, tflops_per_gpu=None, mfu=None)
        base, phases = self._time(s, lay)
        t = base * _noise(seed, f"{self.name}:{s.key()}", noise_cv)[0]
        tf = model_flops_per_iteration(w.model) / (t * w.world_size)
        return SimResult(step_time_s=t, peak_memory_bytes=reserved, oom=False, tflops_per_gpu=tf / 1e12,
                         mfu=tf / w.spec.peak_bf16_flops, noise_free_step_time_s=base, phases_s=phases)

    def device_used(self, setting: Mapping[str, Any]) -> float:
        """Bytes the setting's peak holds on the device on this cluster (what the capacity is compared with)."""
        s = check_setting(self.workload, setting)
        return self.mem.device_used(_memory(self.workload, _layout(self.workload, s)))

    def step_time(self, setting: Mapping[str, Any]) -> float:
        """Noise-free step seconds of ``setting`` on this cluster, whether or not it fits in memory."""
        s = check_setting(self.workload, setting)
        return self._time(s, _layout(self.workload, s))[0]

    def formula_time(self, setting: Mapping[str, Any], *, drawn: bool = True) -> float:
        """Noise-free step seconds of ``setting`` by the simulator's formulas, without this cluster's hidden per-layout
        efficiencies and knob-pair interactions (``time_factor``), whether or not it fits: on the cluster's drawn
        hardware constants (``drawn=True``: what a model that knew every formula and constant but had not measured
        this cluster's layouts would predict), or on the base workload's nominal ones (``drawn=False``: the formulas
        alone, as a textbook or the offline priors know them)."""
        w = self.workload if drawn else get_workload(self.base)
        s = check_setting(w, setting)
        return _step_time(w, _layout(w, s))[0]

    def _time(self, s: Setting, lay: _Layout) -> tuple[float, dict[str, float]]:
        """(noise-free step seconds, phases) of a checked setting and its layout: the simulator's x the perturbation."""
        base, phases = _step_time(self.workload, lay)
        return base * self.time_factor(s), phases

    def optimum(self, space: KnobSpace | None = None) -> Optimum:
        """The noise-free fastest valid setting (exhaustive), with the counts of valid and OOM settings."""
        return exhaustive_optimum(self.workload, space, device_used=self.mem.device_used, time_factor=self.time_factor)


def family(bases: tuple[str, ...] | list[str], n: int, *, first_seed: int = 0) -> list[Variant]:
    """``n`` variants, the bases taken in turn (seeds first_seed, first_seed + 1, ...)."""
    return [Variant(bases[i % len(bases)], first_seed + i) for i in range(n)]


def true_time(v: Variant, s: Setting) -> float | None:
    """Noise-free step time of ``s`` on ``v`` (None when it does not fit)."""
    return v.simulate(s, noise_cv=0.0).noise_free_step_time_s
