"""Pruning (execute/prune.py): a search trial is stopped once its measured steps show it slower than the incumbent by
more than the detectable effect; an honest trial as fast as the incumbent almost never is.

The rule on gaps (deterministic), the A/A false-prune rate and the power on simulated draws at CV 1-15%
(infrarsi/testing/prune_draws.py; ``scripts/bench_prune.py`` prints the table), and the runner stopping a real
process from the harness's clock, recording it ``pruned`` with its lower bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from toy import TOY, ToyAdapter, toy_contract

from infrarsi.contract.model import Contract
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.prune import Target, judge, window_gaps
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus
from infrarsi.testing.prune_draws import prune_rate


def _target(incumbent_s: float = 0.1, **kw: Any) -> Target:
    return Target(**{"incumbent_s": incumbent_s, "incumbent_sd": 0.02, "cv": 0.03, "mde": 0.05, "warmup_steps": 2,
                     "measured_steps": 8, **kw})


def test_a_trial_twice_as_slow_is_pruned_at_the_third_gap_and_its_bound_is_above_the_threshold():
    t = _target()
    assert judge([0.2, 0.2], t) is None  # two gaps: never judged
    d = judge([0.2, 0.2, 0.2], t, step=5)
    assert d is not None and d.gaps == 3 and d.step == 5
    assert t.threshold_s == pytest.approx(0.105) and d.threshold_s < d.bound_s < d.median_s == pytest.approx(0.2)
    line = d.line(t)
    assert line.startswith("pruned at step 5: median of 3 measured gaps 200.0 ms") and "> incumbent 100.0 ms" in line


def test_no_look_is_made_once_the_trials_last_read_step_is_in():
    """megatron-cpu's window (warm-up 1 + 3 measured) ends at step 4, its loss check's last step too: the third gap
    comes with step 4's line, where stopping saves nothing and would turn a measured time into a bound and skip the
    loss check; a trial twice as slow is left to end there, ok. With steps left after it (minigpt: window 6, loss
    check 10), the same gaps prune."""
    slow = [0.2, 0.2, 0.2]
    assert judge(slow, _target(warmup_steps=1, measured_steps=3, last_step=4), step=4) is None
    assert judge(slow, _target(warmup_steps=1, measured_steps=3, last_step=10), step=4) is not None
    assert judge(slow, _target(warmup_steps=1, measured_steps=3), step=4) is not None  # no last step stated


def test_one_late_line_never_prunes_and_spread_widens_the_bound():
    t = _target()
    # a line held back 0.5 s lengthens one gap and shortens the next: the median does not move, the spread grows
    assert judge([0.1, 0.6, 0.01, 0.1, 0.1], t) is None
    assert judge([0.1, 0.1, 0.6], t) is None
    # the same median (0.13 s, 30% slower) pruned when the gaps agree, not when they scatter (a loaded machine)
    steady = judge([0.13, 0.13, 0.13, 0.13], t)
    scattered = judge([0.05, 0.13, 0.13, 0.4], t)
    assert steady is not None and scattered is None


def test_a_setting_as_fast_as_the_incumbent_is_not_pruned_and_gaps_come_from_paced_lines_only():
    assert judge([0.1] * 8, _target()) is None
    assert judge([0.104, 0.099, 0.101, 0.1, 0.103], _target()) is None
    lines = [(1, 0.5, 1), (2, 0.6, 2), (3, 0.7, 3), (4, 0.8, 3), (5, 0.9, 4)]  # steps 3 and 4 came in one read
    assert window_gaps(lines, warmup_steps=2, measured_steps=8) == (pytest.approx([0.1, 0.1]), 5)
    burst = [(1, 0.5, 1), (2, 0.6, 2), (3, 0.7, 2), (4, 0.8, 2), (5, 0.9, 3)]  # mostly one read: buffered
    assert window_gaps(burst, warmup_steps=2, measured_steps=8) == ([], 5)
    lines = [(1, 0.5, 1), (2, 0.6, 2), (3, 0.7, 3), (4, 0.85, 4), (4, 0.9, 5)]  # the last line of a step counts
    assert window_gaps(lines, warmup_steps=2, measured_steps=8) == (pytest.approx([0.1, 0.2]), 4)


@pytest.mark.parametrize("field, value", [("incumbent_s", 0.0), ("cv", float("nan")), ("mde", -1.0),
                                          ("incumbent_sd", -0.1), ("alpha", 0.6), ("min_gaps", 1)])
def test_a_bad_target_is_refused_in_one_line_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^Target\.{field} must be"):
        _target(**{field: value})


@pytest.mark.parametrize("cv", [0.01, 0.03, 0.05, 0.10, 0.15])
def test_aa_an_honest_setting_as_fast_as_the_incumbent_is_pruned_in_at_most_5_percent(cv):
    """Simulated draws (prune_draws.py): the doctor's CV estimated from 3 runs, 5% of lines held back by a loaded
    machine, a look per gap; 600 draws per CV, 4 and 8 measured steps, an incumbent of 1 run and of 3."""
    for measured, runs in ((4, 1), (8, 3)):
        rate = prune_rate(cv=cv, draws=600, seed=11, measured_steps=measured, incumbent_runs=runs)
        assert rate <= 0.05, (cv, measured, runs, rate)


def test_a_setting_twice_as_slow_is_pruned_most_of_the_time_at_low_noise():
    assert prune_rate(cv=0.03, slower=2.0, draws=300, seed=3) >= 0.6
    assert prune_rate(cv=0.03, slower=1.3, draws=300, seed=4) >= 0.5


class _LongToy(ToyAdapter):
    """The toy workload with 12 steps (the window below has 8 measured)."""

    def launch(self, contract: Contract, setting: Mapping[str, Any]) -> LaunchSpec:
        spec = super().launch(contract, setting)
        argv = list(spec.argv)
        argv[argv.index("--steps") + 1] = "12"
        assert argv[1] == TOY
        return spec.model_copy(update={"argv": argv})


def _contract() -> Contract:
    c = toy_contract(timeout_s=30)
    timing = c.invariants.timing.model_copy(update={"warmup_steps": 2, "measured_steps": 8})
    return c.model_copy(update={"invariants": c.invariants.model_copy(update={"timing": timing})})


def test_the_runner_stops_a_slow_trial_from_the_harness_clock_and_records_it_pruned(tmp_path):
    """A real process (100 ms steps) held against a 20 ms incumbent is stopped after its 5th step line (3 gaps of
    the window), recorded pruned with a step time that is a lower bound above the threshold; the same setting held
    against a 100 ms incumbent runs to the end, ok."""
    rec = RunRecord(tmp_path)
    contract = _contract()
    slow = Target(incumbent_s=0.02, incumbent_sd=0.03, cv=0.03, mde=0.05, warmup_steps=2, measured_steps=8,
                  incumbent="trial 0")
    even = Target(incumbent_s=0.1, incumbent_sd=0.03, cv=0.03, mde=0.05, warmup_steps=2, measured_steps=8)
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), _LongToy(), contract) as runner:
        pruned = runner.submit({"mode": "ok", "step_ms": 100}, prune=slow).result()
        full = runner.submit({"mode": "ok", "step_ms": 100}, prune=even).result()
    assert pruned.status is TrialStatus.PRUNED, (pruned.reason, pruned.evidence)
    assert pruned.metrics.step_time_s > 0.02 * 1.05 and pruned.reason.startswith("slower than the incumbent")
    assert any(e.startswith("pruned at step") and "(trial 0)" in e for e in pruned.evidence)
    assert len(pruned.metrics.step_times_s) < 12  # stopped before its last step
    assert full.status is TrialStatus.OK and len(full.metrics.step_times_s) == 12, full.reason
    assert pruned.cost.wall_s < full.cost.wall_s
    assert rec.get(pruned.id) == pruned  # on disk as recorded: the status and its lower bound


@pytest.mark.slow
def test_the_benchmark_prints_the_aa_table():
    """scripts/bench_prune.py aa (BENCHMARKS.md's table), with few draws (slow: 15 cells of draws; the default
    test_aa_* and test_a_setting_twice_as_slow_* run the same prune_rate)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "bench_prune.py"), "aa", "--draws", "40"],
                       capture_output=True, text=True, timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "warm-up 2, measured 20 steps" in r.stdout and " 15%" in r.stdout and "A/A pruned" in r.stdout


