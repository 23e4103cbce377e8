"""`infrarsi knobs FILE`: the knob space a launch script or config exposes.

FILE is a Megatron-LM launch (a script in the style of its ``examples/`` or a command line) or a
torchtitan launch (a 0.2.x TOML job file, or a script/command running ``-m torchtitan.train`` or
``run_train.sh``). The framework is detected from the file. ``--json`` prints exactly one object::

    {"framework": "megatron", "fixed": {...}, "setting": {...}, "violations": [...], "warnings": [...]}

and, for a launch read through the scripts it runs (an sbatch file's ``srun bash train.sh``), ``"chain"``: the
files and lines followed, ``a.sh:26 (srun bash b.sh) -> b.sh:78 -> pretrain_gpt.py`` (also printed above the tables).

``setting`` has one key per catalog knob the framework can express (a knob the launch does not set
has the framework's default); ``data_parallel`` is null when the launch does not state the world size.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import typer

from ..adapters.registry import DetectError, launch_file_frameworks



def detect_framework(path: Path, text: str) -> str:
    """The framework of a launch file (read through the scripts it runs), or a DetectError naming what was looked
    for (the registry's one detection)."""
    from ..adapters.registry import framework_of_file

    return framework_of_file(path, text)


def _contract_workload(path: Path, text: str) -> Any:
    """For a contract TOML: its Workload (the launch read as the run reads it: the same folder, environment and
    world size); None for any other file."""
    import tomllib

    if path.suffix != ".toml":
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    if not isinstance(data.get("workload"), dict):
        return None
    from ..adapters.workload import Workload

    w = Workload.of_file(path)
    if not w.reads_launch_file:
        raise DetectError(f"{path}: a contract for adapter {w.contract.workload.adapter!r} without workload.launch; "
                          f"pass the {launch_file_frameworks()} launch file itself")
    return w


def describe(path: Path, *, world_size: int | None = None, core: bool = True) -> dict[str, Any]:
    """What `infrarsi knobs` reports, as data: framework, fixed, setting, violations, space, notes, parsed.
    A contract TOML is followed to its workload.launch, read as its trials read it (world size: the contract's
    devices). ``core=False`` leaves out the framework's own check (megatron-core's imports torch: seconds), keeping
    the catalog's."""
    from ..adapters import adapter_class

    text = path.read_text()
    via = _contract_workload(path, text)
    if via is not None:
        d = via.describe(core=core)
    else:
        d = adapter_class(detect_framework(path, text)).describe_file(path, text, world_size=world_size, core=core)
    chain = getattr(d["parsed"], "chain", None)
    if chain is not None and chain.hops:  # the scripts read to reach the launch: file:line -> ... -> program
        d["chain"] = chain.trail(" ".join(d["parsed"].launch.program))
    return d


def knobs(file: Path = typer.Argument(..., metavar="FILE", help="A launch script, command file or config."),
          json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
          world_size: int = typer.Option(None, "--world-size", metavar="N", help="World size when the file does not state it (a TOML job file)."),
          framework_check: bool = typer.Option(True, "--framework-check/--no-framework-check",
                                               help="Also put the setting to the framework's own config code, "
                                                    "where it has one (imports torch: seconds; the catalog's rules "
                                                    "are always checked).")) -> None:
    """Show the fixed workload arguments, the knob space, the current setting and its violations."""
    from rich.console import Console
    from rich.table import Table

    if not file.is_file():
        typer.echo(f"error: {file} does not exist; pass a launch script, command file or TOML job file", err=True)
        raise typer.Exit(1)
    try:  # the catalog's rules first (no torch import): the tables print in well under a second
        d = describe(file, world_size=world_size, core=False)
    except (DetectError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)  # one line, never wrapped
        raise typer.Exit(1) from None
    from ..adapters import adapter_class

    fw = adapter_class(d["framework"])
    check = framework_check and fw.has_framework_check

    def framework_word() -> None:  # the framework's own check replaces the catalog-only list (it includes it)
        d["violations"] = fw.launch_violations(d["parsed"], core=True)

    if json_out:
        if check:
            framework_word()
        keys = ("framework", "fixed", "setting", "violations", "warnings", *(("chain",) if "chain" in d else ()))
        typer.echo(json.dumps({k: d[k] for k in keys}, default=str))
        raise typer.Exit(0)
    out = Console(highlight=False)
    out.print(f"[bold]{file}[/]: {d['framework']}, world size {d['world_size'] or 'not stated'}")
    if "chain" in d:
        out.print(f"read through: {d['chain']}", soft_wrap=True)
    ft = Table(title="fixed workload arguments", show_header=True)
    ft.add_column("argument", no_wrap=True)
    ft.add_column("value")
    for k, v in d["fixed"].items():
        ft.add_row(k, str(v))
    out.print(ft)
    kt = Table(title="knobs", show_header=True)
    kt.add_column("knob", no_wrap=True)  # the name is what a user types in a profile: never cut it
    for col in ("group", "current", "default", "domain"):
        kt.add_column(col)
    kt.add_column("spelling", overflow="fold")
    for k in d["space"].knobs:
        cur = d["setting"].get(k.name)
        mark = "" if cur == k.default else "[bold]"
        kt.add_row(k.name, k.group, f"{mark}{cur}", str(k.default), ", ".join(map(str, k.domain)),
                   d["spelling"].get(k.name, "(derived)"))
    out.print(kt)
    for n in d["notes"]:
        out.print(f"[yellow]note:[/] {n}")
    for w in d["warnings"]:
        out.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    if check:
        err = Console(stderr=True, highlight=False)
        say = (f"checking the setting with {fw.framework_check_by or 'its own config code'} (imports torch: a few "
               "seconds; --no-framework-check skips it)")
        if not err.is_terminal:
            err.print(f"{say} ...", soft_wrap=True)
        with err.status(say) if err.is_terminal else contextlib.nullcontext():
            framework_word()
    if d["violations"]:
        out.print(f"[bold red]{len(d['violations'])} violation(s):[/]")
        for v in d["violations"]:
            out.print(f"  - {v}")
    else:
        out.print("[green]no violations[/]")
