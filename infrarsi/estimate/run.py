"""The library call: the estimate for a contract's framework, and the run stage's memory offset."""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..trial.memory_estimate import MemoryEstimate
from ..fakestep.result import Estimate, EstimateError

if TYPE_CHECKING:
    from ..adapters.base import Adapter
    from ..adapters.workload import Workload
    from ..contract.model import Contract
    from ..knobs import KnobSpace


def _adapter(contract: Contract) -> type[Adapter]:
    """The adapter class of ``contract``'s framework: it names its estimate module, what that needs, its offset."""
    from ..adapters import adapter_class

    return adapter_class(contract.workload.adapter)


def unsupported(contract: Contract) -> str | None:
    """Why ``contract``'s framework has no estimate (one line), or None: checked before anything is stepped."""
    from ..adapters import ADAPTERS, adapter_class

    if _adapter(contract).estimate_module:
        return None
    able = [n for n in ADAPTERS if adapter_class(n).estimate_module]
    return f"workload.adapter = {contract.workload.adapter!r}: the estimate runs the real model of {able} only"


def estimate(contract: Contract, setting: Mapping[str, Any], *, adapter: Adapter | None = None,
             **kw: Any) -> Estimate:
    """One rank's peak for ``setting`` of ``contract``'s job (minigpt, torchtitan or Megatron-LM: the adapters
    that name an ``estimate_module``). ``adapter``: the one that reads this contract's launch (a Workload's; its
    parse is reused), else the registry's, unbound (the contract's launch is absolute: :func:`anchored`)."""
    from ..adapters import get_adapter

    cls = _adapter(contract)
    why = unsupported(contract)
    if why:
        raise EstimateError(why)
    ad = adapter if adapter is not None else get_adapter(contract.workload.adapter)
    return importlib.import_module(f"infrarsi.{cls.estimate_module}").estimate(contract, setting, adapter=ad, **kw)


def estimate_workload(workload: Workload, setting: Mapping[str, Any], **kw: Any) -> Estimate:
    """The pre-flight estimate of ``setting`` of ``workload`` with its adapter, the launch and the folder it runs
    from made absolute (:func:`anchored`), so that the estimate reads the launch as trials do."""
    return estimate(anchored(workload.contract, workload.folder), setting, adapter=workload.adapter, **kw)


# Which offset the run stage's memory model refines: "estimate" (this package) or "analytical" (priors/offline.py).
# Default: the estimate for torchtitan and Megatron-LM, whose trials cost minutes (or a GPU allocation), and the
# analytical model for minigpt, whose trials (seconds) cost about what its estimates do (~3 s per distinct memory
# layout on 2 cores).
OFFSET_ENV = "INFRARSI_MEMORY_OFFSET"

# Knobs that change no tensor of the step (the estimate runs eager reference ops; threads are OMP_NUM_THREADS):
# left out of the cache key.
_NOT_MEMORY = ("torch_compile", "nccl_", "kernel_", "num_workers", "manual_gc", "intra_op_threads")


def anchored(contract: Contract, contract_dir: str | Path | None) -> Contract:
    """``contract`` with ``workload.launch`` and ``workload.cwd`` made absolute where they are found from
    ``contract_dir`` (the contract's folder: ``contract/place.py``'s rule), so that an adapter bound to no folder
    reads the launch as the run does; unchanged when ``contract_dir`` is None or the workload names no launch."""
    from ..contract.place import launch_cwd, launch_path

    w = contract.workload
    if not w.launch or contract_dir is None:
        return contract
    wl = w.model_copy(update={"launch": str(launch_path(w, contract_dir).resolve()),
                              "cwd": str(launch_cwd(w, contract_dir))})
    return contract.model_copy(update={"workload": wl})


def offset_kind(contract: Contract) -> str:
    raw = os.environ.get(OFFSET_ENV, "").strip().lower()
    if raw and raw not in ("estimate", "analytical"):
        raise EstimateError(f"{OFFSET_ENV}={raw!r}: expected 'estimate' or 'analytical'")
    return raw or _adapter(contract).memory_offset


# How far the memory model may move a setting's peak away from this estimate (log scale), for the tuner's priors
# on the memory coefficients (search/tuner.py; the analytical estimate's are RESIDUAL_MEM_SD = 0.1 there).
# Main effects: the fake step's error on real 2-rank torchtitan.train trials of contracts/torchtitan-cpu.toml is
# at most 3.9% where it models the layout (AC modes, local batch, parameter dtype) and -10.0% for TP 2 (gloo and
# DTensor buffers it does not see), 3.7% rms over the nine runs of `scripts/bench_estimate.py
# --calibrate-torchtitan` (BENCHMARKS.md): 0.05. Interactions (micro-batch x activation checkpointing, per doubling
# of the micro-batch from the knob's first value): the fake step runs each pair itself, so only what its arithmetic
# misses is left; AC none's error is -0.4% at local batch 4 and -0.3% at 8: 0.01 per doubling. (With the analytical
# estimate's 0.1 per doubling, AC none at local batch 8, two doublings from 2, carried sd 0.22 on the log scale.)
FAKE_STEP_RESIDUAL_SD = 0.05
FAKE_STEP_INTERACTION_SD = 0.01

