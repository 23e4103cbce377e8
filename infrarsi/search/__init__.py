"""Search: initial designs, acquisition, memory pricing and pairing (verification and promotion: ``infrarsi.verify``).

The public ask/tell API (kept stable): :class:`Tuner`, :class:`Outcome`, :class:`TunerConfig`; the parts a Tuner is
made of (:mod:`.parts`): time models (:mod:`.time`), memory models (:mod:`.memory`), the steps (:mod:`.steps`), and the
:class:`History` they are fitted on.
"""

from .history import History
from .memory import AdditivePeak, CensoredPeak, NoMemory, StructuredPeak
from .outcome import Outcome
from .parts import MemoryPart, Setup, StepsPart, TimePart
from ..trial.proposal import Proposal
from .steps import Context, Steps
from .time import AdditiveTime, JointTime, ResidualTime
from .tuner import Tuner, TunerConfig, run_tuner

__all__ = ["AdditivePeak", "AdditiveTime", "CensoredPeak", "Context", "History", "JointTime", "MemoryPart", "NoMemory",
           "Outcome", "Proposal", "ResidualTime", "Setup", "Steps", "StepsPart", "StructuredPeak", "TimePart", "Tuner",
           "TunerConfig", "run_tuner"]
