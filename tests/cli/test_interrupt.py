"""Ctrl-C on a real run (a simulated 8 x H100 cluster: real trial processes, a second each): the command says how to
resume and exits 130; the trial it cut short is recorded cancelled, costs no budget and runs again on resume."""

import json
import os
import signal
import time

import pytest

from tests.faults.conftest import cli, signal_state, sim_contract, sim_env, start, trials


def _interrupt_during_a_search_trial(args, run_dir, env):
    """Start the command, SIGINT its process group (as a terminal does) while a search trial runs."""
    p = start(*args, env=env)
    deadline = time.time() + 240
    while time.time() < deadline and p.poll() is None:
        running = [t for t in trials(run_dir, role="search", finished=False).values() if t["status"] == "running"]
        if running:
            break
        time.sleep(0.02)
    assert p.poll() is None, p.communicate()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


@pytest.mark.slow  # ~90 s; the default run: test_cli.py::test_a_cancelled_setting_is_run_again_and_costs_nothing
def test_ctrl_c_prints_the_resume_command_and_the_cut_trial_reruns_without_costing_budget(tmp_path):
    env = sim_env(tmp_path)
    contract, run_dir = sim_contract(tmp_path, max_trials=5), tmp_path / "run"
    cancelled = []
    for _ in range(3):  # a trial can end in the instant before the signal: then interrupt the resumed run again
        code, _, err = _interrupt_during_a_search_trial(["tune", contract, "--run-dir", run_dir], run_dir, env)
        assert code == 130, err[-3000:]
        assert f"interrupted; resume with: infrarsi tune {contract} --run-dir {run_dir}" in err, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
        cancelled = [t for t in trials(run_dir, role="search").values() if t["status"] == "cancelled"]
        if cancelled:
            break
    assert cancelled, "no search trial was running when SIGINT came, three times"
    cut = {json.dumps(t["setting"], sort_keys=True) for t in cancelled}

    r = cli("tune", contract, "--run-dir", run_dir, env=env)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    search = trials(run_dir, role="search")
    measured = [t for t in search.values() if t["status"] != "cancelled"]
    again = {json.dumps(t["setting"], sort_keys=True) for t in measured}
    assert cut <= again, (cut, again)  # every setting the interrupt cut short ran again, to the end
    body = json.loads((run_dir / "stages.json").read_text())
    assert body["search"]["trials"] == len(measured)  # cancelled trials are not counted
    if body["search"]["stop_reason"] == "budget spent":
        assert len(measured) == 5  # the budget was intact: five measured trials besides the cancelled ones


def test_ctrl_c_under_json_still_prints_the_outcome_so_far(tmp_path):
    """`tune --json` cut by Ctrl-C (in the doctor's first run): stdout is the one JSON object docs/cli.md
    lists, with the outcome "unfinished" and exit code 130, not empty."""
    from tests.faults.conftest import wait_for

    env = sim_env(tmp_path)
    contract, run_dir = sim_contract(tmp_path), tmp_path / "run"
    p = start("tune", contract, "--run-dir", run_dir, "--json", env=env)
    # a measured baseline run, not the warm-up (ended by the harness a moment after its first step line): twice in
    # full-suite runs a SIGINT sent while the warm-up's trial record was the only one did not end the tune
    assert wait_for(lambda: trials(run_dir, role="doctor", finished=False), timeout_s=120, proc=p), p.communicate()
    state = signal_state(p.pid)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, f"signals of the tune when interrupted: {state}\n{err[-3000:]}"
    body = json.loads(out)
    assert body["outcome"] == "unfinished" and body["exit_code"] == 130 and body["run_dir"] == str(run_dir)
    assert body["stages"]["init"] == 0 and "doctor" not in body["stages"]
