"""init: validate the contract, lock it, and show what was locked."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..contract import ContractError, write_lock


def run(contract: Path, run_dir: Path, *, console: Console, err: Console) -> int:
    from ..contract import load_contract
    from .init_checks import check

    try:
        check(load_contract(contract), contract)  # what the contract names exists, before anything is locked
        c, lock = write_lock(contract, run_dir)
    except ContractError as e:
        err.print(f"[bold red]error:[/] {e}")
        return 1
    from ..contract import contract_hash

    console.print(f"[bold]init[/] locked [cyan]{c.name}[/] ({c.workload.adapter}) -> {lock}  sha256 {contract_hash(c)[:12]}")
    fixed = ", ".join(f"{k}={v}" for k, v in c.fixed.items())
    console.print(f"  workload (fixed): {fixed}")
    console.print(f"  timing: warm-up {c.invariants.timing.warmup_steps} steps, measure {c.invariants.timing.measured_steps}, "
                  f"{c.invariants.timing.metric}; loss: first {c.invariants.loss.compare_steps} steps within rtol {c.invariants.loss.rtol}")
    scope = ", ".join(f"{k}{v}" for k, v in c.scope.knobs.items()) or "(the adapter's whole space)"
    console.print(f"  scope: knobs {scope}; files {c.scope.files or '(none)'}")
    console.print(f"  capacity {c.hardware.memory_capacity_gib} GiB per device x {c.hardware.devices}; budget {c.budget.max_trials} trials")
    return 0
