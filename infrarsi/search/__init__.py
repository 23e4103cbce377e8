"""Search: initial designs, acquisition, memory pricing and pairing, re-verification, promotion.

The public ask/tell API (kept stable): :class:`Tuner`, :class:`Outcome`, :class:`TunerConfig`.
"""

from .outcome import Outcome
from .tuner import Proposal, Tuner, TunerConfig, run_tuner

__all__ = ["Outcome", "Proposal", "Tuner", "TunerConfig", "run_tuner"]
