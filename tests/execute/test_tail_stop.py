"""The end at the last step (execute/tail_stop.py): a trial is ended by the harness once every line it is measured by
has come, recorded as a finished trial, its shutdown not run; a trial that fails or hangs before that ends as before.

Real processes (tests/execute/toy_workload.py) through the runner, locally and as Slurm jobs, and the watch itself on
output files written line by line (copies per rank, a stated last step, the quiet spell)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.contract.model import Contract
from infrarsi.execute.clock import last_step_s
from infrarsi.execute.local import LocalExecutor, processes_with_token
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.execute.slurm import SlurmExecutor
from infrarsi.execute.tail_stop import ENDED, QUIET_S, WARMUP_REASON, TailWatch
from infrarsi.report.cost import run_cost
from infrarsi.trial import WARMUP_ROLE, TrialStatus

MiB = 2**20


def _contract(*, end: bool = True, timeout_s: float = 60) -> Contract:
    c = toy_contract(timeout_s=timeout_s)
    return c.model_copy(update={"budget": c.budget.model_copy(update={"end_at_last_step": end})})


def _no_process_left(rec: RunRecord, trial_id: int) -> None:
    token = rec.launch_info(trial_id).token
    assert processes_with_token(token) == [], f"processes of trial {trial_id} still running"


def test_a_trial_that_lingers_after_its_last_step_line_is_ended_within_seconds_and_recorded_ok(tmp_path):
    """The toy prints its 4 iteration lines (500 ms each), its memory report half a second after the last (a lagging
    rank), then sleeps 30 s: ended a quiet spell after the report, recorded ok with every step, loss and the late
    memory report, no exit status held against it, the saving in its evidence, no process left."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), _contract()) as runner:
        t0 = time.monotonic()
        t = runner.submit({"mode": "linger", "step_ms": 500, "alloc_mb": 64}).result()
        took = time.monotonic() - t0
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert took < 20 and t.cost.wall_s < 20  # not its 30 s sleep
    last = last_step_s(rec.trial_dir(t.id))
    assert last is not None and t.cost.wall_s - last < 0.5 + QUIET_S + 5  # the report, the quiet spell, the stop
    assert len(t.metrics.step_times_s) == 4 and len(t.metrics.losses) == 4 and t.metrics.step_time_s
    assert t.metrics.peak_memory_bytes == 64 * MiB  # the report printed after the last step line is read
    assert t.exit_code is None and t.signal is None
    line = next(e for e in t.evidence if e.startswith(ENDED))
    assert "s after it" in line and "its shutdown was not run" in line
    assert "toy done" in (rec.trial_dir(t.id) / "stdout").read_text()
    assert rec.get(t.id) == t
    _no_process_left(rec, t.id)
    cost = run_cost(rec.finished())  # the report's Cost section: its tail, and that the harness ended it
    assert cost.tail["search"][1] == pytest.approx(t.cost.wall_s - last, abs=1e-3)
    assert any(s.startswith("The harness ended 1 trial(s) at their last step") for s in cost.lines())


def test_with_the_budget_option_off_the_trial_runs_to_its_own_exit(tmp_path):
    """budget.end_at_last_step = false: the same trial (3 s of shutdown) exits by itself, exit status 0."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), _contract(end=False)) as runner:
        t = runner.submit({"mode": "linger", "step_ms": 500, "linger_s": 3}).result()
    assert t.status is TrialStatus.OK and t.exit_code == 0, (t.reason, t.evidence)
    assert t.cost.wall_s - last_step_s(rec.trial_dir(t.id)) >= 3
    assert not any(e.startswith(ENDED) for e in t.evidence)


def test_a_warm_up_is_ended_after_its_first_step_line_and_recorded_ok(tmp_path):
    """The doctor's warm-up (role warmup) of a trial whose 4 steps take 2 s each, then its memory report and 30 s of
    shutdown: ended a quiet spell after step 1's line (the lines of steps 2.. change nothing of its record), recorded
    ok with step 1's figures and the reason, the evidence line saying why, no peak (step 1's is not the window's), no
    exit status held against it, no process left."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), _contract()) as runner:
        t = runner.submit({"mode": "linger", "step_ms": 2000, "alloc_mb": 64}, role=WARMUP_ROLE).result()
    assert t.status is TrialStatus.OK and t.role == WARMUP_ROLE, (t.reason, t.evidence)
    out = (rec.trial_dir(t.id) / "stdout").read_text()
    assert "iteration        1/" in out and "iteration        4/" not in out and "toy done" not in out  # 8 s of steps
    assert t.reason == WARMUP_REASON and t.metrics.steps_run == 1
    assert t.metrics.losses == pytest.approx([4.9]) and 1.9 < t.metrics.step_time_s < 10  # step 1's, as it logged
    assert t.metrics.peak_memory_bytes is None and t.exit_code is None and t.signal is None
    first = last_step_s(rec.trial_dir(t.id))  # the last step line the harness saw: step 1's, or 2's under load
    assert first is not None and t.cost.wall_s < first + QUIET_S + 5
    line = next(e for e in t.evidence if e.startswith(ENDED))
    assert "its first step line, a warm-up: step 1's line came" in line and "were not run" in line
    _no_process_left(rec, t.id)
    assert any(s.startswith("The harness ended the doctor's warm-up after its first step line (1 run(s)")
               for s in run_cost(rec.finished()).lines())


