"""The run directory: every record of a run, typed, written only through :class:`RunDir` and sealed.

- :mod:`.names`: the one place a run file is named;
- :mod:`.records`: the typed records (the lock, stages, verification and its progress, search, launch, clock);
- :mod:`.chain`: the seal chain (HMAC, a counter sealed with each record, the run's head kept outside it);
- :mod:`.run`: :class:`RunDir`, which reads and writes them.

Imported lazily (``from infrarsi.rundir import RunDir`` loads what it needs), so ``names`` costs nothing to the
modules whose types the records use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RunDir": "run", "SealError": "chain",
    **{name: "records" for name in ("ClockRecord", "Disturbed", "KernelVerdict", "LaunchRecord", "LockRecord", "RerunPair",
                                    "SearchRecord", "StageDone", "Stages", "Verification", "VerificationProgress",
                                    "VerifiedCandidate")},
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_EXPORTS)
