"""Trials that compute honestly but choose when their step lines reach the pipe (tests/execute/forger.py: lines held
back, then let go one by one, each in its own write, 20 ms apart, the CPU kept busy; or every step's line printed
again at that pace, within a two-process trial's allowance of copies) are scored no faster than the 100 ms their
steps took: the window is timed end to end from the harness's arrivals, never by the pattern of the gaps. An honest
trial keeps its time."""

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.adapters.megatron.log import parse_log, to_metrics
from infrarsi.execute.end_to_end import SLACK_FRACTION, SLACK_S, allowance_s, pair_times
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus
from infrarsi.knobs import Knob, KnobSpace
from infrarsi.trial.parsed import ParsedRun
from pathlib import Path

FORGER = str(Path(__file__).with_name("forger.py"))
STEP_S = 0.1  # what each of the forger's steps computes for


class ForgerAdapter(ToyAdapter):
    def knob_space(self, contract):
        return KnobSpace([Knob(name="hold_from", kind="int", domain=(0, 1, 2, 3, 4), default=0),
                          Knob(name="copies", kind="int", domain=(1, 2), default=1),
                          Knob(name="steps", kind="int", domain=(8, 20, 60), default=8),
                          Knob(name="join_from", kind="int", domain=(0, 1, 4), default=0),
                          Knob(name="startup_ms", kind="int", domain=(0, 3000), default=0)])

    def launch(self, contract, setting):
        copies = int(setting.get("copies", 1))
        argv = ["python", FORGER, "--steps", str(setting.get("steps", 8)), "--step-ms", str(STEP_S * 1000), "--release-ms", "20",
                "--hold-from", str(setting.get("hold_from", 0)), "--copies", str(copies),
                "--join-from", str(setting.get("join_from", 0)), "--startup-ms", str(setting.get("startup_ms", 0))]
        # a trial of `copies` processes may print each step's line that many times (torchtitan logs on every rank)
        return LaunchSpec(argv=argv, processes=copies, devices=copies, time_limit_s=60)

    def parse(self, contract, stdout, stderr, returncode):
        t = contract.invariants.timing
        m = to_metrics(parse_log(stdout), warmup_steps=t.warmup_steps, measured_steps=t.measured_steps)
        return ParsedRun(status=TrialStatus.OK if returncode == 0 and m.step_time_s else TrialStatus.CRASH, metrics=m)


def _run(tmp_path, settings):
    rec = RunRecord(tmp_path)
    contract = toy_contract(warmup_steps=3, measured_steps=4, timeout_s=60)
    with Runner(rec, LocalExecutor(), ForgerAdapter(), contract, config=Runner.Config(oversubscribe=True)) as r:
        return r.run(settings)


@pytest.mark.parametrize("hold_from", [2, 3, 4])
def test_lines_held_back_and_let_go_one_by_one_are_scored_no_faster_than_their_steps(tmp_path, hold_from):
    """Held from step 2 (a silence in the warm-up, then every line 20 ms apart), from step 3 (the line the window is
    timed from) and from step 4 (the window's own lines): the log claims 20 ms steps; the trial is scored by what
    its 100 ms steps took, or more."""
    (t,) = _run(tmp_path, [{"hold_from": hold_from}])
    assert t.metrics.reported_step_time_s < 0.03, t.metrics
    if t.status is TrialStatus.OK:
        assert t.metrics.step_time_s >= 0.95 * STEP_S, (t.metrics.step_time_s, t.evidence)
    else:
        assert t.status is TrialStatus.INVALID and t.metrics.step_time_s is None, (t.status, t.reason)


def test_per_rank_duplicate_lines_let_go_at_a_forged_pace_are_scored_no_faster_than_their_steps(tmp_path):
    """A trial of two processes may print each step twice (each rank logs it): the second copies, printed 20 ms apart
    after the run, do not make its steps 20 ms."""
    (t,) = _run(tmp_path, [{"copies": 2}])
    assert t.metrics.reported_step_time_s < 0.03, t.metrics
    if t.status is TrialStatus.OK:
        assert t.metrics.step_time_s >= 0.95 * STEP_S, (t.metrics.step_time_s, t.evidence)
    else:
        assert t.status is TrialStatus.INVALID and t.metrics.step_time_s is None, (t.status, t.reason)


