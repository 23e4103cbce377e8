"""`infrarsi knobs FILE`: the knob space a launch script or config exposes."""

from __future__ import annotations

from pathlib import Path

import typer


def knobs(file: Path = typer.Argument(..., help="A launch script, command file or config."),
          json_out: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show the fixed workload arguments, the knob space, the current setting and its violations."""
    typer.echo("knobs: not implemented yet", err=True)
    raise typer.Exit(2)
