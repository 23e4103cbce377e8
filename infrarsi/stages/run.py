"""run stage."""

from __future__ import annotations

from rich.console import Console


def run(*args, console: Console, err: Console, **kw) -> int:
    err.print("run: not implemented yet")
    return 2