def test_a_trial_that_computes_every_step_before_its_first_line_is_held_to_its_end_to_end_time(tmp_path):
    """Every line held (hold_from 1: 20 steps of 100 ms computed, then their lines let go 20 ms apart, busy): to the
    line clock a long start-up and 20 ms steps. Its wall time is not its to shape: beyond the baseline's time outside
    its steps (measured on the baseline's own trial), the search scores it by its end-to-end bound, and its A/B pair
    holds it to the pair's baseline run, both no faster than its 100 ms. An honest trial keeps its time in both."""
    rec = RunRecord(tmp_path)
    contract = toy_contract(warmup_steps=3, measured_steps=4, timeout_s=60)
    with Runner(rec, LocalExecutor(), ForgerAdapter(), contract, config=Runner.Config(oversubscribe=True)) as r:
        (base,) = r.run([{"steps": 20}], role="doctor")
    allowance = allowance_s([base])
    assert base.status is TrialStatus.OK and allowance is not None, (base.reason, base.evidence)
    cfg = Runner.Config(oversubscribe=True, outside_allowance_s=allowance)
    with Runner(rec, LocalExecutor(), ForgerAdapter(), contract, config=cfg) as r:
        forged, honest = r.run([{"hold_from": 1, "steps": 20}, {"steps": 20}])
        (paired,) = r.run([{"hold_from": 1, "steps": 20}], role="verify")
    assert forged.metrics.reported_step_time_s < 0.03, forged.metrics
    assert forged.status is TrialStatus.OK and forged.metrics.step_time_s >= 0.95 * STEP_S, \
        (forged.status, forged.metrics.step_time_s, forged.evidence)
    assert any(e.startswith("end to end:") for e in forged.evidence), forged.evidence
    assert paired.metrics.step_time_s < 0.03, (paired.status, paired.reason, paired.evidence)  # the line clock alone: the release pace
    got = pair_times(base, paired, startup=0.0)
    assert got[1] >= 0.95 * STEP_S, (got, paired.cost, base.cost)
    assert honest.status is TrialStatus.OK and 0.09 < honest.metrics.step_time_s < 0.2, (honest.metrics, honest.evidence)
    assert not any(e.startswith("end to end:") for e in honest.evidence), honest.evidence
    assert pair_times(base, honest, startup=0.0) == (base.metrics.step_time_s, honest.metrics.step_time_s, "")