@pytest.mark.slow
def test_the_benchmark_prints_the_outrank_table_and_a_runs_cost(tmp_path):
    """scripts/bench_prune.py outrank and cost (BENCHMARKS.md's tables): the skip's A/A table with few draws, and a
    real run's split (two real toy trials). Slow: 30 cells of draws, three interpreters importing torch; the default
    tests/verify/test_speedup.py::test_aa_the_skip_before_pairs_* and tests/report/test_cost.py::test_start_up_is_split_*
    keep the same functions covered."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    bench = str(root / "scripts" / "bench_prune.py")
    r = subprocess.run([sys.executable, bench, "outrank", "--draws", "40"], capture_output=True, text=True,
                       timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "A/A skipped" in r.stdout and " 15%" in r.stdout and "3.0x" in r.stdout
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), _LongToy(), _contract()) as runner:
        runner.submit({"mode": "ok", "step_ms": 100}, role="doctor").result()
        runner.submit({"mode": "ok", "step_ms": 20}, role="verify").result()
    r = subprocess.run([sys.executable, bench, "cost", "--run-dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2 finished trials" in r.stdout and "\ndoctor " in r.stdout and "\nverification " in r.stdout
    assert " tail " in r.stdout  # the last step line to the end, its own column
    assert "first step line" in r.stdout and "interpreter + import torch here" in r.stdout
