"""The `infrarsi` command line: thin. It parses, calls a stage, prints with rich.

Stages: init -> doctor -> run -> report -> apply (`tune` runs all five). Tools: knobs, estimate, kernels, bank.
Exit codes (infrarsi/exitcodes.py, docs/cli.md): 0 done (promoted, applied), 1 a failure it explains in one line,
2 bad usage, 3 finished without a promotion (run, tune, apply), 130 interrupted (Ctrl-C; the resume command is
printed). ``--json`` on doctor, run, tune, report, apply (and the tools) prints one JSON object on stdout and
moves every other line to stderr. Known failures (a full disk, an unreadable record, Slurm down, a run
directory in use: ``infrarsi.errors``) end in one line naming the file or service and the next
command; ``--debug`` (anywhere on the line) shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from . import exitcodes

# Plain click-style help (`--json`, `--max-trials INTEGER`, `CONTRACT`): what scripts and other CLIs print.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Make distributed LLM training faster without changing what it computes.")
# emoji off: a message's own text ("H:M:S", "1:M:2") is never an emoji code
console = Console(highlight=False, emoji=False)
err = Console(stderr=True, highlight=False, emoji=False)

DEFAULT_RUN_DIR = Path(".infrarsi/run")


def _run_dir_ok(value: Path | None) -> Path | None:
    """--run-dir names a folder, or a path one can be made at: a file there (or on its way) is bad usage (exit 2)."""
    if value is None:
        return value
    here = Path(value)
    while not here.exists() and here != here.parent:
        here = here.parent
    if here.exists() and not here.is_dir():
        where = "is a file" if here == Path(value) else f"cannot be made: {here} is a file"
        raise typer.BadParameter(f"{value} {where}, not a directory; give the run's folder (made when missing)")
    return value


RunDir = typer.Option(DEFAULT_RUN_DIR, "--run-dir", metavar="DIR", callback=_run_dir_ok,
                      help="The run's directory (lock, trials, reports).")
Json = typer.Option(False, "--json", help="Print one JSON object on stdout (shape: docs/cli.md); other lines go to stderr.")
# sbatch flags (doctor, run, tune): validated here, kept in the run directory, used again on resume
Partition = typer.Option(None, "--partition", metavar="NAME", help="Slurm: the partition trials are submitted to.")
Account = typer.Option(None, "--account", metavar="NAME", help="Slurm: the account trials are charged to.")
Qos = typer.Option(None, "--qos", metavar="NAME", help="Slurm: the quality of service of the trials' jobs.")
Time = typer.Option(None, "--time", metavar="TIME", help="Slurm: the most a trial's job may run (90, 4:00:00, 1-12).")


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def check_environment() -> None:
    """The trials' executor as the environment sets it ($INFRARSI_EXECUTOR, $INFRARSI_ISOLATION, the Slurm
    variables), checked before the first stage runs: a bad value is one line naming it, exit 2."""
    from .errors import SettingError
    from .execute import make_executor

    try:
        ex = make_executor()  # builds the executor only: nothing is launched or asked of Slurm
    except SettingError as e:
        fail(str(e), exitcodes.USAGE)
    conf = os.environ.get("SLURM_CONF")
    if getattr(ex, "kind", None) == "slurm" and conf and not Path(conf).is_file():
        # every Slurm client would retry for about a minute before failing on it
        fail(f"SLURM_CONF={conf} is not a file; point SLURM_CONF at the cluster's slurm.conf (`scontrol show config "
             f"| grep SLURM_CONF` on a login node says where), or unset it", exitcodes.USAGE)


def locked(run_dir: Path, command: str):
    """Hold the run directory for a command that writes trials (one such process per directory)."""
    from .runlock import hold

    return hold(run_dir, command, on_takeover=lambda line: err.print(f"[yellow]{line}[/]"))


@contextlib.contextmanager
def interruptible(resume: str, on_interrupt=None):
    """Ctrl-C ends the command with the line that resumes it and exit 130. What finished is recorded; a trial cut
    short is recorded cancelled and costs no budget: the resume runs its setting again. ``on_interrupt()`` runs
    first (``--json``: the outcome so far, "unfinished", on stdout)."""
    try:
        yield
    except KeyboardInterrupt:
        err.print(f"\n[yellow]interrupted[/]; resume with: {escape(resume)}", soft_wrap=True)
        if on_interrupt is not None:
            with contextlib.suppress(Exception, KeyboardInterrupt):  # the exit and its line come whatever it does
                on_interrupt()
        raise typer.Exit(exitcodes.INTERRUPTED) from None


def out_consoles(json_out: bool) -> tuple[Console, Console]:
    """(where the stage's lines go, where errors go): with --json, stdout carries the JSON only."""
    return (err if json_out else console), err


def print_json(body: dict) -> None:
    print(json.dumps(body, indent=2, default=str), flush=True)


def slurm_flags(run_dir: Path | None, **flags: str | None):
    """Validate the sbatch flags (one line naming the flag, exit 2) and keep those given in ``run_dir``'s record."""
    from .errors import SettingError
    from .execute.slurm_options import from_flags, remember
    from .rundir import RunDir as _RunDir

    try:
        opts = from_flags(**flags)
    except SettingError as e:
        fail(str(e), exitcodes.USAGE)
    if run_dir is not None and opts.given() and _RunDir(run_dir).has_lock():
        remember(run_dir, opts)
    return opts


def _git_tree_ok(value: Path | None) -> Path | None:
    """--apply-to names a git work tree, checked before the first stage (hours before apply would find out)."""
    from .gitops import toplevel

    if value is not None and toplevel(value) is None:
        raise typer.BadParameter(f"{value} is not a git work tree (the tuned launch is committed there); give the "
                                 f"repository's folder, or leave --apply-to out for a dry run")
    return value


def check_seed(run_dir: Path, seed: int | None) -> None:
    """--seed against the seed the run directory's search started with (a resume may not change it): exit 2."""
    from .stages.run_state import seed_conflict

    why = seed_conflict(run_dir, seed)
    if why:
        fail(why, exitcodes.USAGE)


@app.command()
def init(
    contract: Path = typer.Argument(None, metavar="CONTRACT", help="The contract TOML file (or draft one with --from-request)."),
    run_dir: Path = RunDir,
    from_request: str = typer.Option(None, "--from-request", metavar="TEXT", help="Draft a contract from this request (needs --launch)."),
    launch: Path = typer.Option(None, "--launch", metavar="SCRIPT", help="The launch script the request is about."),
    yes: bool = typer.Option(False, "--yes", help="Lock the drafted contract without reviewing it first."),
) -> None:
    """Lock the task contract (workload, invariants, scope) into the run directory."""
    from .stages import init as stage

    if from_request is not None or contract is None:
        from .stages.draft import init_from_request

        if from_request is None:
            fail("give a contract file, or --from-request TEXT --launch SCRIPT to draft one", 2)
        raise typer.Exit(init_from_request(from_request, launch, run_dir, yes=yes, console=console, err=err))
    raise typer.Exit(stage.run(contract, run_dir, console=console, err=err))


@app.command()
def doctor(run_dir: Path = RunDir, json_out: bool = typer.Option(False, "--json", help="Print the noise profile as JSON."),
           partition: str = Partition, account: str = Account, qos: str = Qos, time: str = Time) -> None:
    """Run the baseline, profile its phases and measure run-to-run noise."""
    slurm_flags(run_dir, partition=partition, account=account, qos=qos, time=time)
    check_environment()
    from .stages import doctor as stage
    with locked(run_dir, "doctor"), interruptible(f"infrarsi doctor --run-dir {run_dir}"):
        code = stage.run(run_dir, json_out=json_out, console=console, err=err)
    raise typer.Exit(code)


@app.command("run")
def run_(
    run_dir: Path = RunDir,
    max_trials: int = typer.Option(None, "--max-trials", metavar="N", min=1,
                                   help="Override the contract's budget.max_trials (lower only)."),
    parallel: int = typer.Option(None, "--parallel", metavar="N", min=1,
                                 help="Trials at once (default: the contract's budget.parallel_trials)."),
    seed_from_simulated: bool = typer.Option(False, "--seed-from-simulated",
                                             help="Let simulated (what-if) runs in the bank seed this measured run."),
    more: int = typer.Option(None, "--more", metavar="N", help="Extend a finished search by N more trials, then re-verify.", min=1),
    seed: int = typer.Option(None, "--seed", metavar="N", min=0, help="The search's random seed (default 0; kept in the "
                             "run directory, so a resume continues with it)."),
    partition: str = Partition, account: str = Account, qos: str = Qos, time: str = Time,
    json_out: bool = Json,
) -> None:
    """Search launch knobs and kernel patches; re-verify the best against the baseline. Exit 0 promoted, 3 none."""
    slurm_flags(run_dir, partition=partition, account=account, qos=qos, time=time)
    check_environment()
    check_seed(run_dir, seed)
    from .stages import run as stage  # after the checks: importing the stages takes seconds
    from .stages.outcome import run_outcome

    say, _ = out_consoles(json_out)
    cut = (lambda: print_json(run_outcome(run_dir, exitcodes.INTERRUPTED))) if json_out else None
    with locked(run_dir, "run"), interruptible(f"infrarsi run --run-dir {run_dir}", cut):
        code = stage.run(run_dir, max_trials=max_trials, parallel=parallel, more=more, console=say, err=err,
                         seed_from_simulated=seed_from_simulated, seed=seed)
    if json_out:
        print_json(run_outcome(run_dir, code))
    raise typer.Exit(code)


@app.command()
def report(run_dir: Path = RunDir, json_out: bool = Json) -> None:
    """Write the report (markdown and HTML, into the run directory): speedup, knob costs, wrong priors, failed-trial costs."""
    from .stages import report as stage

    out: dict = {}
    say, _ = out_consoles(json_out)
    code = stage.run(run_dir, console=say, err=err, out=out)
    if json_out:
        print_json({"run_dir": str(run_dir), "exit_code": code, **out})
    raise typer.Exit(code)


@app.command()
def apply(
    run_dir: Path = RunDir,
    repo: Path = typer.Option(Path("."), "--repo", metavar="DIR", help="The git tree to write the promoted changes into."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff; write nothing."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Do not run the repository's git hooks (as git commit "
                                   "--no-verify)."),
    json_out: bool = Json,
) -> None:
    """Write the promoted, audited changes inside the locked scope, as one git commit. Exit 0 applied, 3 nothing
    promoted, 1 refused."""
    from .stages import apply as stage

    out: dict = {}
    say, _ = out_consoles(json_out)
    code = stage.run(run_dir, repo=repo, dry_run=dry_run, console=say, err=err, out=out, hooks=not no_verify)
    if json_out:
        print_json({"run_dir": str(run_dir), "exit_code": code, **out})
    raise typer.Exit(code)


@app.command()
def tune(
    contract: Path = typer.Argument(..., metavar="CONTRACT", help="The contract TOML file."),
    run_dir: Path = RunDir,
    max_trials: int = typer.Option(None, "--max-trials", metavar="N", min=1,
                                   help="Override the contract's budget.max_trials (lower only)."),
    apply_to: Path = typer.Option(None, "--apply-to", metavar="DIR", callback=_git_tree_ok,
                                  help="Commit the promoted changes into this git tree (default: apply --dry-run)."),
    seed: int = typer.Option(None, "--seed", metavar="N", min=0, help="The search's random seed (default 0), as `infrarsi run --seed`."),
    no_verify: bool = typer.Option(False, "--no-verify", help="With --apply-to: do not run the repository's git hooks."),
    partition: str = Partition, account: str = Account, qos: str = Qos, time: str = Time,
    json_out: bool = Json,
) -> None:
    """Run all five stages in order: init, doctor, run, report, apply. Exit 0 promoted, 3 none, 130 interrupted."""
    slurm = slurm_flags(None, partition=partition, account=account, qos=qos, time=time)
    check_environment()
    check_seed(run_dir, seed)
    if not contract.is_file():
        fail(f"contract {contract} is not a file; give the contract TOML (contracts/ has examples)", exitcodes.USAGE)
    from .stages import tune as stage  # after the checks: importing the stages takes seconds
    from .stages.outcome import run_outcome

    out: dict = {}
    say, _ = out_consoles(json_out)
    run_dir.mkdir(parents=True, exist_ok=True)
    cut = (lambda: print_json({**run_outcome(run_dir, exitcodes.INTERRUPTED), **out})) if json_out else None
    with locked(run_dir, "tune"), interruptible(f"infrarsi tune {contract} --run-dir {run_dir}", cut):
        code = stage.run(contract, run_dir, max_trials=max_trials, apply_to=apply_to, console=say, err=err, seed=seed,
                         slurm=slurm, out=out, hooks=not no_verify)
    if json_out:
        print_json({**run_outcome(run_dir, code), **out})
    raise typer.Exit(code)


def _register_tools() -> None:
    """Tool sub-commands live beside the code they drive (registered once per process)."""
    if any(c.name == "knobs" for c in app.registered_commands):
        return
    from .bank.cli import app as bank_app
    from .estimate.cli import estimate
    from .kernels.cli import app as kernels_app
    from .stages.knobs import knobs

    app.command("knobs")(knobs)
    app.command("estimate")(estimate)

    app.add_typer(kernels_app, name="kernels", help="Verify and benchmark Triton kernel candidates.")
    app.add_typer(bank_app, name="bank", help="The experience bank: stats, show, export, import.")


def _version(value: bool) -> None:
    if value:
        from . import __version__

        print(f"infrarsi {__version__}")
        raise typer.Exit(exitcodes.OK)


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show the traceback of a failure instead of one line."),
             version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
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
        raise SystemExit(exitcodes.ERROR) from None


if __name__ == "__main__":
    main()
