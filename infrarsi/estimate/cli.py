"""`infrarsi estimate CONTRACT`: will this setting fit? One fake training step of the real model, on one CPU.

    infrarsi estimate contracts/minigpt-cpu.toml --set micro_batch_size=16 --set recompute_granularity=full
    infrarsi estimate contracts/llama3-8b-h100x64.toml --json

The setting is the contract's baseline with ``--set`` applied. Prints the per-rank peak by category, what is
added for what trackers cannot see (and where that figure comes from), the contract's capacity and the verdict,
and a roofline step time where the device's peaks are known. ``--json`` prints one object.

For Megatron, torchtitan and simulated GPU contracts it also prints the step-time model's predicted step time with its
interval (:mod:`.step_model`); ``--fastest N`` lists the N fastest layouts of the scope that fit, without a fake step:

    infrarsi estimate contracts/sim-dense8b-h100x8.toml --fastest 5 --json
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ..adapters.base import Adapter
    from ..contract.model import Contract
    from ..knobs import KnobSpace

GiB = 2**30
_IMPORTED = time.monotonic()


def _launch_setting(contract: Contract, adapter: Adapter, space: KnobSpace) -> dict:
    """The knobs a Megatron launch sets itself (its flags), so that a contract without a [baseline] is estimated as
    its launch is written rather than at the catalog's defaults (``adapter``: the one that read the space)."""
    from ..adapters.base import LaunchFileAdapter

    if not (isinstance(adapter, LaunchFileAdapter) and adapter.launch_setting_is_baseline):
        return {}
    return {k: v for k, v in adapter.parsed(contract).setting.items() if k in space and v is not None}


def _setting(contract: Contract, adapter: Adapter, space: KnobSpace, sets: list[str]) -> dict:
    out = {**_launch_setting(contract, adapter, space), **contract.baseline}
    by_name = {k.name: k for k in space.knobs}
    for item in sets:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--set {item!r}: expected KNOB=VALUE, e.g. --set micro_batch_size=4")
        if name not in by_name:
            raise ValueError(f"--set {name}: not a knob of this contract; known: {sorted(by_name)}")
        out[name] = by_name[name].coerce(raw)
    return out


