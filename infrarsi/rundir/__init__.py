"""The run directory: every record of a run, typed, written only through :class:`RunDir` and sealed.

- :mod:`.names`: the one place a run file is named;
- :mod:`.records`: the typed records (the lock, stages, verification and its progress, search, launch, clock; a
  verified candidate is the floor's ``trial.verified.VerifiedCandidate``);
- :mod:`.models`: the search record's ``models`` block (effects with intervals, the fit, which model priced what);
- :mod:`.chain`: the seal chain (HMAC, a counter sealed with each record, the run's head kept outside it);
- :mod:`.run`: :class:`RunDir`, which reads and writes them.
"""

from __future__ import annotations

from .chain import SealError
from .records import (ClockRecord, KernelVerdict, LaunchRecord, LockRecord, RerunPair, SearchRecord, StageDone,
                      Stages, Verification, VerificationProgress)
from .models import EffectRecord, FittedRecord, ModelsRecord, RevisionRecord
from .run import RunDir

__all__ = ["ClockRecord", "EffectRecord", "FittedRecord", "ModelsRecord", "RevisionRecord", "KernelVerdict", "LaunchRecord", "LockRecord", "RerunPair", "RunDir", "SealError",
           "SearchRecord", "StageDone", "Stages", "Verification", "VerificationProgress"]
