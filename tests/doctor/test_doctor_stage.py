"""`infrarsi doctor` on the real minigpt workload: JSON output, noise.json, resume after kill -9."""

from __future__ import annotations

import io
import json
import statistics
import os
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from infrarsi.contract import write_lock
from infrarsi.execute.record import RunRecord
from infrarsi.trial import TrialStatus
from infrarsi.stages import doctor as stage

TINY = """
name = "minigpt-tiny"

[workload]
adapter = "minigpt"
args = { num_layers = 1, hidden_size = 32, num_attention_heads = 2, seq_length = 32, vocab_size = 64, global_batch_size = 4, train_iters = 4, lr = 1e-3, seed = 7 }

[hardware]
memory_capacity_gib = 0.75

[invariants.timing]
warmup_steps = 1
measured_steps = 3
timeout_s = 180

[invariants.loss]
compare_steps = 4
rtol = 0.02

[scope.knobs]
micro_batch_size = [1, 2, 4]

[baseline]
micro_batch_size = 2

[budget]
doctor_repeats = 2
confirm_speedup = 100.0  # these tests are about resuming and output: no noise stop on a loaded machine
"""


def _consoles():
    out, err = io.StringIO(), io.StringIO()
    return out, err, Console(file=out, width=200), Console(file=err, width=200)


def test_doctor_without_a_lock_is_one_clear_line(tmp_path):
    out, err, c, e = _consoles()
    assert stage.run(tmp_path / "nothing", json_out=True, console=c, err=e) == 1
    assert "infrarsi init" in err.getvalue() and out.getvalue() == ""


def test_doctor_on_minigpt_resumes_after_kill_9_and_prints_json(tmp_path):
    contract = tmp_path / "tiny.toml"
    contract.write_text(TINY)
    run = tmp_path / "run"
    write_lock(contract, run)
    log = tmp_path / "doctor.stderr"
    with log.open("w") as f:
        cli = subprocess.Popen([sys.executable, "-m", "infrarsi.cli", "doctor", "--run-dir", str(run), "--json",
                                "--debug"], stdout=subprocess.DEVNULL, stderr=f)
    rec = RunRecord(run)
    deadline = time.monotonic() + 120
    while not ((t := rec.get(2)) and t.job_id):  # 0: the unmeasured warm-up run; 1, 2: the measured ones
        assert time.monotonic() < deadline and cli.poll() is None, \
            f"doctor never started its second baseline run (exit {cli.poll()}):\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait()
    assert rec.get(0).role == "warmup" and rec.get(0).status is TrialStatus.OK
    first = rec.get(1)
    assert first.status is TrialStatus.OK and first.role == "doctor" and first.metrics.step_time_s > 0

    out, err, c, e = _consoles()
    assert stage.run(run, json_out=True, console=c, err=e) == 0, err.getvalue()
    j = json.loads(out.getvalue())
    assert j.keys() == {"cv", "median_step_s", "ci95", "mde", "repeats", "phases"}
    assert j["repeats"] == 2 and j["ci95"][0] <= j["median_step_s"] <= j["ci95"][1]
    assert {"forward-compute", "backward-compute", "optimizer"} <= set(j["phases"])
    trials = [t for t in rec.trials() if t.role == "doctor"]
    assert [t.id for t in rec.trials()] == [0, 1, 2, 3] and rec.get(1) == first  # reused; the killed run resumed in place
    assert rec.get(3).role == "doctor-seed-1" and rec.get(3).metrics.losses != first.metrics.losses  # seed + 1
    steps = sorted(t.metrics.step_time_s for t in trials)
    assert j["median_step_s"] == (steps[0] + steps[1]) / 2
    assert j["cv"] == pytest.approx(statistics.stdev(steps) / statistics.mean(steps), rel=0.05)  # two runs: sd / mean
    noise = json.loads((run / "noise.json").read_text())
    assert noise["loss_reproduces"] and len(noise["reference_losses"]) == 4 and noise["trial_ids"] == [1, 2]
    ref = noise["numerics"]  # the calibrated referee: loss and grad norm per step, bands from the spreads
    assert ref["reference"]["loss"] == first.metrics.losses[:ref["window"]]
    assert len(ref["reference"]["grad_norm"]) == ref["window"] and max(ref["seed_spread"]["grad_norm"]) > 0


@pytest.mark.slow  # the default run covers the decision: tests/doctor/test_baseline.py::test_noise_the_budget_cannot_...
def test_noise_the_budget_cannot_resolve_ends_the_doctor_with_exit_3(tmp_path):
    from infrarsi.errors import EXIT_NO_PROMOTION

    contract = tmp_path / "tiny.toml"
    contract.write_text(TINY.replace("confirm_speedup = 100.0", "confirm_speedup = 0.0001\ndoctor_max_repeats = 2"))
    run = tmp_path / "run"
    write_lock(contract, run)
    out, err, c, e = _consoles()
    assert stage.run(run, json_out=False, console=c, err=e) == EXIT_NO_PROMOTION == 3
    line = err.getvalue()
    assert "stopped: step time varies " in line and "this budget can confirm only a " in line, line
    assert (run / "noise.json").is_file()
