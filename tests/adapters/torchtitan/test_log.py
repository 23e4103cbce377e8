"""torchtitan's log dialect, read from the output of real runs on this CPU (torchtitan 0.2.2, 2 ranks).

The fixtures are the unedited stdout+stderr of ``torchrun --nproc-per-node 2 launchers/torchtitan_cpu.py
--job.config_file contracts/torchtitan-cpu/llama3_cpu.toml --training.steps 6 ...`` (global batch 16 x
sequence 512 = 8,192 tokens per step).
"""

from pathlib import Path

import pytest

from infrarsi.adapters.torchtitan.log import (aborted_after_training, cause_line, classify_torchtitan_failure,
                                              parse_lines, parse_torchtitan_log, parse_torchtitan_output,
                                              step_times_s)
from infrarsi.trial import TrialStatus

FIX = Path(__file__).parents[2] / "fixtures" / "torchtitan_cpu"
TOKENS = 16 * 512


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_every_rank_line_is_read_and_merged_per_step():
    lines = parse_lines(text("fsdp2_6steps.log"))
    assert len(lines) == 12 and {ln.step for ln in lines} == set(range(1, 7))  # 2 ranks x 6 steps
    steps = parse_torchtitan_log(text("fsdp2_6steps.log"))
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6] and all(s.ranks == 2 for s in steps)
    # step 1 as printed by both ranks: "memory:  1.72GiB(7.31%)  tps: 1,472" and "... tps: 1,469": the slower wins
    s1 = steps[0]
    assert s1.loss == pytest.approx(8.10742) and s1.tps == 1469 and s1.memory_gib == 1.72
    assert s1.time_s is not None and steps[1].time_s > s1.time_s


def test_step_time_from_tps_and_from_timestamps_agree():
    steps = parse_torchtitan_log(text("fsdp2_6steps.log"))
    by_tps = step_times_s(steps, world_size=2, tokens_per_step=TOKENS)
    by_clock = step_times_s(steps, world_size=None, tokens_per_step=None)
    assert 1 not in by_clock and set(by_clock) == {2, 3, 4, 5, 6}
    for k in by_clock:  # tps is tokens / (dt x world); the timestamps are the same dt to a few ms
        assert by_tps[k] == pytest.approx(by_clock[k], rel=0.05, abs=0.02)


def test_a_finished_run_is_ok_with_window_median_peak_and_losses():
    run = parse_torchtitan_output(text("fsdp2_6steps.log"), "", 0, warmup_steps=2, measured_steps=4, world_size=2,
                                  tokens_per_step=TOKENS, cpu=True, final_step=6)
    assert run.status is TrialStatus.OK
    steps = {s.step: s for s in parse_torchtitan_log(text("fsdp2_6steps.log"))}
    window = sorted(TOKENS / (steps[i].tps * 2) for i in (3, 4, 5, 6))
    assert run.metrics.step_time_s == pytest.approx((window[1] + window[2]) / 2)
    assert run.metrics.peak_memory_bytes == pytest.approx(max(s.memory_gib for s in steps.values()) * 2**30)
    assert len(run.metrics.losses) == 6 and run.metrics.losses[0] > run.metrics.losses[-1]
    assert run.metrics.mfu is None  # torchtitan's MFU assumes an A100's peak; on a CPU it is dropped


def test_a_log_short_of_the_window_is_a_crash_naming_the_step():
    run = parse_torchtitan_output(text("fsdp2_6steps.log"), "", 0, warmup_steps=2, measured_steps=8, world_size=2,
                                  tokens_per_step=TOKENS, cpu=True)
    assert run.status is TrialStatus.CRASH and "step 10" in run.reason and "step 6" in run.reason


def test_pipeline_placeholder_losses_are_not_losses():
    # PP=2: the first stage prints "loss: -2.00000" (-1 per accumulation step), the last stage the loss
    steps = parse_torchtitan_log(text("pp2_6steps.log"))
    assert len(steps) == 6 and all(s.loss is not None and s.loss > 0 for s in steps)
    assert steps[0].loss == pytest.approx(8.19001)
    raw = [ln.loss for ln in parse_lines(text("pp2_6steps.log"))]
    assert -2.0 in raw


