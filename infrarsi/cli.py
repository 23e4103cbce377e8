"""The `infrarsi` command line: thin. It parses, calls a stage, prints with rich.

Stages: init -> doctor -> run -> report -> apply (`tune` runs all five). Tools: knobs, kernels, bank.
Every command returns 0 on success, 1 on a failure it explains in one line, 2 on bad usage or a
stage that is not built yet. Known failures (a full disk, an unreadable record, Slurm down, a run
directory in use: ``infrarsi.errors``) end in one line naming the file or service and the next
command; ``--debug`` (anywhere on the line) shows the traceback instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Make distributed LLM training faster without changing what it computes.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

DEFAULT_RUN_DIR = Path(".infrarsi/run")
RunDir = typer.Option(DEFAULT_RUN_DIR, "--run-dir", help="The run's directory (lock, trials, reports).")


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def locked(run_dir: Path, command: str):
    """Hold the run directory for a command that writes trials (one such process per directory)."""
    from .runlock import hold

    return hold(run_dir, command, on_takeover=lambda line: err.print(f"[yellow]{line}[/]"))


def not_implemented(stage: str) -> None:
    err.print(f"{stage}: not implemented yet")
    raise typer.Exit(2)


@app.command()
def init(
    contract: Path = typer.Argument(None, help="The contract TOML file (or draft one with --from-request)."),
    run_dir: Path = RunDir,
    from_request: str = typer.Option(None, "--from-request", help="Draft a contract from this request (needs --launch)."),
    launch: Path = typer.Option(None, "--launch", help="The launch script the request is about."),
    yes: bool = typer.Option(False, "--yes", help="Lock the drafted contract without reviewing it first."),
) -> None:
    """Lock the task contract (workload, invariants, scope) into the run directory."""
    from .stages import init as stage

    if from_request is not None or contract is None:
        from .priors.draft import init_from_request

        if from_request is None:
            fail("give a contract file, or --from-request TEXT --launch SCRIPT to draft one", 2)
        raise typer.Exit(init_from_request(from_request, launch, run_dir, yes=yes, console=console, err=err))
    raise typer.Exit(stage.run(contract, run_dir, console=console, err=err))


@app.command()
def doctor(run_dir: Path = RunDir, json_out: bool = typer.Option(False, "--json", help="Print the noise profile as JSON.")) -> None:
    """Run the baseline, profile its phases and measure run-to-run noise."""
    from .stages import doctor as stage

    with locked(run_dir, "doctor"):
        code = stage.run(run_dir, json_out=json_out, console=console, err=err)
    raise typer.Exit(code)


@app.command("run")
def run_(
    run_dir: Path = RunDir,
    max_trials: int = typer.Option(None, "--max-trials", help="Override the contract's budget.max_trials (lower only)."),
    parallel: int = typer.Option(None, "--parallel", help="Trials at once (default: the contract's budget.parallel_trials)."),
    seed_from_simulated: bool = typer.Option(False, "--seed-from-simulated",
                                             help="Let simulated (what-if) runs in the bank seed this measured run."),
    more: int = typer.Option(None, "--more", help="Extend a finished search by N more trials, then re-verify.", min=1),
    seed: int = typer.Option(None, "--seed", min=0, help="The search's random seed (default 0; kept in the run "
                             "directory, so a resume continues with it)."),
) -> None:
    """Search launch knobs and kernel patches; re-verify the best against the baseline."""
    from .stages import run as stage

    with locked(run_dir, "run"):
        code = stage.run(run_dir, max_trials=max_trials, parallel=parallel, more=more, console=console, err=err,
                         seed_from_simulated=seed_from_simulated, seed=seed)
    raise typer.Exit(code)


@app.command()
def report(run_dir: Path = RunDir) -> None:
    """Write the report (markdown and HTML, into the run directory): speedup, knob costs, wrong priors, failed-trial costs."""
    from .stages import report as stage

    raise typer.Exit(stage.run(run_dir, console=console, err=err))


@app.command()
def apply(
    run_dir: Path = RunDir,
    repo: Path = typer.Option(Path("."), "--repo", help="The git tree to write the promoted changes into."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff; write nothing."),
) -> None:
    """Write the promoted, audited changes inside the locked scope, as one git commit."""
    from .stages import apply as stage

    raise typer.Exit(stage.run(run_dir, repo=repo, dry_run=dry_run, console=console, err=err))


@app.command()
def tune(
    contract: Path = typer.Argument(..., help="The contract TOML file."),
    run_dir: Path = RunDir,
    max_trials: int = typer.Option(None, "--max-trials", help="Override the contract's budget.max_trials (lower only)."),
    apply_to: Path = typer.Option(None, "--apply-to", help="Commit the promoted changes into this git tree (default: apply --dry-run)."),
    seed: int = typer.Option(None, "--seed", min=0, help="The search's random seed (default 0), as `infrarsi run --seed`."),
) -> None:
    """Run all five stages in order: init, doctor, run, report, apply."""
    from .stages import tune as stage

    run_dir.mkdir(parents=True, exist_ok=True)
    with locked(run_dir, "tune"):
        code = stage.run(contract, run_dir, max_trials=max_trials, apply_to=apply_to, console=console, err=err, seed=seed)
    raise typer.Exit(code)


def _register_tools() -> None:
    """Tool sub-commands live beside the code they drive."""
    from .bank.cli import app as bank_app
    from .estimate.cli import estimate
    from .kernels.cli import app as kernels_app
    from .knobs.cli import knobs

    app.command("knobs")(knobs)
    app.command("estimate")(estimate)

    app.add_typer(kernels_app, name="kernels", help="Verify and benchmark Triton kernel candidates.")
    app.add_typer(bank_app, name="bank", help="The experience bank: stats, show, export, import.")


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show the traceback of a failure instead of one line.")) -> None:
    """Make distributed LLM training faster without changing what it computes."""


def main(argv: list[str] | None = None) -> None:
    """The entry point: every known failure becomes one line (``infrarsi.errors.explain``); exit 1."""
    from .errors import explain

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    _register_tools()
    try:
        app(args=[a for a in args if a != "--debug"], prog_name="infrarsi")  # usage errors and Exit end here
    except Exception as e:  # noqa: BLE001 - known failures become one line; anything else keeps its traceback
        line = None if debug else explain(e, args)
        if line is None:
            raise
        err.print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