def test_with_the_budget_option_off_a_warm_up_runs_whole(tmp_path):
    """budget.end_at_last_step = false: the warm-up runs every step and its shutdown, as every trial does, and keeps
    the whole window's figures (no reason: nothing was cut)."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), _contract(end=False)) as runner:
        t = runner.submit({"mode": "linger", "step_ms": 500, "alloc_mb": 64, "linger_s": 3}, role=WARMUP_ROLE).result()
    assert t.status is TrialStatus.OK and t.exit_code == 0, (t.reason, t.evidence)
    assert len(t.metrics.losses) == 4 and t.metrics.peak_memory_bytes == 64 * MiB and t.reason == ""
    assert t.cost.wall_s - last_step_s(rec.trial_dir(t.id)) >= 3
    assert not any(e.startswith(ENDED) for e in t.evidence)


@pytest.mark.parametrize("setting, status, why", [
    ({"mode": "signal", "step_ms": 500, "signal": 11}, TrialStatus.CRASH, "signal 11"),  # after step 1
    ({"mode": "exit"}, TrialStatus.CRASH, "exit code 1"),  # before any step
])
def test_a_trial_that_fails_before_its_last_step_line_is_recorded_as_before(tmp_path, setting, status, why):
    """The same record, the option on or off: the failure, its exit status or signal, nothing ended by the harness."""
    records = []
    for end in (True, False):
        rec = RunRecord(tmp_path / str(end))
        with Runner(rec, LocalExecutor(), ToyAdapter(), _contract(end=end)) as runner:
            records.append(runner.submit(setting).result())
    on, off = records
    assert on.status is status and off.status is status, (on.reason, on.evidence)
    assert (on.exit_code, on.signal, on.reason) == (off.exit_code, off.signal, off.reason)
    assert why in on.reason or why in " ".join(on.evidence)
    assert not any(e.startswith(ENDED) for e in on.evidence)


def test_a_trial_whose_last_step_line_never_comes_times_out_as_before(tmp_path):
    """It hangs after step 1: past its time limit, timeout, not ended here."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), ToyAdapter(),
                _contract(timeout_s=4)) as runner:
        t = runner.submit({"mode": "hang"}).result()
    assert t.status is TrialStatus.TIMEOUT, (t.reason, t.evidence)
    assert not any(e.startswith(ENDED) for e in t.evidence)
    _no_process_left(rec, t.id)


class _Lines:
    """A trial's output files written line by line, and a clock the test moves."""

    def __init__(self, d: Path) -> None:
        self.d, self.t = d, 0.0
        for name in ("stdout", "stderr"):
            (d / name).write_bytes(b"")

    def say(self, *lines: str, stream: str = "stdout") -> None:
        with open(self.d / stream, "a") as f:
            f.write("".join(ln + "\n" for ln in lines))

    def watch(self, last_step: int) -> TailWatch:
        def parse(out: str, err: str):
            return sorted(ln for ln in (out + err).splitlines() if "loss" in ln or "memory" in ln)

        return TailWatch(trial_dir=self.d, last_step=last_step, parse=parse, now=lambda: self.t)


def _tt(step: int) -> str:
    return f"[titan] 2026-12-07 16:48:38,886 - root - INFO - step: {step:2d}  loss:  7.9  memory:  1.80GiB(79.88%)"


def _it(i: int, of: int) -> str:
    return f" iteration {i:8d}/{of:8d} | elapsed time per iteration (ms): 5000.0 | lm loss: 5.0E+00 |"


def test_the_watch_waits_for_every_copy_of_the_last_step_then_a_quiet_spell(tmp_path):
    """Two ranks print each step without a rank prefix (torchtitan): the first copy of the last step is not enough;
    after the second, a quiet spell of the adapter's reading (a line it does not read does not restart it)."""
    o = _Lines(tmp_path)
    w = o.watch(4)
    for step in (1, 2, 3):
        o.t += 6.0
        o.say(_tt(step), _tt(step))
        assert w.check() is None
    o.t += 6.0
    o.say(_tt(4))
    assert w.check() is None
    o.t += 30.0
    assert w.check() is None  # one copy of step 4: the other rank's is still to come, however long
    o.say(_tt(4))
    assert w.check() is None  # it came: now the quiet spell, a quarter step (1.5 s) here
    o.t += 1.0
    o.say("[titan] 2026-12-07 16:48:40,886 - root - INFO - Training completed")
    assert w.check() is None
    o.t += 0.6
    stop = w.check()
    assert stop is not None and stop.step == 4 and stop.quiet_s == pytest.approx(1.5)
    assert stop.bytes["stdout"] == (tmp_path / "stdout").stat().st_size


