"""`infrarsi kernels ...`: verify, benchmark and list Triton kernel candidates.

Exit codes: 0 pass / done; 1 the candidate failed verification; 2 bad usage or no GPU for bench.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from .ops import OPS

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, help="Verify and benchmark Triton kernel candidates.")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _usage(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


def _resolve(candidate: str, op: str | None) -> str:
    """The op of a candidate (PATH or PATH@VARIANT), after checking that it can be loaded as written."""
    from .loader import OPS, candidate_path, op_of, parse_candidate

    if not candidate_path(candidate).is_file():
        _usage(f"{candidate_path(candidate)}: no such candidate file")
    if op is not None and op not in OPS:
        _usage(f"--op {op!r} is not a known op; use one of {', '.join(OPS)}")
    try:
        parse_candidate(candidate)
        return op or op_of(candidate)
    except ValueError as e:  # CandidateError too
        _usage(str(e))


@app.command()
def verify(
    path: str = typer.Argument(..., metavar="CANDIDATE", help="The candidate: a file, or FILE@VARIANT for one of its VARIANTS, e.g. "
                                         "kernels/rmsnorm/triton_rows.py@rows16."),
    op: str = typer.Option(None, "--op", metavar="OP", help="The op it implements (default: its folder's name)."),
    json_out: bool = typer.Option(False, "--json", help="Print {verdict, reasons, cases, ...} as JSON."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Verify again even if this content was verified before."),
) -> None:
    """Check forward and backward against the fp64 reference, and hunt for cheats. Exit 0 only on pass."""
    from .verify import verify as run_verify

    op = _resolve(path, op)
    result = run_verify(path, op, use_cache=not no_cache)
    if json_out:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        _print_result(result)
    raise typer.Exit(0 if result.passed else 1)


def _print_result(result) -> None:
    n_seeds = len({c.seed for c in result.cases})
    table = Table(title=f"{result.op}: {Path(result.path).name}  sha256 {result.sha256[:12]}  ({n_seeds} seeds)")
    for col in ("family", "dtype", "tensor", "max abs", "max rel", "atol/rtol", "ok"):
        table.add_column(col, no_wrap=True)
    groups: dict = {}
    for c in result.cases:
        groups.setdefault((c.family, c.dtype), []).append(c)
    for (family, dtype), cases in groups.items():
        names = sorted({k for c in cases for k in c.errors})
        for name in names:
            errs = [c.errors[name] for c in cases if name in c.errors]
            ok = all(c.ok for c in cases)
            table.add_row(family, dtype, name, f"{max(e['max_abs'] for e in errs):.2g}",
                          f"{max(e['max_rel'] for e in errs):.2g}", f"{errs[0]['atol']:g}/{errs[0]['rtol']:g}",
                          "[green]yes[/]" if ok else "[red]no[/]")
    if result.cases:
        console.print(table)
    tag = " (cached)" if result.cached else f" in {result.seconds:.1f} s on {result.device}"
    if result.passed:
        console.print(f"[bold green]PASS[/]{tag}: {len(result.cases)} cases, forward and backward")
    else:
        console.print(f"[bold red]FAIL[/]{tag}: {len(result.reasons)} reason(s)")
        for r in result.reasons:
            console.print(f"  - {r}")


@app.command()
def bench(
    path: str = typer.Argument(..., metavar="CANDIDATE", help="The candidate: a file, or FILE@VARIANT."),
    op: str = typer.Option(None, "--op", metavar="OP", help="The op it implements (default: its folder's name)."),
    json_out: bool = typer.Option(False, "--json", help="Print the measurement as JSON."),
) -> None:
    """Median GPU time vs the reference and torch.compile, bandwidth vs the measured peak (needs a GPU)."""
    from .bench import bench as run_bench
    from .bench import has_gpu

    op = _resolve(path, op)
    if not has_gpu():
        typer.echo("kernels bench: no CUDA GPU on this machine; timings need one (`infrarsi kernels verify` runs on "
                   "the CPU)", err=True)
        raise typer.Exit(2)
    from .verify import verify as run_verify

    verdict = run_verify(path, op)
    if not verdict.passed:
        err.print(f"[bold red]error:[/] {path} fails verification ({'; '.join(verdict.reasons[:3])}); "
                  "timing a wrong kernel means nothing")
        raise typer.Exit(1)
    r = run_bench(path, op)
    if json_out:
        print(json.dumps(r.to_dict(), indent=1))
    else:
        table = Table(title=f"{r.op}: {Path(r.path).name} on {r.device}, {r.shape}, {r.reps} fresh inputs")
        for col in ("", "forward ms", "fwd+bwd ms"):
            table.add_column(col)
        table.add_row("candidate", f"{r.candidate_ms:.4f}", f"{r.candidate_fwd_bwd_ms:.4f}")
        table.add_row("reference (eager)", f"{r.reference_ms:.4f}", f"{r.reference_fwd_bwd_ms:.4f}")
        table.add_row("reference (torch.compile)", f"{r.compiled_ms:.4f}" if r.compiled_ms else "n/a",
                      f"{r.compiled_fwd_bwd_ms:.4f}" if r.compiled_fwd_bwd_ms else "n/a")
        console.print(table)
        console.print(f"speedup {r.speedup_vs_reference:.2f}x vs eager"
                      + (f", {r.speedup_vs_compiled:.2f}x vs compiled" if r.speedup_vs_compiled else "")
                      + f"; {r.achieved_gbps:.0f} GB/s = {100 * r.fraction_of_peak:.0f}% of the measured "
                      f"{r.peak_gbps:.0f} GB/s copy bandwidth")
        for s in r.rejected:
            console.print(f"[bold red]REJECTED:[/] {s}")
        for s in r.suspect:
            console.print(f"[bold yellow]SUSPECT:[/] {s}")
        for n in r.notes:
            console.print(f"note: {n}")
    raise typer.Exit(0 if r.accepted else 1)


@app.command("list")
def list_(op: str = typer.Argument(None, metavar="OP", help="One op (default: all).")) -> None:
    """The shipped candidates of each op (each variant of a file that declares VARIANTS), with their file's hash."""
    from .loader import OPS, list_candidates, sha256_of

    if op is not None and op not in OPS:
        _usage(f"unknown op {op!r}; use one of {', '.join(OPS)}")
    for name in [op] if op else OPS:
        for c in list_candidates(name):
            console.print(f"{name:14s} {c}  {sha256_of(c)[:12]}")


@app.command()
def generate(
    op: str = typer.Argument(..., metavar="OP", help=f"The op: {', '.join(OPS[:-1])} or {OPS[-1]}."),
    out_dir: Path = typer.Option(None, "--out-dir", metavar="DIR", help="Where to write it (default: kernels/OP/generated/)."),
) -> None:
    """Ask the configured LLM for a Triton candidate of OP, write it and verify it (one repair round)."""
    from ..priors import LLMConfig
    from .generate import KernelGenerationError, generate_kernel
    from .loader import OPS

    if op not in OPS:
        _usage(f"unknown op {op!r}; use one of {', '.join(OPS)}")
    llm = LLMConfig.from_env()
    if llm is None:
        _usage("no LLM configured: set OPENAI_API_KEY (or OPENAI_BASE_URL and INFRARSI_LLM_MODEL) to generate kernels")
    try:
        path, result = generate_kernel(op, llm=llm, out_dir=out_dir)
    except KernelGenerationError as e:
        err.print(f"[bold red]error:[/] {e}")
        raise typer.Exit(1) from None
    console.print(f"wrote {path}")
    _print_result(result)
    raise typer.Exit(0 if result.passed else 1)
