"""The experience bank: every trial kept (SQLite), hardware fingerprints, workload signatures, and the
seeding and transfer that let one run start closer to the optimum than the last.

The names below are imported when first used (``infrarsi.bank.X``), so a command that does not touch the bank
(``infrarsi knobs``) does not pay for numpy and the seeding models at start-up."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "HardwareFingerprint": "fingerprint",
    "fingerprint_from": "fingerprint",
    "fingerprint_local": "fingerprint",
    "gpu_family": "fingerprint",
    "hardware_distance": "fingerprint",
    "bank_path": "path",
    "Seed": "seed",
    "SeedSource": "seed",
    "seed_from_bank": "seed",
    "WorkloadSignature": "signature",
    "signature_from": "signature",
    "workload_distance": "signature",
    "SCHEMA_VERSION": "store",
    "Bank": "store",
    "BankConflictError": "store",
    "BankCorruptError": "store",
    "BankError": "store",
    "BankSchemaError": "store",
    "KernelRecord": "store",
    "RunSummary": "store",
    "StoredTrial": "store",
    "combine": "transfer",
    "distill": "transfer",
    "map_setting": "transfer",
    "priors_from_effects": "transfer",
    "transfer_prior": "transfer",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_EXPORTS)
