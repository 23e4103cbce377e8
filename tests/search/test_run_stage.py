"""The run stage end to end on a simulated cluster: search, re-verification, and resume after kill -9."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env, **kw):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, **kw)


@pytest.fixture
def sim_run(tmp_path):
    contract = tmp_path / "sim.toml"
    text = (ROOT / "contracts" / "sim-dense8b-h100x8.toml").read_text()
    contract.write_text(text.replace("doctor_repeats = 5", "doctor_repeats = 3").replace("max_trials = 40", "max_trials = 8"))
    env = {**os.environ, "INFRARSI_BANK": str(tmp_path / "bank.sqlite"), "INFRARSI_LLM": "off",
           "INFRARSI_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / "run"
    assert cli("init", contract, "--run-dir", run_dir, env=env).returncode == 0
    r = cli("doctor", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr
    return run_dir, env


def search_trials(run_dir):
    out = {}
    for p in sorted((run_dir / "trials").glob("*/trial.json")):
        t = json.loads(p.read_text())
        if t["role"] == "search" and t["status"] != "running":
            out[t["id"]] = t
    return out


def test_run_searches_verifies_and_writes_its_record(sim_run):
    run_dir, env = sim_run
    r = cli("run", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    trials = search_trials(run_dir)
    assert 1 <= len(trials) <= 8
    settings = [json.dumps(t["setting"], sort_keys=True) for t in trials.values()]
    assert len(set(settings)) == len(settings)  # never the same setting twice
    search = json.loads((run_dir / "search.json").read_text())
    assert set(map(int, search["proposals"])) == set(trials)
    assert search["models"]["memory_effects"] and search["models"]["time_effects"]
    ver = json.loads((run_dir / "verification.json").read_text())
    assert ver["candidates"], ver
    for c in ver["candidates"]:
        assert c["pairs"] == len(c["trials"]) >= 2
        assert c["promoted"] == (c["ci95"][0] > 1 + ver["mde"])
    # The typical config (full recompute, no overlap) is far from the optimum: the best candidate is promoted.
    assert any(c["promoted"] and c["speedup"] > 1.2 for c in ver["candidates"]), ver["candidates"]
    # Every finished trial went to the experience bank, with the time effects the run learned.
    stats = json.loads(cli("bank", "stats", "--json", env=env).stdout)
    assert stats["trials"] == len(list((run_dir / "trials").glob("*/trial.json"))), stats
    # ...and the next run of this workload starts from what this one found, never from its own past.
    again = run_dir.parent / "run2"
    contract = json.loads((run_dir / "contract.lock").read_text())["contract_path"]
    assert cli("init", contract, "--run-dir", again, env=env).returncode == 0
    assert cli("doctor", "--run-dir", again, env=env).returncode == 0
    r2 = cli("run", "--run-dir", again, "--max-trials", "2", env=env)
    assert r2.returncode == 0, r2.stderr[-2000:]
    seeded = json.loads((again / "search.json").read_text())
    assert seeded["bank_sources"] and str(run_dir.resolve()) in " ".join(seeded["bank_sources"])
    assert any(p.get("kind") == "initial" for p in seeded["proposals"].values())  # a seeded setting ran first


# slow (~30 s idle): kill -9 of `infrarsi run` and its resume stay covered by default by
# tests/faults/test_rerun_pairs.py::test_a_pair_cut_by_a_kill_is_recorded_and_a_rolled_back_pair_is_refused (the run
# stage killed and resumed, finished trials kept) and tests/execute/test_runner.py's kill -9 resume of the runner
@pytest.mark.slow
def test_a_killed_run_resumes_without_rerunning_finished_trials(sim_run):
    run_dir, env = sim_run
    p = subprocess.Popen([sys.executable, "-m", "infrarsi.cli", "run", "--run-dir", str(run_dir)], env=env, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while len(search_trials(run_dir)) < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = search_trials(run_dir)
    assert len(before) >= 3
    stamps = {i: (run_dir / "trials" / str(i) / "trial.json").stat().st_mtime_ns for i in before}
    r = cli("run", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    after = search_trials(run_dir)
    assert set(before) <= set(after) and len(after) <= 8
    assert all((run_dir / "trials" / str(i) / "trial.json").stat().st_mtime_ns == stamps[i] for i in before)
    settings = [json.dumps(t["setting"], sort_keys=True) for t in after.values()]
    assert len(set(settings)) == len(settings)
    assert (run_dir / "verification.json").exists()


def _trial(i, t):
    from infrarsi.trial import Metrics, Trial

    return Trial(id=i, setting={}, status="ok", role="verify", metrics=Metrics(step_time_s=t))


def test_a_pair_slowed_by_another_job_is_set_aside_by_a_rule_blind_to_the_side():
    from infrarsi.verify.reverify import disturbed_pairs

    pairs = [(_trial(0, 1.45), _trial(1, 0.55)), (_trial(2, 1.44), _trial(3, 15.8)),  # 30x: another job ran
             (_trial(4, 1.39), _trial(5, 0.54)), (_trial(6, 1.37), _trial(7, 0.54))]
    assert disturbed_pairs(pairs) == [pairs[1]]
    slow_base = [(_trial(0, 9.0), _trial(1, 0.55)), *pairs[2:], (_trial(8, 1.40), _trial(9, 0.56))]
    assert disturbed_pairs(slow_base) == [slow_base[0]]  # the same rule for the baseline side
    assert disturbed_pairs(pairs[:2]) == []  # two pairs cannot tell an outlier from a median


def test_fake_steps_may_cost_at_most_two_baseline_trials(monkeypatch):
    from types import SimpleNamespace

    from infrarsi.estimate.choice import estimate_budget_s

    monkeypatch.delenv("INFRARSI_ESTIMATE_BUDGET_S", raising=False)
    runs = [SimpleNamespace(cost=SimpleNamespace(wall_s=w)) for w in (20.0, 22.0, 30.0)]
    assert estimate_budget_s(runs) == 44.0  # 2 x the median wall time
    assert estimate_budget_s([SimpleNamespace(cost=SimpleNamespace(wall_s=900.0))]) == 300.0  # the estimate's cap
    monkeypatch.setenv("INFRARSI_ESTIMATE_BUDGET_S", "5")
    assert estimate_budget_s(runs) is None  # the environment decides


def test_only_settings_ranked_above_the_baseline_are_verified():
    from infrarsi.verify.reverify import to_verify

    assert to_verify(["a", "base", "b"], "base") == ["a"]  # b is predicted slower than the baseline
    assert to_verify(["base", "a", "b"], "base") == []
    assert to_verify(["a", "b", "c"], "base") == ["a", "b"]  # all above it: the best two


def test_the_tuner_is_told_a_trial_that_broke_the_loss_check_with_its_peak():
    from infrarsi.trial import Metrics, Trial
    from infrarsi.stages.run import outcome_of

    drift = Trial(id=3, setting={}, status="numerics_drift", role="search", reason="grad norm off",
                  metrics=Metrics(step_time_s=2.5, peak_memory_bytes=1.9 * 2**30, losses=[8.0]))
    o = outcome_of(drift)
    assert o.status == "numerics_drift" and o.peak_memory_bytes == 1.9 * 2**30 and o.step_time_s is None
    assert outcome_of(Trial(id=4, setting={}, status="crash", role="search", reason="x")).status == "crash"


def test_promotion_on_unisolated_evidence_needs_the_contracts_opt_in():
    """A candidate whose verification pairs include trials that ran without isolation is not promoted unless the
    contract says invariants.isolation.allow_unisolated = true (validated as a bool, off by default)."""
    from pydantic import ValidationError

    from infrarsi.contract.model import Contract
    from infrarsi.trial import Metrics, Trial, TrialStatus
    from infrarsi.verify.reverify import isolation_gate

    def trial(i, bare):
        w = ["ran without isolation: the Slurm node has no working bwrap (probe job: no bwrap on node1); ..."]
        return Trial(id=i, setting={}, status=TrialStatus.OK, metrics=Metrics(step_time_s=1.0), warnings=w if bare else [])

    base = {"name": "c", "workload": {"adapter": "minigpt"}, "hardware": {"memory_capacity_gib": 1}}
    strict = Contract.model_validate(base)
    loose = Contract.model_validate({**base, "invariants": {"isolation": {"allow_unisolated": True}}})
    isolated = [(trial(1, False), trial(2, False)), (trial(3, False), trial(4, False))]
    mixed = [(trial(1, False), trial(2, True)), (trial(3, True), trial(4, False))]
    assert isolation_gate(strict, isolated) == ([], None)
    bare, why = isolation_gate(strict, mixed)
    assert bare == [2, 3] and why.startswith("not promoted: 2 of its 4 verification trials ran without isolation")
    assert "invariants.isolation.allow_unisolated = true" in why
    assert isolation_gate(loose, mixed) == ([2, 3], None)
    with pytest.raises(ValidationError, match="allow_unisolated"):
        Contract.model_validate({**base, "invariants": {"isolation": {"allow_unisolated": "maybe"}}})


def test_the_run_stage_is_a_sequence_of_named_steps():
    """stages/run.py's ``run`` reads as its steps (load, guards, prepare, resume, the ask/tell loop and
    verification, bank), none of them a long body: every function of the module fits on one screen."""
    import ast

    tree = ast.parse((ROOT / "infrarsi" / "stages" / "run.py").read_text())
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    long = {name: n.end_lineno - n.lineno + 1 for name, n in funcs.items() if n.end_lineno - n.lineno + 1 > 55}
    assert long == {}
    called = [ast.unparse(c.func) for c in ast.walk(funcs["run"]) if isinstance(c, ast.Call)]
    steps = ["_load", "_guards", "_prepare", "_resume", "_search_and_verify", "bank_record"]
    assert [c for c in called if c in steps] == steps


def test_a_search_trial_is_held_against_the_incumbent_put_back_on_the_machines_scale_now(tmp_path):
    """prune_target: the told setting with the fastest run, at the median of its told runs (the doctor's scale), put
    back on the scale of the latest baseline run (a rebaseline at 1.2x the doctor's median: x 1.2); its figure's sd the
    doctor's CV over the root of its runs; None with budget.prune off or on a simulated cluster (times modelled)."""
    from infrarsi.adapters import get_adapter
    from infrarsi.contract.model import load_contract
    from infrarsi.doctor.noise import profile
    from infrarsi.execute.record import RunRecord
    from infrarsi.trial import Metrics, TrialStatus
    from infrarsi.search import Outcome, Tuner
    from infrarsi.stages.run import _Search, prune_target

    contract = load_contract(ROOT / "contracts" / "minigpt-cpu.toml")  # its own budget has no pruning: on here
    contract = contract.model_copy(update={"budget": contract.budget.model_copy(update={"prune": True})})
    adapter = get_adapter("minigpt")
    space = adapter.knob_space(contract)
    baseline = space.complete(contract.baseline)
    rec = RunRecord(tmp_path / "run")
    doctor = []
    for s in (1.0, 1.05, 0.95):
        t = rec.start(baseline.to_dict(), role="doctor")
        doctor.append(rec.finish(t.model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=s)})))
    noise = profile([t.metrics.step_time_s for t in doctor], trial_ids=[t.id for t in doctor])
    tuner = Tuner(space, memory_capacity_bytes=contract.hardware.memory_capacity_bytes, seed=0)
    for t in doctor:
        tuner.tell(baseline, Outcome("ok", step_time_s=t.metrics.step_time_s))
    fast = space.complete({**contract.baseline, "micro_batch_size": 8})
    tuner.tell(fast, Outcome("ok", step_time_s=0.5))
    t = rec.start(baseline.to_dict(), role="rebaseline")
    rec.finish(t.model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=1.2)}))
    s = _Search(run_dir=tmp_path / "run", contract=contract, noise=noise, record=rec, adapter=adapter, contract_dir=None,
                space=space, kernel_verdicts={}, baseline=baseline, base_trials=doctor, base_losses=None, tuner=tuner,
                ref_s=noise.median_step_s)
    target = prune_target(s)
    assert target.incumbent_s == pytest.approx(0.5 * 1.2 / 1.0) and target.incumbent_sd == pytest.approx(noise.cv)
    assert target.cv == pytest.approx(noise.cv) and target.mde == pytest.approx(noise.mde)
    assert (target.warmup_steps, target.measured_steps) == (2, 4) and "1 run(s)" in target.incumbent
    assert target.last_step == 10  # the loss check reads 10 steps, past the window's 6: no look at step 10
    off = contract.model_copy(update={"budget": contract.budget.model_copy(update={"prune": False})})
    s.contract = off
    assert prune_target(s) is None
    s.contract, s.adapter = contract, get_adapter("simulated")
    assert prune_target(s) is None
