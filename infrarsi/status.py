"""A trial's state: the one vocabulary lives in :mod:`infrarsi.trial.status` (the types floor); imported from here
by the modules written before it moved."""

from .trial.status import FINISHED, TrialStatus

__all__ = ["FINISHED", "TrialStatus"]
