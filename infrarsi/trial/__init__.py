"""The types floor: the values every layer passes a trial around as, in one package that imports nothing else
of the project's (pydantic only), so that any package may import it.

- :mod:`.status`: :class:`TrialStatus`, the one vocabulary of a trial's state;
- :mod:`.launch`: :class:`LaunchSpec` (what an executor starts), :class:`Handle`, :class:`LaunchEnd`, and the
  trial directory's placeholders (``TRIAL_DIR``, ``OUTPUTS``);
- :mod:`.record`: :class:`Trial`, :class:`Metrics`, :class:`Cost`;
- :mod:`.parsed`: :class:`ParsedRun`, what an adapter read from a trial's output;
- :mod:`.prior`: :class:`Prior`, what a source believes one knob value does (the search starts from them and its
  record keeps them);
- :mod:`.proposal`: :class:`Proposal`, why the tuner proposed a setting (the records of the search keep it);
- :mod:`.verified`: :class:`VerifiedCandidate`, a candidate re-run in A/B pairs with the baseline and the verdict;
- :mod:`.memory_estimate`: :class:`MemoryEstimate`, a per-rank peak-memory estimate of a setting with what it states
  about its own error (its optional statements declared with defaults: nothing probes for them).
"""

from __future__ import annotations

from .launch import OUTPUTS, TRIAL_DIR, Handle, LaunchEnd, LaunchSpec
from .parsed import ParsedRun
from .prior import Prior
from .proposal import Proposal
from .record import WARMUP_ROLE, Cost, Metrics, Trial
from .status import FINISHED, TrialStatus

__all__ = ["FINISHED", "WARMUP_ROLE", "OUTPUTS", "TRIAL_DIR", "Cost", "Handle", "LaunchEnd", "LaunchSpec", "Metrics", "ParsedRun",
           "Prior", "Proposal", "Trial", "TrialStatus"]
