"""tune: init -> doctor -> run -> report -> apply, stopping at the first stage that fails."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from . import apply, doctor, init, report
from . import run as run_stage


def run(contract: Path, run_dir: Path, *, max_trials: int | None, apply_to: Path | None, console: Console, err: Console,
        seed: int | None = None) -> int:
    steps = [
        ("init", lambda: init.run(contract, run_dir, console=console, err=err)),
        ("doctor", lambda: doctor.run(run_dir, json_out=False, console=console, err=err)),
        ("run", lambda: run_stage.run(run_dir, max_trials=max_trials, parallel=None, console=console, err=err,
                                             seed=seed)),
        ("report", lambda: report.run(run_dir, console=console, err=err)),
        ("apply", lambda: apply.run(run_dir, repo=apply_to or Path("."), dry_run=apply_to is None, console=console, err=err)),
    ]
    for name, step in steps:
        console.rule(f"[bold]{name}")
        code = step()
        if code != 0:
            err.print(f"tune: stopped at {name} (exit {code})")
            return code
    return 0
