"""The experience bank: every trial kept (SQLite), hardware fingerprints, workload signatures, and the
seeding and transfer that let one run start closer to the optimum than the last."""

from .fingerprint import HardwareFingerprint, fingerprint_from, fingerprint_local, gpu_family, hardware_distance
from .path import bank_path
from .seed import Seed, SeedSource, seed_from_bank
from .signature import WorkloadSignature, signature_from, workload_distance
from .store import (
    SCHEMA_VERSION,
    Bank,
    BankConflictError,
    BankCorruptError,
    BankError,
    BankSchemaError,
    KernelRecord,
    RunSummary,
    StoredTrial,
)
from .transfer import combine, distill, map_setting, priors_from_effects, transfer_prior

__all__ = [
    "SCHEMA_VERSION", "Bank", "bank_path", "BankConflictError", "BankCorruptError", "BankError", "BankSchemaError",
    "HardwareFingerprint", "KernelRecord", "RunSummary", "Seed", "SeedSource", "StoredTrial", "WorkloadSignature",
    "combine", "distill", "fingerprint_from", "fingerprint_local", "gpu_family", "hardware_distance",
    "map_setting", "priors_from_effects", "seed_from_bank", "signature_from", "transfer_prior", "workload_distance",
]