def _baseline(tmp_path):
    """(the run's record, a baseline (doctor) trial of 8 honest steps, its time outside its steps)."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), ForgerAdapter(), toy_contract(warmup_steps=3, measured_steps=4, timeout_s=60),
                config=Runner.Config(oversubscribe=True)) as r:
        (base,) = r.run([{}], role="doctor")
    allowance = allowance_s([base])
    assert base.status is TrialStatus.OK and allowance is not None, (base.reason, base.evidence)
    return rec, base, allowance


def _search(rec, allowance, startup_allowance_s, settings, role="search"):
    contract = toy_contract(warmup_steps=3, measured_steps=4, timeout_s=60, startup_allowance_s=startup_allowance_s)
    cfg = Runner.Config(oversubscribe=True, outside_allowance_s=allowance)
    with Runner(rec, LocalExecutor(), ForgerAdapter(), contract, config=cfg) as r:
        return r.run(settings, role=role)


def test_a_start_up_within_the_contracts_allowance_keeps_its_lines_figure_and_beyond_it_is_charged(tmp_path):
    """A setting that spends 3 s more than the baseline before its first step line (a compile's start-up), then runs
    8 honest 100 ms steps: under invariants.timing.startup_allowance_s = 4 it is scored by its lines (~100 ms), in
    the search and in its A/B pair; under the default 0 the 3 s are charged to its 8 steps (>= 2x its lines)."""
    rec, base, allowance = _baseline(tmp_path)
    (kept,) = _search(rec, allowance, 4.0, [{"startup_ms": 3000}])
    (charged,) = _search(rec, allowance, 0.0, [{"startup_ms": 3000}])
    (paired,) = _search(rec, allowance, 4.0, [{"startup_ms": 3000}], role="verify")
    assert kept.status is TrialStatus.OK and 0.09 < kept.metrics.step_time_s < 0.2, (kept.metrics, kept.evidence)
    assert not any(e.startswith("end to end:") for e in kept.evidence), kept.evidence
    assert charged.status is TrialStatus.OK and charged.metrics.step_time_s > 2 * STEP_S, \
        (charged.metrics, charged.evidence)
    assert any(e.startswith("end to end:") for e in charged.evidence), charged.evidence
    assert pair_times(base, paired, startup=4.0) == (base.metrics.step_time_s, paired.metrics.step_time_s, "")
    ta, tb, note = pair_times(base, paired, startup=0.0)
    assert tb > 2 * STEP_S and f"trials {base.id}/{paired.id}: end to end:" in note, (tb, note)


def test_a_trial_that_computes_its_steps_before_its_first_line_gains_at_most_the_startup_allowance(tmp_path):
    """60 steps of 100 ms computed before any line (6 s), then their lines let go 20 ms apart, under
    startup_allowance_s = 2: beyond the baseline's time outside its steps, the 2 s and the slack, it is scored by its
    end-to-end bound, (wall - allowance - 2) / 60, the contract's seconds in the arithmetic: it gains at most
    (2 s + the slack) / 60 steps per step over what its steps took."""
    rec, base, allowance = _baseline(tmp_path)
    (forged,) = _search(rec, allowance, 2.0, [{"hold_from": 1, "steps": 60}])
    assert forged.metrics.reported_step_time_s < 0.03, forged.metrics
    (line,) = [e for e in forged.evidence if e.startswith("end to end:")] or [forged.evidence]
    assert "the contract's startup_allowance_s 2 s" in line and f"- {allowance:.3f} - 2) s / 60" in line, line
    slack = max(SLACK_S, SLACK_FRACTION * allowance)
    assert forged.status is TrialStatus.OK and forged.metrics.step_time_s >= 0.95 * STEP_S - (2.0 + slack) / 60, \
        (forged.metrics.step_time_s, forged.evidence)


@pytest.mark.parametrize("join_from", [1, 4])
def test_steps_whose_lines_reach_the_pipe_as_one_line_are_scored_by_the_harness_not_the_log(tmp_path, join_from):
    """The lines of steps 1.. (or 4.., the window's) written as one line, joined by carriage returns: the log's reader
    sees every step at 20 ms, the pipe one line. No window of the harness's: scored by the wall time over the
    window's steps (from step 1), or from the last line before the window to the one line (from step 4), no faster
    than its 100 ms steps; never by the log's time."""
    (t,) = _run(tmp_path, [{"join_from": join_from}])
    assert t.metrics.reported_step_time_s is not None and t.metrics.reported_step_time_s < 0.03, \
        (t.status, t.reason, t.evidence, t.metrics)
    assert t.status is TrialStatus.OK and t.metrics.step_time_s >= 0.95 * STEP_S, \
        (t.status, t.metrics.step_time_s, t.evidence)


def test_an_honest_trial_is_timed_end_to_end_at_its_pace(tmp_path):
    (t,) = _run(tmp_path, [{}])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert 0.09 < t.metrics.step_time_s < 0.2, (t.metrics.step_time_s, t.evidence)
    assert any("per step end to end" in e for e in t.evidence), t.evidence


@pytest.mark.slurm
def test_on_slurm_the_jobs_output_is_clocked_as_it_is_written_and_a_forger_is_no_faster(slurm, tmp_path):
    """A Slurm job writes its own output: the runner reads it as it grows and scores the steps by it, relative to
    the job's start and within its elapsed time as Slurm accounted them. Lines held back from step 2 and let go
    20 ms apart are scored no faster than their 100 ms steps; an honest job is timed at its pace."""
    from infrarsi.execute.clock import read_clock
    from infrarsi.execute.slurm import SlurmExecutor

    rec = RunRecord(tmp_path)
    contract = toy_contract(warmup_steps=3, measured_steps=4, timeout_s=120)
    ex = SlurmExecutor(SlurmExecutor.Config(isolation="off"), env=slurm.env)
    with Runner(rec, ex, ForgerAdapter(), contract, config=Runner.Config(parallel=2)) as r:
        forged, honest = r.run([{"hold_from": 2}, {}])
    for t in (forged, honest):
        clock = read_clock(rec.trial_dir(t.id))
        assert clock is not None and clock["source"] == "slurm" and len(clock["arrivals_s"]) >= 9, clock
        assert abs(clock["wall_s"] - t.cost.wall_s) < 1e-6  # Slurm's elapsed time
    assert forged.metrics.reported_step_time_s < 0.03
    assert forged.status is TrialStatus.INVALID or forged.metrics.step_time_s >= 0.95 * STEP_S, \
        (forged.status, forged.metrics.step_time_s, forged.evidence)
    assert honest.status is TrialStatus.OK, (honest.reason, honest.evidence)
    assert 0.09 < honest.metrics.step_time_s < 0.25, (honest.metrics.step_time_s, honest.evidence)
