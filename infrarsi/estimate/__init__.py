"""Pre-flight estimates from the real model: one fake training step of the user's model, with the setting's
parallel layout, on a fake process group of the real world size; per-rank peak memory by category and a
roofline step time. ``estimate(contract, setting)`` answers "will it fit?" before anything is queued."""

from ..fakestep.result import CATEGORIES, Estimate, EstimateError
from .run import estimate, memory_estimator, offset_kind

__all__ = ["CATEGORIES", "Estimate", "EstimateError", "estimate", "memory_estimator", "offset_kind"]
