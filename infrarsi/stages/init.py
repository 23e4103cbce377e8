"""init: validate the contract, lock it, and show what was locked.

Validated here, at the edge, before anything is locked or launched: the contract's fields (pydantic), the
knob space the adapter builds from it (every scope and baseline value typed against its knob), the
baseline against that space, and the kernel candidates it names against ``scope.files`` (contract/scope.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from ..contract import ContractError, write_lock

if TYPE_CHECKING:
    from ..adapters.base import Adapter
    from ..contract.model import Contract


def edge_problems(contract_path: Path) -> list[str]:
    """Everything that makes a contract unusable before the first launch, one line each ([] when none)."""
    from ..adapters import ADAPTERS, contract_adapter
    from ..contract import load_contract
    from ..contract.scope import repository_root, scope_problems

    c = load_contract(contract_path, adapters=ADAPTERS)
    base = Path(contract_path).resolve().parent
    out = scope_problems(c, [repository_root(), base, base.parent])
    adapter = contract_adapter(c.workload.adapter, contract_path)
    try:
        space = adapter.knob_space(c)
    except (ValueError, OSError) as e:  # ContractError included; a knob that refused a value is a pydantic error
        errors = getattr(e, "errors", None)
        msg = errors()[0]["msg"].removeprefix("Value error, ") if callable(errors) else str(e).splitlines()[0]
        return out + [msg]
    world = launch_world(adapter, c)
    if world is not None and world != c.hardware.devices:
        out.append(f"hardware.devices = {c.hardware.devices}, but the launch starts {world} ranks (its nodes x processes "
                   f"per node); set hardware.devices = {world} in the contract, or launch {c.hardware.devices} ranks")
    # Baseline knobs outside the (scoped) space describe the launch as it is; the adapter reads them itself.
    known = {k: v for k, v in c.baseline.items() if k in space}
    out += [f"baseline: {v}" for v in space.validate(space.complete(known)) if v.constraint != "missing_knob"]
    from ..contract.invariants import env_violations

    return out + env_violations(c, adapter)


def launch_world(adapter: Adapter, contract: Contract) -> int | None:
    """The ranks the contract's launch file starts, where it says (Megatron, torchtitan: ``--nnodes`` x
    ``--nproc-per-node``, ``srun`` tasks); None when it does not, or the adapter reads no launch."""
    from ..adapters.base import LaunchFileAdapter

    if not isinstance(adapter, LaunchFileAdapter) or not contract.workload.launch:
        return None
    return adapter.parsed(contract).world_size


def run(contract: Path, run_dir: Path, *, console: Console, err: Console) -> int:
    from ..adapters import ADAPTERS
    from ..contract import load_contract
    from .init_checks import check_files, check_launch

    try:
        # workload.adapter is one of the registered frameworks (checked here, at the edge: contract/ is below adapters/)
        check_files(load_contract(contract, adapters=ADAPTERS), contract)  # what the contract names exists, before anything reads it
        problems = edge_problems(contract)
        if problems:
            raise ContractError(f"{contract}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        warnings = check_launch(load_contract(contract), contract)  # the baseline launches an installed program
        c, lock = write_lock(contract, run_dir)
    except ContractError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 1
    from ..contract import contract_hash

    console.print(f"[bold]init[/] locked [cyan]{escape(c.name)}[/] ({c.workload.adapter}) -> {lock}  sha256 {contract_hash(c)[:12]}")
    fixed = ", ".join(f"{k}={v}" for k, v in c.fixed.items())
    console.print(f"  workload (fixed): {escape(fixed)}")
    console.print(f"  timing: warm-up {c.invariants.timing.warmup_steps} steps, measure {c.invariants.timing.measured_steps}, "
                  f"{c.invariants.timing.metric}; loss: first {c.invariants.loss.compare_steps} steps within rtol {c.invariants.loss.rtol}")
    scope = ", ".join(f"{k}{v}" for k, v in c.scope.knobs.items()) or "(the adapter's whole space)"
    console.print(escape(f"  scope: knobs {scope}; files {c.scope.files or '(none)'}"))
    console.print(f"  capacity {c.hardware.memory_capacity_gib} GiB per device x {c.hardware.devices}; budget {c.budget.max_trials} trials")
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    keep_out_of_git(run_dir, console)
    return 0


def keep_out_of_git(run_dir: Path, console: Console) -> None:
    """A run directory inside a git work tree is listed in that repository's info/exclude (local, never committed):
    its records never count as the user's change, so ``apply`` finds the tree clean."""
    from ..gitops import GitError, exclude

    try:
        added = exclude(run_dir)
    except (GitError, OSError) as e:  # the run goes on; apply names the entry if it is ever in the way
        console.print(f"  note: could not list {escape(str(run_dir))} in git's info/exclude ({escape(str(e))})")
        return
    if added:
        console.print(f"  the run directory is inside a git tree: {escape(added[1])} added to {escape(str(added[0]))} "
                      f"(local to this clone), so it never counts as a change")
