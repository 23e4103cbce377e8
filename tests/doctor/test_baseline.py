"""run_doctor through the real runner and record (toy workload): noise.json, failures, resume after kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.doctor import DoctorError, load_noise, run_doctor
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.trial import TrialStatus


def test_doctor_measures_and_writes_noise_json(tmp_path):
    lines = []
    res = run_doctor(tmp_path, toy_contract(), adapter=ToyAdapter(), executor=LocalExecutor(), progress=lines.append)
    n = res.noise
    assert n.repeats == 2 and n.trial_ids == [1, 2] and res.reused == 0  # trial 0: the unmeasured warm-up run
    assert all(0.015 < s < 1.0 for s in n.step_times_s) and n.ci95[0] <= n.median_step_s <= n.ci95[1]
    assert n.loss_reproduces and n.reference_losses == pytest.approx([4.9, 4.8, 4.7, 4.6])
    assert n.baseline["mode"] == "ok" and n.baseline["step_ms"] == 20  # completed with the knob defaults
    assert load_noise(tmp_path) == n
    assert [t.role for t in RunRecord(tmp_path).trials()] == ["warmup", "doctor", "doctor"]
    assert len(lines) == 3 and "warm-up run (not measured)" in lines[0] and "baseline run 2/2" in lines[2]
    again = run_doctor(tmp_path, toy_contract(), adapter=ToyAdapter(), executor=LocalExecutor())
    assert again.reused == 2 and len(RunRecord(tmp_path).trials()) == 3  # nothing rerun


def test_a_failing_baseline_stops_the_doctor_with_its_evidence(tmp_path):
    with pytest.raises(DoctorError, match=r"baseline trial 0 ended crash: .*failed on purpose"):
        run_doctor(tmp_path, toy_contract(baseline={"mode": "exit"}), adapter=ToyAdapter(), executor=LocalExecutor())
    assert load_noise(tmp_path) is None and len(RunRecord(tmp_path).trials()) == 1


DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {toydir!r})
    from toy import ToyAdapter, toy_contract
    from infrarsi.doctor import run_doctor
    from infrarsi.execute.local import LocalExecutor
    run_doctor({run!r}, toy_contract(baseline={{"step_ms": 500}}), adapter=ToyAdapter(), executor=LocalExecutor())
""")


def test_killed_doctor_resumes_and_reuses_finished_runs(tmp_path):
    toydir = str(Path(__file__).parents[1] / "execute")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER.format(toydir=toydir, run=str(tmp_path))])
    rec = RunRecord(tmp_path)
    deadline = time.monotonic() + 60
    while not ((t := rec.get(2)) and t.job_id):  # trial 0 is the warm-up run, 1 the first measured one
        assert time.monotonic() < deadline and driver.poll() is None, "the doctor never started its second run"
        time.sleep(0.05)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    first = rec.get(1)
    assert rec.get(0).role == "warmup" and first.status is TrialStatus.OK and rec.get(2).status is TrialStatus.RUNNING
    res = run_doctor(tmp_path, toy_contract(baseline={"step_ms": 500}), adapter=ToyAdapter(), executor=LocalExecutor())
    assert res.noise.trial_ids == [1, 2] and res.reused == 2  # trial 1 reused; trial 2 resumed in place
    assert rec.get(1) == first and [t.id for t in rec.trials()] == [0, 1, 2]
    assert rec.launch_info(2).attempt == 1


def test_noise_the_budget_cannot_resolve_stops_the_doctor_at_once_with_the_fix(tmp_path):
    """Steps that take 0.5x to 2x from run to run: verification could not confirm a 50% speedup within 12 pairs
    (nor with the 3 repeats the doctor may raise to), so the doctor stops with one sentence naming the noise and
    the fix, the noise record written."""
    from infrarsi.doctor import DoctorStop

    c = toy_contract(baseline={"mode": "noisy", "step_ms": 100})
    c = c.model_copy(update={"budget": c.budget.model_copy(update={
        "confirm_speedup": 0.5, "doctor_repeats": 3, "doctor_max_repeats": 3})})
    rng_tries = 0
    while True:  # three equal draws (1 in 9) measure no noise: draw again
        try:
            run_doctor(tmp_path / str(rng_tries), c, adapter=ToyAdapter(), executor=LocalExecutor())
        except DoctorStop as e:
            why = str(e)
            break
        rng_tries += 1
        assert rng_tries < 4
    assert why.startswith("step time varies ") and "run to run (load average " in why
    assert "this budget can confirm only a " in why and "budget.confirm_speedup" in why
    assert "run the same command again once the machine is quieter (the baseline is measured again" in why
    assert "budget.confirm_speedup = " in why and "start a new --run-dir" in why
    assert load_noise(tmp_path / str(rng_tries)).cv > 0.1


