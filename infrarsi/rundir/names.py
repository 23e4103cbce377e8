"""The one place that names the files of a run directory (``.infrarsi/<run>/``).

Layout (relative, posix)::

    contract.lock                 the locked contract (init); sealed by its own HMAC
    seals.jsonl                   the seal chain: one entry per write of a sealed record (chain.py)
    runner.lock                   who holds the run directory (runlock.py); not a record
    runner.reserve                space on the disk kept for the records (allocated; given back when full)
    noise.json                    the doctor's noise profile and loss referee
    search.json                   the search's proposals, priors, kernel verdicts and fitted models
    verification.progress.json    the A/B pairs run so far, per candidate, and the pairs run again
    verification.json             the re-verification: pairs, speedups with CIs, promotion
    stages.json                   which parts of the run stage finished, the search's seed and budget
    proposals.pending.json        why each setting of the batch in flight was proposed
    kernels/verdicts.json         the kernel verdicts of this run (run start)
    trials/<n>/trial.json         the Trial; launch.json, command, env.json: how it was launched;
              clock.json          the harness's own clock; proposal.json: why it was proposed;
              stdout, stderr      the trial's output (not records: the clock seals stdout's hash)
              job.sbatch          a Slurm trial's job script
    llm/<n>.json                  LLM exchanges (written before the lock too: not sealed)
    report.md, report.html, report_files/   the report (outputs, not records)

Every record but the lock is sealed into the chain when it is written (:class:`~infrarsi.rundir.RunDir`).
"""

from __future__ import annotations

from pathlib import Path

LOCK = "contract.lock"
SEALS = "seals.jsonl"
RUNNER_LOCK = "runner.lock"
RESERVE = "runner.reserve"
NOISE = "noise.json"
SEARCH = "search.json"
PROGRESS = "verification.progress.json"
VERIFICATION = "verification.json"
STAGES = "stages.json"
PENDING = "proposals.pending.json"
VERDICTS = "kernels/verdicts.json"
TRIALS = "trials"
LLM = "llm"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
REPORT_FILES = "report_files"

# in trials/<n>/
TRIAL = "trial.json"
LAUNCH = "launch.json"
COMMAND = "command"
ENV = "env.json"
CLOCK = "clock.json"
PROPOSAL = "proposal.json"
STDOUT = "stdout"
STDERR = "stderr"
JOB_SCRIPT = "job.sbatch"  # the Slurm executor's job script (its input, not a record)

# Records that must carry a seal wherever they exist (the run's own; each trial's).
SEALED = (NOISE, SEARCH, PROGRESS, VERIFICATION, STAGES, PENDING, VERDICTS)
SEALED_PER_TRIAL = (TRIAL, LAUNCH, COMMAND, ENV, CLOCK, PROPOSAL)


def sealed_on_disk(run_dir: Path) -> list[str]:
    """Every file of the run directory that must carry a seal (relative, posix), in chain order."""
    run = Path(run_dir)
    out = [n for n in SEALED if (run / n).is_file()]
    trials = run / TRIALS
    if trials.is_dir():
        for d in trials.iterdir():
            if d.name.isdigit():
                out += [f"{TRIALS}/{d.name}/{n}" for n in SEALED_PER_TRIAL if (d / n).is_file()]
    return sorted(out, key=order)


def order(rel: str) -> tuple:
    """Sort key: the run's own records first, then each trial's, by trial id."""
    parts = rel.split("/")
    if parts[0] == TRIALS and len(parts) > 1 and parts[1].isdigit():
        return (1, int(parts[1]), rel)
    return (0, 0, rel)
