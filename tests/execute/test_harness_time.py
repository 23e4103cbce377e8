"""The harness's time is the record: real trials that lie about their step time (a clock slowed to 80%, iteration
lines on stderr, lines held back and let go at exit) are scored by when their lines arrived, never faster than they
ran; an honest trial on a machine kept busy by CPU burners is ok, its log's number kept beside the harness's."""

import subprocess
import sys

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.adapters.megatron.adapter import parse_megatron_output
from infrarsi.adapters.torchtitan.log import parse_torchtitan_output
from infrarsi.execute.clock import read_clock, step_of
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus


class MegatronToy(ToyAdapter):
    """The toy workload read by Megatron's own parser (stdout and stderr, as Megatron logs either)."""

    def parse(self, contract, stdout, stderr, returncode):
        t = contract.invariants.timing
        return parse_megatron_output(stdout, stderr, returncode, warmup_steps=t.warmup_steps,
                                     measured_steps=t.measured_steps)


def _run(tmp_path, settings):
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), MegatronToy(), toy_contract()) as runner:
        return rec, runner.run(settings)


@pytest.fixture
def burners():
    """Two processes that keep a core busy each, for the length of a test."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield
    for p in procs:
        p.kill()
        p.wait()


def test_a_slowed_clock_and_lines_on_stderr_are_scored_by_the_harness(tmp_path):
    rec, (slow, err) = _run(tmp_path, [{"mode": "slowclock", "step_ms": 100}, {"mode": "stderr", "step_ms": 100}])
    for t in (slow, err):
        assert t.status is TrialStatus.OK, (t.reason, t.evidence)
        assert 0.07 < t.metrics.reported_step_time_s < 0.09  # the log claims 80 ms
        assert t.metrics.step_time_s > 0.095  # the steps took 100 ms: scored as such, never as the log's 80
        assert any("the harness's time is the trial's record" in e for e in t.evidence), t.evidence
    assert any("on stderr took" in e for e in err.evidence), err.evidence
    clock = read_clock(rec.trial_dir(err.id))
    assert len(clock["stderr"]["arrivals_s"]) >= 4  # its iteration lines came through the stderr pipe


def test_lines_held_back_to_exit_cannot_look_faster(tmp_path):
    _, (t,) = _run(tmp_path, [{"mode": "buffered", "step_ms": 100}])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert t.metrics.reported_step_time_s < 0.06  # it claims 50 ms
    assert t.metrics.step_time_s > 0.1  # the upper bound: the last line's arrival over its steps, start-up included
    assert any("arrived in bursts" in e for e in t.evidence), t.evidence


def test_honest_short_steps_under_cpu_burners_are_ok(tmp_path, burners):
    """20 ms steps on a machine whose cores are busy: the log and the harness may disagree, the trial stays ok."""
    _, trials = _run(tmp_path, [{"mode": "ok", "step_ms": 20}] * 3)
    for t in trials:
        assert t.status is TrialStatus.OK, (t.reason, t.evidence)
        assert t.metrics.step_time_s > 0 and t.metrics.reported_step_time_s >= 0.02
        # its conditions name the burners: other processes kept more than half a core busy while it ran
        c = t.conditions
        assert c["others_cores"] > 0.5 and c["load_start"] is not None and c["cores"] >= 1, c


class TorchtitanToy(ToyAdapter):
    """The toy workload's torchtitan mode read by torchtitan's own parser (1,000 tokens a step, one rank)."""

    def parse(self, contract, stdout, stderr, returncode):
        t = contract.invariants.timing
        return parse_torchtitan_output(stdout, stderr, returncode, warmup_steps=t.warmup_steps,
                                       measured_steps=t.measured_steps, world_size=1, tokens_per_step=1000, cpu=True)


def test_torchtitan_step_lines_on_stderr_are_scored_by_the_harness(tmp_path):
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), TorchtitanToy(), toy_contract()) as runner:
        (t,) = runner.run([{"mode": "titan", "step_ms": 100}])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert 0.07 < t.metrics.reported_step_time_s < 0.09  # its throughput claims 80 ms steps
    assert t.metrics.step_time_s > 0.095 and t.metrics.tokens_per_s < 1000 / 0.095  # throughput follows the harness
    assert any("on stderr took" in e for e in t.evidence), t.evidence


def test_step_lines_of_every_framework():
    megatron = (b" iteration        3/      10 | consumed samples:           12 | elapsed time per iteration (ms): "
                b"812.3 | lm loss: 1.0E+01 |\n")
    titan = (b"[rank1]:[titan] 2025-01-01 10:00:00,123 - root - INFO - \x1b[31mstep: 12  \x1b[32mloss:  7.9 "
             b"\x1b[33mmemory:  1.2GiB(3.1%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 0.1  \x1b[35mmfu: 0.0%\x1b[39m\n")
    assert step_of(megatron) == (0, 3)
    assert step_of(titan) == (1, 12)
    assert step_of(b"[rank0]:[titan] validate step: 4  loss: 7.1\n") is None
    assert step_of(b"toy done\n") is None
