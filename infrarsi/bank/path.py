"""Where the experience bank lives: ``--bank``, else ``$INFRARSI_BANK``, else ``~/.infrarsi/bank.sqlite``."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_BANK = Path("~/.infrarsi/bank.sqlite")


def bank_path(opt: Path | None = None) -> Path:
    """--bank, else INFRARSI_BANK, else ~/.infrarsi/bank.sqlite."""
    if opt is not None:
        return Path(opt).expanduser()
    env = os.environ.get("INFRARSI_BANK")
    return Path(env).expanduser() if env else DEFAULT_BANK.expanduser()