BUDGET_ENV = "INFRARSI_ESTIMATE_BUDGET_S"
DEFAULT_BUDGET_S = 300.0


def memory_estimator(space: KnobSpace, contract: Contract, *, fallback: Callable[[Mapping[str, Any]], float] | None = None,
                     on_error: Callable[[str], None] | None = None, budget_s: float | None = None,
                     adapter: Adapter | None = None) -> MemoryEstimate | None:
    """setting -> per-rank peak bytes from the real model's fake step, for the run stage's memory model (the
    same contract as ``priors.offline.memory_estimator``: the model learns the residual). None when the offset is
    "analytical" for this contract or the framework cannot be estimated. Cached per memory layout; a setting the
    estimate cannot build (an ``EstimateError``, or a fake step that fails inside the framework, e.g. DDP's
    parameter check on fake tensors) gets ``fallback`` (the analytical figure, times the median ratio below once
    there is one), reported once through ``on_error``.

    The tuner prices P(OOM) over its whole candidate pool, and one fake step of a large model takes minutes on
    2 cores. Fake steps therefore run until ``budget_s`` (default 300 s, ``INFRARSI_ESTIMATE_BUDGET_S``) is
    spent; past it, a new layout gets the analytical figure times the median ratio estimate / analytical over
    the layouts already estimated (the estimate calibrates the arithmetic where it cannot afford to run).

    ``.basis(setting)`` says which of the three a setting's figure is (the report prints it per trial):
    "fake step", "analytical (estimate failed)" or "analytical x median ratio (budget spent)".
    ``.residual_sd`` and ``.interaction_sd`` (log scale) say how far the memory model may move a peak
    from it (FAKE_STEP_RESIDUAL_SD, FAKE_STEP_INTERACTION_SD). ``adapter``: the run's (its parse is reused)."""
    budget = float(os.environ.get(BUDGET_ENV, DEFAULT_BUDGET_S)) if budget_s is None else budget_s
    cls = _adapter(contract)
    if not cls.estimate_module or offset_kind(contract) != "estimate":
        return None
    if cls.estimate_needs and importlib.util.find_spec(cls.estimate_needs) is None:
        return None
    if adapter is None:  # one for every layout: the launch is read once
        from ..adapters import get_adapter

        adapter = get_adapter(contract.workload.adapter)
    cache: dict[tuple, float] = {}
    basis: dict[tuple, str] = {}  # how each cached figure was made
    ratios: list[float] = []
    spent = [0.0]
    warned: set[str] = set()

    def key(setting: Mapping[str, Any]) -> tuple:
        return tuple(sorted((k, v) for k, v in setting.items() if not k.startswith(_NOT_MEMORY)))

    def peak(setting: Mapping[str, Any]) -> float:
        k = key(setting)
        if k not in cache and spent[0] >= budget and fallback is not None and ratios:
            cache[k] = fallback(setting) * statistics.median(ratios)
            basis[k] = "analytical x median ratio (budget spent)"
        if k not in cache:
            t0 = time.perf_counter()
            try:
                cache[k] = estimate(contract, setting, adapter=adapter).peak_bytes
                basis[k] = "fake step"
                if fallback is not None:
                    ratios.append(cache[k] / max(fallback(setting), 1.0))
            except ImportError:  # a broken install is not a layout the estimate cannot build
                raise
            except Exception as e:  # noqa: BLE001 - a layout the fake step cannot build gets the analytical figure
                if fallback is None:
                    raise
                line = str(e) if isinstance(e, EstimateError) else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                if on_error is not None and line not in warned:
                    warned.add(line)
                    on_error(f"estimate unavailable for {dict(setting)}: {line}; using the analytical figure")
                cache[k] = fallback(setting) * (statistics.median(ratios) if ratios else 1.0)
                basis[k] = "analytical (estimate failed)"
            finally:
                spent[0] += time.perf_counter() - t0
        return cache[k]

    def basis_of(setting: Mapping[str, Any]) -> str:
        peak(setting)
        return basis[key(setting)]

    return MemoryEstimate(peak=peak, basis=basis_of, residual_sd=FAKE_STEP_RESIDUAL_SD,
                          interaction_sd=FAKE_STEP_INTERACTION_SD)  # its error, read by the Tuner (search/memory.py)
