"""Honest minigpt trials through the harness's clock, on a quiet machine or beside CPU burners: none may be invalid,
and the end-to-end window (the score) stays near the median gap between step lines (the per-step figure).

    .venv/bin/python scripts/bench_honest_clock.py [--trials 6] [--burners 1]

One row per trial: status, the harness's step time (end to end over the contract's window), the median gap, the
log's own step time, its time outside its steps (wall - steps x step) and whether execute/end_to_end.py bounds it
against the first trial (the baseline, as a search holds a trial to the doctor's and a pair to its own baseline run);
then the count of ok trials and of bounded ones. Burners are `python -c "while True: pass"` processes, killed at
the end. The trials run isolated in a temporary run directory (contracts/minigpt-cpu.toml, its baseline setting
and its knobs' other values, one at a time).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from infrarsi.adapters import get_adapter
from infrarsi.contract.model import load_contract
from infrarsi.execute.clock import measure
from infrarsi.execute.end_to_end import outside_s, pair_times
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = [{}, {"micro_batch_size": 4}, {"attention_backend": "auto"}, {"micro_batch_size": 8},
            {"recompute_granularity": "selective"}, {"adam_impl": "fused"}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--burners", type=int, default=0)
    a = ap.parse_args()
    contract = load_contract(ROOT / "contracts" / "minigpt-cpu.toml")
    base = dict(contract.baseline)
    settings = [{**base, **SETTINGS[i % len(SETTINGS)]} for i in range(a.trials)]
    run = Path(tempfile.mkdtemp(prefix="bench-honest-")) / "run"
    run.mkdir()
    (run / "contract.lock").write_text("{}")  # a run directory: its trials are isolated
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.burners)]
    try:
        rec = RunRecord(run)
        with Runner(rec, LocalExecutor(), get_adapter("minigpt", base_dir=ROOT), contract,
                    config=Runner.Config(oversubscribe=True)) as runner:
            trials = runner.run(settings)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    t = contract.invariants.timing
    print(f"{'setting':<40} {'status':<8} {'window s':>9} {'gap s':>8} {'log s':>8} {'outside s':>9} {'e2e':>8}")
    bounded = 0
    for trial, setting in zip(trials, settings):
        timing = measure(rec.trial_dir(trial.id), warmup_steps=t.warmup_steps, measured_steps=t.measured_steps)
        diff = {k: v for k, v in setting.items() if base.get(k) != v} or "baseline"
        m = trial.metrics
        fmt = lambda x: f"{x:.4f}" if x is not None else "-"  # noqa: E731
        print(f"{str(diff):<40} {trial.status.value:<8} {fmt(m.step_time_s):>9} "
              f"{fmt(timing.gap_s if timing else None):>8} {fmt(m.reported_step_time_s):>8} "
              f"{fmt(outside_s(trial)):>9} {e2e(trials[0], trial, t.startup_allowance_s):>8}")
        bounded += e2e(trials[0], trial, t.startup_allowance_s) == "bounded"
        if trial.status is not TrialStatus.OK:
            print("   ", trial.reason)
    ok = sum(t.status is TrialStatus.OK for t in trials)
    print(f"ok: {ok} of {len(trials)}, bounded end to end: {bounded} (burners: {a.burners})")


def e2e(base, trial, startup: float) -> str:
    """Whether the end-to-end check bounds ``trial`` against ``base``'s time outside its steps (and the contract's
    ``startup``, seconds)."""
    if TrialStatus.OK not in (base.status,) or trial.status is not TrialStatus.OK:
        return "-"
    return "bounded" if pair_times(base, trial, startup=startup)[2] else "agrees"


if __name__ == "__main__":
    main()
