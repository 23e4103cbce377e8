"""Pyro models of a training launch: log step time (:class:`TimeModel`), censored log peak memory
(:class:`MemoryModel`), the effects they estimate and how they revise priors (:func:`revision`).

Every failed trial is data: an OOM is a censored memory observation (peak > capacity).
"""

from ._design import DEFAULT_INTERACTIONS, Design, is_ordered
from ._fit import jittered_cholesky, log_ndtr, mills_ratio, ndtr
from .memory import MemoryModel, memory_model
from .revision import Effect, PriorRevision, revision
from .time import TimeModel, time_model

__all__ = [
    "DEFAULT_INTERACTIONS",
    "Design",
    "Effect",
    "MemoryModel",
    "PriorRevision",
    "TimeModel",
    "is_ordered",
    "jittered_cholesky",
    "log_ndtr",
    "memory_model",
    "mills_ratio",
    "ndtr",
    "revision",
    "time_model",
]
