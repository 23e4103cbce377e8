"""report stage: the report, markdown and HTML (plots inline), from everything the run left on disk."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

SECTIONS = ("loading", "summary", "noise", "trials", "models", "estimate", "effects", "priors", "verification",
            "failures", "cost", "audit", "writing")


def run(run_dir: Path, *, console: Console, err: Console, out: dict | None = None) -> int:
    """Exit 0 written, 1 the run's records could not be read. ``out`` (for ``--json``) gets the files written."""
    from ..contract import ContractError
    from ..report import RunDataError, load_run, write_report

    run_dir = Path(run_dir)
    with Progress(TextColumn("[bold]report[/] {task.description:<14}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("loading", total=len(SECTIONS))

        def step(name: str) -> None:
            bar.update(task, description=name, advance=1)

        try:
            data = load_run(run_dir)
        except (ContractError, RunDataError) as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
            return 1
        md, page = write_report(data, step)
        bar.update(task, completed=len(SECTIONS))
    console.print(f"report: wrote {md} and {page} ({len(data.trials)} trials)")
    if out is not None:
        out.update(markdown=str(md), html=str(page), trials=len(data.trials))
    return 0
