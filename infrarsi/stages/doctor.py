"""doctor: run the baseline ``budget.doctor_repeats`` times; record the noise; print CV, CI, MDE, phases.

Exit codes: 0 measured (a noise warning is still 0), 1 the baseline failed or does not reproduce, 3
(``EXIT_NO_PROMOTION``) the noise means this budget cannot confirm the speedup the contract asks for (one sentence
with the figures and the fix; the noise record is written).
``--json`` prints only {"cv", "median_step_s", "ci95", "mde", "repeats", "phases"} on stdout.
The executor is local (torchrun for multi-process baselines) unless $INFRARSI_EXECUTOR=slurm.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..contract import ContractError, load_locked
from ..doctor import DoctorError, DoctorStop, run_doctor
from ..errors import EXIT_NO_PROMOTION
from ..doctor.noise import noise_warning
from ..execute.slurm import SlurmError, SlurmUnreachable
from ..progress import Heartbeat, eta
from ..rundir import RunDir


def run(run_dir: Path, *, json_out: bool, console: Console, err: Console) -> int:
    try:
        contract = load_locked(run_dir)
    except ContractError as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 1
    say = err if json_out else console  # with --json, stdout carries the JSON only
    say.print(f"[bold]doctor[/] {contract.name}: baseline x {contract.budget.doctor_repeats} "
              f"(warm-up {contract.invariants.timing.warmup_steps} steps, measure {contract.invariants.timing.measured_steps})")
    repeats, done = contract.budget.doctor_repeats, []

    def progress(line: str) -> None:  # each finished run: its line, then the live line's next subject
        say.print(f"  {line}")
        if line.startswith(("baseline run", "reusing", "resumed")):
            done.append(line)
        beat.note(f"doctor: baseline run {min(len(done) + 1, repeats)} of {repeats}",
                  eta(len(done), repeats, time.monotonic() - beat.started))

    try:
        with Heartbeat(say, f"doctor: baseline run 1 of {repeats}") as beat:
            result = run_doctor(run_dir, contract, progress=progress)
    except DoctorStop as e:
        err.print(f"[bold yellow]stopped:[/] {escape(str(e))}", soft_wrap=True)
        return EXIT_NO_PROMOTION
    except (DoctorError, ContractError, SlurmUnreachable, SlurmError) as e:
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        return 1
    n = result.noise
    if json_out:
        print(json.dumps(n.summary_json()), file=console.file, flush=True)
    else:
        t = Table(title=f"baseline noise ({n.repeats} runs, trials {n.trial_ids})", show_header=False)
        t.add_row("median step", f"{n.median_step_s:.4g} s  (95% CI {n.ci95[0]:.4g} .. {n.ci95[1]:.4g})")
        t.add_row("CV", f"{n.cv:.2%}")
        t.add_row("min. detectable effect", f"{n.mde:.2%} with {n.repeats} repeats per setting")
        t.add_row("loss reproduces", f"max rel diff {n.loss_max_rel_diff:.2g} (rtol {contract.invariants.loss.rtol})")
        total = sum(n.phases.values())
        for name, s in sorted(n.phases.items(), key=lambda kv: -kv[1]):
            t.add_row(f"  phase {name}", f"{s:.4g} s/step ({s / total:.0%})" if total else f"{s:.4g} s/step")
        console.print(t)
        console.print(f"  wrote {RunDir(run_dir).file(RunDir.NOISE)}")
    warning = noise_warning(n)
    if warning:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    return 0
