"""The seal chain and key, kept under their old name: the mechanism lives in :mod:`infrarsi.rundir.chain`, which
only :class:`infrarsi.rundir.RunDir` writes through (it has every writer)."""

from __future__ import annotations

from ..rundir.chain import (KEY_ENV, DEFAULT_KEY, SealError, key, key_path, lock_seal_ok, mac, problems, seal_lock,
                            settled_problems, sha256, verify_run, workload_hash)
from ..rundir.names import LOCK as LOCK_FILE
from ..rundir.names import SEALS as SEAL_LOG


__all__ = ["DEFAULT_KEY", "KEY_ENV", "LOCK_FILE", "SEAL_LOG", "SealError", "key", "key_path", "lock_seal_ok", "mac",
           "problems", "seal_lock", "settled_problems", "sha256", "verify_run", "workload_hash"]
