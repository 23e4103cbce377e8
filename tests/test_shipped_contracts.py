"""Every contract the project ships (found by glob: a new one is covered without editing this file) goes through
what a user's first `infrarsi tune` does before the search: `init` locks it, the doctor reads the lock back, its
knob space holds its baseline and the baseline's launch is built, the pre-flight estimate answers where it applies
(the CPU contracts, those of Megatron-LM and torchtitan in the slow run; the GPU contracts' fake steps take
minutes on 2 cores: slow too), and one real
trial runs where the contract runs on this CPU (the CPU contracts, and the simulated ones, whose trials run the cost
model on the CPU).

One `init` per contract, shared by a module-scoped fixture. The real trial is the cheapest one the contract allows:
its baseline (its step count is fixed by the workload), or a cheaper setting inside its own scope named in CHEAP.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from infrarsi import cli as infrarsi_cli
from infrarsi.adapters import adapter_class
from infrarsi.adapters.workload import Workload
from infrarsi.contract import load_contract, load_locked
from infrarsi.contract.lock import normalized
from infrarsi.estimate import EstimateError
from infrarsi.estimate.run import estimate_workload
from infrarsi.execute import make_executor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.rundir import RunDir
from infrarsi.trial.record import TrialStatus

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = sorted((ROOT / "contracts").glob("*.toml"))
IDS = [p.stem for p in CONTRACTS]

# The cheapest real trial where a contract's baseline is far slower than a setting in its own scope: minigpt's
# baseline runs micro-batch 2 with explicit attention; micro-batch 8 with SDPA does the same step in a quarter of the
# micro-batches. One thread and fp32, as the baseline: two threads on a loaded machine spin against each other, and
# bf16 on a CPU without native bf16 is slower than fp32 (a trial of micro-batch 8, bf16, 2 threads, fused AdamW ran
# past its 300 s limit at load 13 on 2 cores).
CHEAP = {"minigpt-cpu": {"micro_batch_size": 8, "attention_backend": "auto"}}


def runs_here(path: Path) -> bool:
    """Whether a trial of this contract runs on this machine: a CPU contract, or a simulated one."""
    c = load_contract(path)
    return c.hardware.kind == "cpu" or c.workload.adapter == "simulated"


def estimable(path: Path) -> bool:
    return bool(adapter_class(load_contract(path).workload.adapter).estimate_module)


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """name -> its run directory, `infrarsi init` run once per contract (in-process, as the CLI runs it)."""
    base, done = tmp_path_factory.mktemp("shipped"), {}

    def get(path: Path) -> Path:
        if path.stem not in done:
            run = base / path.stem
            got = CliRunner().invoke(infrarsi_cli.app, ["init", str(path), "--run-dir", str(run)])
            assert got.exit_code == 0, got.output
            assert RunDir(run).has_lock()
            done[path.stem] = run
        return done[path.stem]

    return get


def test_the_glob_finds_the_shipped_contracts():
    assert {"minigpt-cpu", "torchtitan-cpu", "megatron-cpu", "megatron-deepseek-v2-lite-h100x64"} <= set(IDS)


@pytest.mark.parametrize("path", CONTRACTS, ids=IDS)
def test_init_locks_it_and_the_doctor_reads_the_lock_back(path, locked, tmp_path, monkeypatch):
    run = locked(path)
    monkeypatch.chdir(tmp_path)  # the doctor run from another folder reads it the same way
    contract = load_locked(run)  # the doctor's first step (stages/doctor.py)
    assert normalized(contract) == normalized(load_contract(path))
    lock = RunDir(run).read_lock()
    assert all((path.parent / rel).is_file() for rel in lock.files), lock.files


@pytest.mark.parametrize("path", CONTRACTS, ids=IDS)
def test_its_knob_space_holds_its_baseline_and_the_baseline_launches(path, locked):
    run = locked(path)
    contract = load_locked(run)
    w = Workload.of_run(contract, run)
    space = w.knob_space()
    full = space.complete(contract.baseline)
    assert [v.message for v in space.validate(full)] == []
    assert set(contract.scope.knobs) <= set(space.names)
    spec = w.launch(full.to_dict())
    assert spec.argv and spec.processes * spec.nodes >= 1
    if w.reads_launch_file:  # the launch as the framework reads it: the baseline is a setting it can run
        assert w.parsed().world_size == contract.hardware.devices


def _estimate_param(path: Path):
    # The frameworks' fake steps (Megatron-LM, torchtitan) take 30-60 s per contract on 2 cores: slow. Their
    # estimates of CPU contracts keep default tests: tests/estimate/test_megatron.py::
    # test_cli_prints_each_pipeline_stages_peak_for_the_cpu_contract (contracts/megatron-cpu.toml) and
    # tests/estimate/test_torchtitan.py::test_fsdp_shards_parameters_and_adam_state_over_the_fake_world.
    heavy = load_contract(path).workload.adapter in ("megatron", "torchtitan")
    return pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if heavy else [])


@pytest.mark.parametrize("path", [_estimate_param(p) for p in CONTRACTS if runs_here(p)])
def test_the_estimate_answers_for_its_baseline_or_says_why_not(path, locked):
    run = locked(path)
    contract = load_locked(run)
    w = Workload.of_run(contract, run)
    baseline = w.knob_space().complete(contract.baseline).to_dict()
    if not estimable(path):
        with pytest.raises(EstimateError, match="the estimate runs the real model of"):
            estimate_workload(w, baseline)
        return
    est = estimate_workload(w, baseline)
    cap = contract.hardware.memory_capacity_gib * 2**30
    assert 0 < est.peak_bytes < cap, (est.peak_bytes, cap)  # the baseline runs, so it fits


@pytest.mark.slow  # a fake step of a 8B-70B model: 4-6 min each on 2 cores; the CPU contracts' estimates: above
@pytest.mark.parametrize("path", [p for p in CONTRACTS if not runs_here(p) and estimable(p)],
                         ids=[p.stem for p in CONTRACTS if not runs_here(p) and estimable(p)])
def test_the_estimate_answers_for_a_gpu_contracts_baseline(path, locked):
    run = locked(path)
    contract = load_locked(run)
    w = Workload.of_run(contract, run)
    est = estimate_workload(w, w.knob_space().complete(contract.baseline).to_dict())
    assert est.peak_bytes > 2**30


# Contracts whose real trial runs in the slow run only (15-30 s each on 2 quiet cores, a minute or more under load),
# with the default tests that run the same launch for real at a smaller size. A contract not named here (a new one
# included) runs its trial in the default run.
SLOW_TRIAL = {
    "torchtitan-cpu": "tests/adapters/torchtitan/test_real.py::test_fsdp_two_rank_trial_trains_and_is_measured "
                      "(its job file, FSDP on 2 ranks, sequence 128)",
    "megatron-cpu": "tests/workloads/test_megatron_gpt.py::"
                    "test_pipeline_parallel_trial_trains_and_the_offset_prices_it_within_ten_percent (its launcher)",
}


def _trial_param(path: Path):
    return pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if path.stem in SLOW_TRIAL else [])


@pytest.mark.parametrize("path", [_trial_param(p) for p in CONTRACTS if runs_here(p)])
def test_one_real_trial_runs(path, locked):
    run = locked(path)
    contract = load_locked(run)
    w = Workload.of_run(contract, run)
    setting = {**contract.baseline, **CHEAP.get(path.stem, {})}
    assert all(v in contract.scope.knobs.get(k, [v]) for k, v in setting.items())  # inside its own scope
    with Runner(RunRecord(run), make_executor(run_dir=run), w.adapter, contract,
                config=Runner.Config(parallel=1)) as runner:
        t = runner.submit(setting).result()
    assert t.status is TrialStatus.OK, (t.status, t.reason, t.evidence[-3:])
    assert t.metrics.step_time_s > 0 and len(t.metrics.losses) >= contract.invariants.loss.compare_steps
