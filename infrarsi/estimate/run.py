"""The library call: the estimate for a contract's framework, and the run stage's memory offset."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .result import Estimate, EstimateError

FRAMEWORKS = ("minigpt", "torchtitan")


def estimate(contract: Any, setting: Mapping[str, Any], **kw: Any) -> Estimate:
    """One rank's peak for ``setting`` of ``contract``'s job (minigpt or torchtitan)."""
    name = contract.workload.adapter
    if name == "minigpt":
        from . import minigpt

        return minigpt.estimate(contract, setting, **kw)
    if name == "torchtitan":
        from . import torchtitan

        return torchtitan.estimate(contract, setting, **kw)
    raise EstimateError(f"workload.adapter = {name!r}: the estimate runs the real model of {list(FRAMEWORKS)} only")


def memory_estimator(space: Any, contract: Any) -> Callable[[Mapping[str, Any]], float] | None:
    """setting -> per-rank peak bytes, for the frameworks whose model the estimate can run; None otherwise."""
    return None