def test_a_doctor_run_again_after_a_noise_stop_measures_the_baseline_again(tmp_path):
    """A stop on the noise is a checkpoint: the same command run again (the machine may be quieter now) measures the
    baseline again instead of reusing the runs that stopped it (which stay in the record as evidence), and the stop
    says so, with the run directory and a budget value the contract accepts."""
    from infrarsi.doctor import DoctorStop
    from infrarsi.contract.model import Contract

    c = toy_contract()  # 20 ms steps: some noise whatever the machine; no contract could confirm a 0.0001% speedup
    c = c.model_copy(update={"budget": c.budget.model_copy(update={"confirm_speedup": 1e-6})})
    with pytest.raises(DoctorStop) as first:
        run_doctor(tmp_path, c, adapter=ToyAdapter(), executor=LocalExecutor())
    why = str(first.value)
    assert f"run the same command again once the machine is quieter (the baseline is measured again; these runs stay " \
           f"in {tmp_path} as evidence)" in why
    figure = float(why.split("budget.confirm_speedup = ")[1].split()[0])
    assert figure > 1e-6  # a value the contract's field accepts (and validates): what this noise can confirm
    Contract.model_validate({**c.model_dump(), "budget": {**c.budget.model_dump(), "confirm_speedup": figure}})
    assert load_noise(tmp_path).trial_ids == [1, 2]
    lines = []
    with pytest.raises(DoctorStop):
        run_doctor(tmp_path, c, adapter=ToyAdapter(), executor=LocalExecutor(), progress=lines.append)
    assert lines[0].startswith("the last measurement stopped on its noise") and "trials [1, 2]" in lines[0]
    assert not any(line.startswith("reusing") for line in lines)
    assert load_noise(tmp_path).trial_ids == [3, 4]  # measured again (no second warm-up: the machine is warm)
    rec = RunRecord(tmp_path)
    assert [(t.id, t.role, t.status) for t in rec.trials()][1:3] == [(1, "doctor", TrialStatus.OK),
                                                                     (2, "doctor", TrialStatus.OK)]  # kept


def test_the_warm_up_is_ended_after_its_first_step_line_and_nothing_reads_its_figures_as_data(tmp_path, recorded_root):
    """A baseline whose 4 steps take 0.5 s, then 30 s of shutdown: the doctor's warm-up is ended a quiet spell after
    step 1's line (ok, step 1's figures, its reason), the measured runs after their last; the noise, the report's
    fastest trial and step-time plot and the bank's distilled effects leave the warm-up out; no process is left."""
    import dataclasses

    from infrarsi.bank.transfer import distill
    from infrarsi.execute.local import processes_with_token
    from infrarsi.execute.tail_stop import ENDED, WARMUP_REASON
    from infrarsi.report import load_run
    from infrarsi.report.render import build, to_markdown
    from infrarsi.testing.recorded_run import copy_run
    from infrarsi.trial import WARMUP_ROLE

    lines = []
    c = toy_contract(baseline={"mode": "linger", "step_ms": 500, "alloc_mb": 64})
    res = run_doctor(tmp_path / "run", c, adapter=ToyAdapter(), executor=LocalExecutor(), progress=lines.append)
    rec = RunRecord(tmp_path / "run")
    warm, *runs = rec.trials()
    assert warm.role == WARMUP_ROLE and warm.status is TrialStatus.OK and warm.reason == WARMUP_REASON, warm.evidence
    assert any(e.startswith(ENDED + " its first step line, a warm-up") for e in warm.evidence)
    assert len(warm.metrics.losses) == 1 and warm.metrics.peak_memory_bytes is None and warm.cost.wall_s < 20
    assert [len(t.metrics.losses) for t in runs] == [4, 4] and all(t.metrics.peak_memory_bytes for t in runs)
    assert res.noise.trial_ids == [1, 2] and lines[0].startswith(f"warm-up run (not measured): {WARMUP_REASON}")
    for t in rec.trials():
        assert processes_with_token(rec.launch_info(t.id).token) == [], t.id

    # the report and the bank, over a recorded run with this warm-up in it, 100x slower than anything else
    data = load_run(copy_run(recorded_root, tmp_path / "project"))
    slow = warm.model_copy(update={"id": max(t.id for t in data.trials) + 1, "setting": data.trials[0].setting,
                                   "metrics": warm.metrics.model_copy(update={"step_time_s": 1e-9})})
    with_warm = dataclasses.replace(data, trials=[*data.trials, slow])
    md = to_markdown(build(with_warm, sections=["trials"]))
    assert f"(trial {slow.id}, warmup)" not in md and "Fastest single trial" in md  # faster than all: not a result
    assert f"| {slow.id} | warmup | ok | 1e-09 |" in md and WARMUP_REASON in md  # its row says what it is
    space = ToyAdapter().knob_space(c)
    assert distill([*runs, warm], space) == distill(runs, space)
