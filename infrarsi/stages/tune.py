"""tune: init -> doctor -> run -> report -> apply, stopping at the first stage that fails.

A run that finishes without a promotion (exit 3) still writes its report, then stops before apply: there is
nothing to apply, and tune exits 3. ``out`` (for ``--json``) gets each stage's exit code and what run, report
and apply said (docs/cli.md#tune)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from .. import exitcodes
from ..execute.slurm_options import SlurmOptions, remember
from . import apply, doctor, init, report
from . import run as run_stage


def run(contract: Path, run_dir: Path, *, max_trials: int | None, apply_to: Path | None, console: Console, err: Console,
        seed: int | None = None, slurm: SlurmOptions | None = None, out: dict | None = None, hooks: bool = True) -> int:
    out = {} if out is None else out
    out.update(stages={}, report=None, apply=None)
    reported, applied = {}, {}

    def init_step() -> int:
        code = init.run(contract, run_dir, console=console, err=err)
        if code == exitcodes.OK and slurm is not None:
            remember(run_dir, slurm)  # kept in the run: a resume submits with the same flags
        return code

    steps = [
        ("init", init_step),
        ("doctor", lambda: doctor.run(run_dir, json_out=False, console=console, err=err)),
        ("run", lambda: run_stage.run(run_dir, max_trials=max_trials, parallel=None, console=console, err=err,
                                      seed=seed)),
        ("report", lambda: report.run(run_dir, console=console, err=err, out=reported)),
        ("apply", lambda: apply.run(run_dir, repo=apply_to or Path("."), dry_run=apply_to is None, console=console,
                                    err=err, out=applied, hooks=hooks)),
    ]
    result = exitcodes.OK
    for name, step in steps:
        if name == "apply" and result == exitcodes.NO_PROMOTION:
            break
        console.rule(f"[bold]{name}")
        code = step()
        out["stages"][name] = code
        out["report"], out["apply"] = reported or None, applied or None
        if name == "run" and code == exitcodes.NO_PROMOTION:
            result = code  # nothing to apply; the report still says what was tried
            continue
        if code != exitcodes.OK:
            err.print(f"tune: stopped at {name} (exit {code})")
            return code
    if result == exitcodes.NO_PROMOTION:
        console.print("tune: finished without a promotion (exit 3): nothing beat the baseline by more than its noise; "
                      "the report says what was tried")
    return result