def estimate(
    contract_path: Path = typer.Argument(..., metavar="CONTRACT", help="The contract TOML file."),
    sets: list[str] = typer.Option([], "--set", metavar="KNOB=VALUE", help="KNOB=VALUE over the contract's baseline (repeatable)."),
    json_out: bool = typer.Option(False, "--json", help="Print the estimate as one JSON object."),
    unseen_gib: float = typer.Option(None, "--unseen-gib", metavar="GIB", help="Bytes outside tensors per rank (GiB), measured on "
                                                                "your device; default: the measured constant."),
    fastest: int = typer.Option(None, "--fastest", metavar="N", min=1, help="List the N fastest layouts of the contract's scope "
                                "that fit, by the step-time model (no fake step)."),
) -> None:
    """Pre-flight estimate: per-rank peak memory by category and a predicted step time, before launching."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..adapters.workload import Workload
    from ..contract.model import ContractError
    from ..progress import Heartbeat
    from . import EstimateError
    from .devices import device_for
    from .run import estimate_workload, unsupported

    console, err = Console(highlight=False, emoji=False), Console(stderr=True, highlight=False, emoji=False)
    bad = [s for s in sets if not s.partition("=")[0] or not s.partition("=")[1]]
    if bad:  # bad usage, before the contract is read
        err.print(f"[bold red]error:[/] --set {bad[0]!r}: expected KNOB=VALUE, e.g. --set micro_batch_size=4",
                  markup=True)
        raise typer.Exit(2)
    try:
        workload = Workload.of_file(contract_path)  # the launch read from the contract's folder, as trials read it
        contract, adapter = workload.contract, workload.adapter
        model_only = fastest is not None or (adapter.step_model and not adapter.estimate_module)  # no fake step
        why = None if model_only else unsupported(contract)
        if why:  # said before anything is stepped
            raise EstimateError(why)
        space = workload.knob_space()
        try:
            setting = space.complete(_setting(contract, adapter, space, sets))
        except ValueError as exc:  # a --set naming no knob, or a value the knob does not take: bad usage
            err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
        if model_only:
            _predict_only(console, err, workload, setting.to_dict(), fastest, json_out)
            return
        kw = {"device": device_for(contract.hardware)}
        if unseen_gib is not None:
            kw["unseen_gib"] = unseen_gib
        if adapter.estimate_progress:  # a step of minutes: say how far it is, on stderr
            err.print(f"launch read, setting completed ({since_start():.0f} s); the fake step runs in a process "
                      "of its own", style="dim")
            kw["progress"] = lambda line: err.print(f"  {line} [{since_start():.0f} s]", style="dim")
        with Heartbeat(err, f"estimate: stepping {contract.name}'s real model on fake tensors (per-rank memory "
                            f"by category; a minute or two for a large job)", plain_every_s=30.0, announce=True):
            e = estimate_workload(workload, setting, **kw)
    except (ContractError, EstimateError, ValueError, OSError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, never wrapped
        raise typer.Exit(1)
    cap = contract.hardware.memory_capacity_bytes
    fits = e.peak_bytes <= cap
    pred, refused = _prediction(workload, setting.to_dict())
    if json_out:
        print(json.dumps({**e.to_dict(), "setting": setting.to_dict(), "capacity_bytes": cap, "fits": fits,
                          "prediction": pred.to_dict() if pred else None, "prediction_refused": refused,
                          "end_to_end_s": round(since_start(), 1)}, default=str))
        return
    t = Table(title=f"{contract.name}: rank {e.layout.get('rank', 0)} of {e.world_size}, peak by category")
    t.add_column("category")
    t.add_column("GiB", justify="right")
    for k, v in e.by_category().items():
        t.add_row(k, f"{v / GiB:.3f}")
    t.add_row("tensors (tracked)", f"{e.tracked_bytes / GiB:.3f}")
    t.add_row("outside tensors", f"{e.unseen_bytes / GiB:.3f}")
    t.add_row("[bold]peak[/]", f"[bold]{e.peak_bytes / GiB:.3f}[/]")
    console.print(t)
    if e.per_rank:
        _per_rank_table(console, e)
    console.print(f"layout: {', '.join(f'{k}={v}' for k, v in e.layout.items())}")
    console.print(f"outside tensors: {e.unseen_source}")
    verdict = "[green]fits[/]" if fits else "[red]does not fit[/]"
    console.print(f"capacity {cap / GiB:.2f} GiB per rank: {verdict} ({(cap - e.peak_bytes) / GiB:+.2f} GiB headroom)")
    if e.step_time_s is not None:
        console.print(f"roofline step time: {e.step_time_s:.3f} s (compute and memory traffic at datasheet peaks; "
                      f"communication not counted: a lower bound)")
    else:
        console.print(f"step time: {e.step_time_note}")
    console.print(_describe_or_refusal(pred, refused))
    for n in e.notes:
        console.print(f"note: {n}")
    console.print(f"estimated in {since_start():.1f} s end to end (start-up and reading the launch included; the "
                  f"ranks' fake steps {e.wall_s:.1f} s, summed); not seen by any tracker: allocator fragmentation, NCCL/gloo "
                  f"buffers, CUDA context / the CPU runtime (the 'outside tensors' line)")


def _prediction(workload, setting: dict):
    """(the step-time model's prediction, None) for ``setting``, or (None, why it cannot price it)."""
    from . import EstimateError
    from . import step_model as sm

    try:
        w = sm.cost_workload(workload)
        full = sm.launch_setting(workload, setting)
        return sm.predict(w, full, sm.capacity_bytes(workload), notes=sm.prediction_notes(full, w)), None
    except EstimateError as e:
        return None, str(e)


def _describe_or_refusal(pred, refused: str | None) -> str:
    from rich.markup import escape

    from .step_model import describe

    if pred is None:
        return f"predicted step time: none ({escape(refused or '')})"
    return escape(describe(pred)) + "".join(f"\nnote: {escape(n)}" for n in pred.notes)


def _predict_only(console, err, workload, setting: dict, n: int | None, json_out: bool) -> None:
    """The step-time model's answer alone (no fake step): the setting's predicted time and memory, and with ``n`` the
    N fastest layouts of the scope that fit. Exit 1 with the reason when the model cannot price the contract."""
    from rich.markup import escape
    from rich.table import Table

    from . import EstimateError
    from . import step_model as sm

    try:
        w = sm.cost_workload(workload)  # the contract itself cannot be priced: one line, exit 1
    except EstimateError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(1) from None
    pred, refused = _prediction(workload, setting)  # this setting may not be, while others of the scope are
    ranking = None
    if n is not None:
        ranking = sm.fastest(w, workload.knob_space(), sm.launch_setting(workload, setting), sm.capacity_bytes(workload), n)
    elif pred is None:
        err.print(f"[bold red]error:[/] {escape(refused or '')}", soft_wrap=True)
        raise typer.Exit(1)
    if json_out:
        print(json.dumps({"contract": workload.contract.name, "setting": setting,
                          "prediction": pred.to_dict() if pred else None, "prediction_refused": refused,
                          **({"ranking": ranking.to_dict()} if ranking else {})}, default=str))
        return
    cap = sm.capacity_bytes(workload)
    console.print(f"{workload.contract.name}: setting {', '.join(f'{k}={v}' for k, v in setting.items())}")
    if pred is not None:
        verdict = "fits" if pred.fits else "does not fit"
        console.print(f"model memory {pred.memory_bytes / GiB:.2f} GiB of {cap / GiB:.2f} GiB per GPU: {verdict}")
    console.print(_describe_or_refusal(pred, refused))
    if ranking is None:
        return
    t = Table(title=f"{len(ranking.fastest)} fastest of {ranking.considered} valid layouts in scope "
                    f"({ranking.out_of_memory} out of memory, {ranking.unpriced_count} not priced)")
    for col in ("#", "step s", "interval s", "GiB", "changed from the setting"):
        t.add_column(col, justify="left" if col.startswith("changed") else "right")
    for i, p in enumerate(ranking.fastest, 1):
        diff = sm.changed(p.setting, sm.launch_setting(workload, setting))
        t.add_row(str(i), f"{p.step_time_s:.3f}", f"{p.low_s:.3f}-{p.high_s:.3f}", f"{p.memory_bytes / GiB:.2f}",
                  escape(", ".join(f"{k}={v}" for k, v in diff.items()) or "(the setting itself)"))
    console.print(t)
    if ranking.held:
        console.print(f"held at the setting's value (not in the step-time model): "
                      f"{escape(', '.join(f'{k}={v}' for k, v in ranking.held.items()))}")
    for u in ranking.unpriced:
        console.print(f"not priced: {escape(str(u['setting']))}: {escape(u['reason'])}")
    console.print("memory here is the step-time model's analytical figure; `infrarsi estimate CONTRACT --set ...` on a "
                  "listed layout steps the real model for its memory where the framework has a fake step")


def since_start() -> float:
    """Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime), so that the
    time printed includes the interpreter's start-up and the imports; else since this module was imported."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def _per_rank_table(console, e) -> None:
    """The ranks a Megatron estimate stepped (first and last pipeline stage, most experts), each by category."""
    from rich.table import Table

    from ..fakestep.result import CATEGORY, CATEGORIES

    t = Table(title="ranks estimated (GiB)")
    for col in ("rank", "weights", "grads", "optim", "act", "temp", "outside", "peak", "holds"):
        t.add_column(col, justify="left" if col == "holds" else "right")
    for r in e.per_rank:
        cat = dict.fromkeys(CATEGORIES, 0)
        for k, v in r["tracked"].items():
            cat[CATEGORY.get(k, "temporaries")] += v
        holds = f"{r['why']}: {r['layers']} layers" + (f", {r['local_experts']} experts" if r["local_experts"] else "")
        t.add_row(str(r["rank"]), *(f"{cat[c] / GiB:.2f}" for c in CATEGORIES[:5]), f"{r['unseen_bytes'] / GiB:.2f}",
                  f"{r['peak_bytes'] / GiB:.2f}", holds)
    console.print(t)