def test_the_watch_waits_for_the_step_the_lines_state_and_a_late_report_restarts_the_quiet_spell(tmp_path):
    """Megatron's lines say "iteration i/ 6": a contract whose last step is 4 waits for step 6 (the process's own
    memory report comes after it); a memory report half a spell after it restarts the spell; what came after the stop
    is not in the bytes the record is read from."""
    o = _Lines(tmp_path)
    w = o.watch(4)
    for i in range(1, 6):
        o.t += 0.5
        o.say(_it(i, 6))
        o.t += 5.0
        assert w.check() is None
    o.say(_it(6, 6))
    assert w.check() is None
    o.t += 0.5
    o.say("[Rank 1] (after 6 iterations) memory (MB) | allocated: 1.0 | max allocated: 1.0 | reserved: 9.0 | "
          "max reserved: 9.0")
    assert w.check() is None
    o.t += w.quiet_s() - 0.1
    assert w.check() is None
    o.t += 0.2
    stop = w.check()
    assert stop is not None and stop.step == 6 and w.quiet_s() == pytest.approx(1.1)
    o.say("Traceback (most recent call last):", "SignalException: Process 7 got signal: 15", stream="stderr")
    assert w.check() is stop and "SignalException" not in w.text()[1]
    assert "max reserved: 9.0" in w.text()[0]


def test_a_warm_up_watch_stops_at_step_1_whatever_last_step_the_lines_state(tmp_path):
    """Megatron's lines say "iteration i/ 6": a warm-up's watch (first_only) waits for step 1's line, not step 6's,
    then the quiet spell of a reading that later steps do not change."""
    o = _Lines(tmp_path)

    def step_1(out: str, err: str):
        return [ln for ln in out.splitlines() if "iteration        1/" in ln]

    w = TailWatch(trial_dir=tmp_path, last_step=1, parse=step_1, now=lambda: o.t, first_only=True)
    assert w.check() is None
    o.t += 5.0
    o.say(_it(1, 6))
    assert w.check() is None
    o.t += 0.6
    o.say(_it(2, 6))  # a line of step 2: nothing the record reads
    assert w.check() is None
    o.t += QUIET_S - 0.5
    stop = w.check()
    assert stop is not None and stop.step == 1 and stop.first_only and stop.quiet_s == pytest.approx(QUIET_S)
    assert "a warm-up" in stop.line(5.0, 7.0) and "the rest of its window and its shutdown were not run" in stop.line(5.0, 7.0)


@pytest.mark.slurm
def test_a_slurm_trial_that_lingers_is_ended_by_scancel_and_recorded_ok(slurm, tmp_path):
    """The same lingering toy as a Slurm job (its own output files, read by the runner as they grow): ended, ok."""
    rec = RunRecord(tmp_path)
    ex = SlurmExecutor(env=slurm.env)
    with Runner(rec, ex, ToyAdapter(), _contract(timeout_s=120)) as runner:
        t = runner.submit({"mode": "linger", "step_ms": 500, "alloc_mb": 64}).result()
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert t.cost.wall_s < 20 and t.metrics.peak_memory_bytes == 64 * MiB
    assert any(e.startswith(ENDED) for e in t.evidence) and t.exit_code is None
    assert any("ended by infrarsi" in e for e in t.evidence)


@pytest.mark.slow
def test_the_benchmark_prints_the_tail_with_the_end_at_the_last_step_off_and_on(tmp_path):
    """scripts/bench_prune.py tail (BENCHMARKS.md's figures), one pair of real minigpt-cpu trials, both ok. Slow: two
    real trials; the default tests above keep the end at the last step covered on real processes."""
    from tests.execute.bench_run import bench_prune_on_minigpt

    out = bench_prune_on_minigpt(tmp_path, "tail", "--repeats", "1")
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("   0 ")]
    assert [(x[1], x[2]) for x in rows] == [("off", "ok"), ("on", "ok")], out[-3000:]
    assert "median tail after the last step line: off" in out


@pytest.mark.slow
def test_the_benchmark_prints_the_warm_up_whole_and_ended_after_its_first_step_line(tmp_path):
    """scripts/bench_prune.py warmup (BENCHMARKS.md's figures), one pair of real minigpt-cpu trials, both ok, the
    ended one cheaper. Slow: two real trials; test_a_warm_up_is_ended_after_its_first_step_line_and_recorded_ok keeps
    the warm-up's end covered on real processes by default."""
    from tests.execute.bench_run import bench_prune_on_minigpt

    out = bench_prune_on_minigpt(tmp_path, "warmup", "--repeats", "1")
    rows = {x[1]: x for x in (ln.split() for ln in out.splitlines() if ln.startswith("   0 "))}
    assert sorted(rows) == ["first", "whole"] and {x[2] for x in rows.values()} == {"ok"}, out[-3000:]
    assert float(rows["first"][6]) < float(rows["whole"][6])  # device-seconds
    assert "device-s saved per tune" in out
