"""The task contract: model, lock + hash, invariant checks."""

from .lock import contract_hash, load_locked, read_lock, write_lock
from .model import FIXED_WORKLOAD_KEYS, Contract, ContractError, load_contract

__all__ = [
    "FIXED_WORKLOAD_KEYS", "Contract", "ContractError", "contract_hash", "load_contract", "load_locked",
    "read_lock", "write_lock",
]