def test_a_real_cpu_oom_is_oom_with_the_allocator_line():
    got = classify_torchtitan_failure(text("oom_acnone.log"))
    assert got is not None
    status, reason, evidence = got
    assert status is TrialStatus.OOM and reason == "out of memory"
    assert any("DefaultCPUAllocator: can't allocate memory" in e for e in evidence)
    run = parse_torchtitan_output(text("oom_acnone.log"), "", 1, warmup_steps=2, measured_steps=3, world_size=2,
                                  tokens_per_step=TOKENS, cpu=True)
    assert run.status is TrialStatus.OOM and run.metrics.step_time_s is None


def test_an_abort_at_exit_after_complete_training_is_ok_but_not_before():
    log = text("exit_abort_6steps.log")  # rank 1: "terminate called without an active exception" after its PG
    steps = parse_torchtitan_log(log)
    assert aborted_after_training(log, steps, final_step=6, world_size=2) is not None
    run = parse_torchtitan_output(log, "", 1, warmup_steps=2, measured_steps=4, world_size=2, tokens_per_step=TOKENS,
                                  cpu=True, final_step=6)
    assert run.status is TrialStatus.OK and "at exit" in run.evidence[0]
    # the same text from a job meant to run 8 steps did not finish: a crash naming the failed rank
    run8 = parse_torchtitan_output(log, "", 1, warmup_steps=2, measured_steps=4, world_size=2, tokens_per_step=TOKENS,
                                   cpu=True, final_step=8)
    assert run8.status is TrialStatus.CRASH and "a rank failed" in run8.reason


def test_the_trial_of_a_run_that_aborted_only_at_exit_is_ok_and_any_other_abnormal_end_a_crash():
    from infrarsi.execute.classify import classify
    from infrarsi.execute.executor import LaunchEnd

    log = text("exit_abort_6steps.log")  # torchrun exits 1 after rank 1's SIGABRT at exit
    kw = dict(warmup_steps=2, measured_steps=4, world_size=2, tokens_per_step=TOKENS, cpu=True)
    ended = LaunchEnd(state="exited", returncode=1)
    late = classify(ended, parse_torchtitan_output(log, "", 1, final_step=6, **kw), stdout=log)
    assert late.status is TrialStatus.OK and late.metrics.step_time_s is not None
    from infrarsi.adapters.base import ParsedRun

    unexplained = ParsedRun(status=TrialStatus.OK, metrics=late.metrics)  # a complete log, no reason for the end
    got = classify(ended, unexplained, stdout=log)
    assert got.status is TrialStatus.CRASH and "printed a result but ended with signal 6 (SIGABRT)" in got.reason  # torchrun names the rank


@pytest.mark.parametrize("line, status, reason", [
    ("[rank1]: torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
     "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
     TrialStatus.CRASH, "rendezvous error"),
    ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
     "[127.0.0.1]:4120", TrialStatus.CRASH, "gloo error"),
    ("[rank0]: ValueError: Invalid parallel dims: dp_replicate(2) * dp_shard(2) * cp(1) * tp(1) * pp(1) != "
     "WORLD_SIZE(2)", TrialStatus.INVALID, "config error"),
])
def test_distributed_and_config_failures(line, status, reason):
    got = classify_torchtitan_failure(line + "\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    assert got is not None and got[0] is status and got[1].startswith(reason)
    if status is TrialStatus.CRASH:
        assert line[9:40] in got[1]  # the cause is named in the reason


def test_a_rank_killed_without_an_error_is_the_oom_killer():
    tail = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "  exitcode  : -9 (pid: 4242)\n  traceback : Signal 9 (SIGKILL) received by PID 4242\n")
    assert classify_torchtitan_failure(tail)[0] is TrialStatus.OOM
    with_cause = "[rank0]: KeyError: 'tok_embeddings'\n" + tail
    got = classify_torchtitan_failure(with_cause)
    assert got[0] is TrialStatus.CRASH and "KeyError" in got[1]
    assert cause_line(with_cause) == "KeyError: 'tok_embeddings'"
