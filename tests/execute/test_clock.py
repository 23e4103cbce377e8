"""The harness's clock against a log that keeps the claimed pace: lines printed by a process that only sleeps
between them are invalid; the same claim from steps that compute is ok."""

from toy import ToyAdapter, toy_contract

from infrarsi.execute.clock import MIN_CPU_FRACTION, pipe_lines, read_clock
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus


def test_paced_lines_are_invalid_and_computed_steps_are_ok(tmp_path):
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract()) as runner:
        computed, paced = runner.run([{"mode": "ok", "step_ms": 100}, {"mode": "paced", "step_ms": 100}])
    assert computed.status is TrialStatus.OK, computed.evidence
    assert 0.08 < computed.metrics.step_time_s < 0.15  # both claim 100 ms steps and print at that pace
    assert paced.status is TrialStatus.INVALID
    assert "its lines were paced, not computed" in paced.reason and "of one core" in paced.reason
    # the clock's CPU samples: one per iteration line, none for the other lines
    for trial, busy in ((computed, True), (paced, False)):
        clock = read_clock(rec.trial_dir(trial.id))
        cpus = [c for c in clock["cpu_s"] if c is not None]  # a line that came while the sampler was busy has none
        assert 2 <= len(cpus) <= 4 and len(clock["cpu_s"]) == len(clock["cpu_t_s"]) == len(clock["arrivals_s"])
        window_cpu = cpus[-1] - cpus[0]  # at least one step of 100 ms between the first and the last sample
        # a sleeping process spends a print and a wake-up per line (a few ms on a loaded machine)
        assert (window_cpu > 0.04) is busy and (window_cpu < MIN_CPU_FRACTION * 0.4) is not busy


def test_a_progress_bar_with_carriage_returns_is_an_honest_trial(tmp_path):
    """Class 7: the saved stdout is cut into lines as the pipe's reader cut it (at \\n only): a tqdm-style bar
    (\\r updates) is one line on both sides, not 'stdout has 39 lines but 34 came through the pipe'."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract()) as runner:
        (t,) = runner.run([{"mode": "progress", "step_ms": 100}])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    out = (rec.trial_dir(t.id) / "stdout").read_bytes()
    assert out.count(b"\r") >= 20 and len(pipe_lines(out)) == len(read_clock(rec.trial_dir(t.id))["arrivals_s"])


def test_pipe_lines_cut_where_readline_cuts():
    import io

    data = b"a\rb\r\nc\x0bd\x0ce\x1cf\n\ng\rh"
    assert pipe_lines(data) == list(iter(io.BytesIO(data).readline, b"")) == [b"a\rb\r\n", b"c\x0bd\x0ce\x1cf\n", b"\n",
                                                                              b"g\rh"]


def test_group_scan_counts_a_child_started_in_a_session_of_its_own():
    """torchrun starts each rank with start_new_session: the ranks that train are not in the trial's process group,
    but their CPU time is the trial's (a Megatron-format log under torchrun was judged 'paced' without them)."""
    import os
    import subprocess
    import sys

    from infrarsi.execute.clock import group_pids

    code = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '30'], start_new_session=True); "
            "print(p.pid, flush=True); time.sleep(30)")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        rank = int(leader.stdout.readline())
        assert os.getpgid(rank) != leader.pid  # the child leads a group of its own
        assert set(group_pids(leader.pid)) >= {leader.pid, rank}
    finally:
        os.killpg(rank, 9)
        os.killpg(leader.pid, 9)
        leader.wait()


def test_a_window_shorter_than_a_sampler_period_is_widened_and_else_not_judged():
    """Two 40 ms steps with no CPU between their lines (a starved rank on a loaded machine) say nothing: the window is
    widened to every step line, and judged there; a forger's 250 ms of sleeping lines is still caught."""
    from infrarsi.execute.clock import MIN_CPU_WINDOW_S, Line, _cpu_check

    def lines(points):  # [(iteration, seconds, cpu seconds)] on one rank
        return {(0, i): Line(t, ("stdout", i), (t, c)) for i, t, c in points}

    starved = lines([(1, 1.00, 2.0), (2, 1.04, 2.0), (3, 1.08, 2.0)])  # 80 ms, nothing longer to widen to
    assert _cpu_check(starved, 1, 2) is None
    widened = lines([(1, 1.00, 2.0), (2, 1.04, 2.0), (3, 1.08, 2.0), (4, 1.50, 2.3)])  # 0.5 s, 300 ms of CPU
    assert _cpu_check(widened, 1, 2) is None
    forger = lines([(i, 1.0 + 0.05 * i, 2.0) for i in range(1, 7)])  # 6 lines 50 ms apart, no CPU: 250 ms
    assert 0.25 >= MIN_CPU_WINDOW_S
    why = _cpu_check(forger, 1, 2)
    assert why is not None and "between iteration lines 1 and 6" in why and "paced, not computed" in why
