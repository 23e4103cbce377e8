"""`infrarsi bank ...`: stats, show, export, import.

The bank file is ``--bank PATH``, else ``$INFRARSI_BANK``, else ``~/.infrarsi/bank.sqlite``. Reading
commands (stats, show, export) never create a bank; ``import`` creates one when missing.
Exit codes: 0 success, 1 an error explained in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from .errors import BankError
from .path import bank_path

if TYPE_CHECKING:
    from .store import Bank

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="The experience bank: stats, show, export, import.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

BankOpt = typer.Option(None, "--bank", metavar="FILE", help="Bank file (default: $INFRARSI_BANK, else ~/.infrarsi/bank.sqlite).")


def _open(opt: Path | None, *, create: bool) -> Bank:
    from .store import Bank  # the store (numpy, the knob space) only when a bank command runs

    try:
        return Bank(bank_path(opt), create=create)
    except BankError as e:
        _fail(str(e))
        raise  # unreachable


def _fail(msg: str) -> None:
    err.print(f"[bold red]error:[/] {msg}", soft_wrap=True)
    raise typer.Exit(1)


@app.command()
def stats(bank: Path = BankOpt, json_out: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Counts: runs, trials by status, device-seconds, hardware kinds, priors, kernels, LLM exchanges."""
    b = _open(bank, create=False)
    s = b.stats()
    if json_out:
        typer.echo(json.dumps(s, sort_keys=True))
        return
    t = Table(title=f"bank {s['path']}")
    t.add_column("what")
    t.add_column("count", justify="right")
    for key in ("runs", "trials", "workloads", "priors", "posteriors", "kernels", "llm_exchanges"):
        t.add_row(key, str(s[key]))
    for st, n in s["trials_by_status"].items():
        t.add_row(f"  trials {st}", str(n))
    for kind, n in s["runs_by_hardware"].items():
        t.add_row(f"  runs on {kind}", str(n))
    t.add_row("device-seconds", f"{s['device_s']:.1f}")
    t.add_row("schema version", str(s["schema_version"]))
    console.print(t)


@app.command()
def show(run: str = typer.Argument(None, metavar="RUN", help="A run id; omit to list every run."), bank: Path = BankOpt,
         json_out: bool = typer.Option(False, "--json", help="Print JSON lines.")) -> None:
    """List runs, or one run's trials and learned knob effects."""
    b = _open(bank, create=False)
    runs = b.runs()
    if run is None:
        if json_out:
            for r in runs:
                typer.echo(json.dumps(_run_json(r), sort_keys=True))
            return
        t = Table(title=f"{len(runs)} runs in {b.path}")
        for col in ("run", "hardware", "devices", "workload", "trials", "ok", "best step s", "baseline step s"):
            t.add_column(col)
        for r in runs:
            t.add_row(r.run_id, r.hardware.kind, str(r.hardware.devices), r.workload.name or r.workload.key(),
                      str(r.n_trials), str(r.n_ok), _f(r.best_step_time_s), _f(r.baseline_step_time_s))
        console.print(t)
        return
    match = [r for r in runs if r.run_id == run]
    if not match:
        known = ", ".join(r.run_id for r in runs[:10]) or "none"
        _fail(f"no run {run!r} in {b.path}; known runs: {known}")
    trials = b.trials(run)
    posts = b.posteriors(run)
    if json_out:
        typer.echo(json.dumps(_run_json(match[0]), sort_keys=True))
        for st in trials:
            typer.echo(json.dumps({"trial": st.trial.model_dump(mode="json")}, sort_keys=True))
        for _, p in posts:
            typer.echo(json.dumps({"posterior": p.model_dump(mode="json")}, sort_keys=True))
        return
    r = match[0]
    console.print(f"run {r.run_id}: {r.hardware.kind} x{r.hardware.devices}, workload {r.workload.name or r.workload.key()}")
    t = Table(title="trials")
    for col in ("id", "role", "status", "step s", "peak GiB", "setting", "reason"):
        t.add_column(col)
    for st in trials:
        tr = st.trial
        peak = tr.metrics.peak_memory_bytes
        t.add_row(str(tr.id), tr.role, tr.status.value, _f(tr.metrics.step_time_s),
                  "-" if peak is None else f"{peak / 2**30:.2f}",
                  " ".join(f"{k}={v}" for k, v in sorted(tr.setting.items())), tr.reason[:60])
    console.print(t)
    if posts:
        p_t = Table(title="learned knob effects (log scale, relative to the default)")
        for col in ("knob=value", "time", "time sd", "memory", "memory sd"):
            p_t.add_column(col)
        for _, p in posts:
            p_t.add_row(p.feature, f"{p.time_mean:+.3f}", f"{p.time_sd:.3f}", f"{p.mem_mean:+.3f}", f"{p.mem_sd:.3f}")
        console.print(p_t)


@app.command("export")
def export_(file: Path = typer.Argument(..., metavar="FILE", help="The JSON-lines file to write."), bank: Path = BankOpt) -> None:
    """Write every record of the bank to FILE (JSON lines), for another cluster's `bank import`."""
    b = _open(bank, create=False)
    try:
        n = b.export_jsonl(file)
    except (BankError, OSError) as e:
        _fail(f"export to {file}: {e}")
    console.print(f"exported {n} records from {b.path} to {file}", soft_wrap=True)


@app.command("import")
def import_(file: Path = typer.Argument(..., metavar="FILE", help="A file written by `infrarsi bank export`."), bank: Path = BankOpt) -> None:
    """Merge FILE into the bank (created when missing). Importing the same file twice adds nothing."""
    b = _open(bank, create=True)
    try:
        counts = b.import_jsonl(file)
    except BankError as e:
        _fail(str(e))
    added = ", ".join(f"{v} {k}" for k, v in counts.items())
    console.print(f"imported into {b.path}: {added}", soft_wrap=True)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _run_json(r: Any) -> dict[str, Any]:
    return {"run_id": r.run_id, "hardware": r.hardware.model_dump(mode="json"),
            "workload": r.workload.model_dump(mode="json"), "created_at": r.created_at, "n_trials": r.n_trials,
            "n_ok": r.n_ok, "by_status": r.by_status, "best_step_time_s": r.best_step_time_s,
            "best_setting": r.best_setting, "baseline_step_time_s": r.baseline_step_time_s,
            "baseline_peak_bytes": r.baseline_peak_bytes, "reference_peak_bytes": r.reference_peak_bytes}
