"""The memory stop (execute/memory_stop.py): a trial whose memory report, at step 1, is already past the contract's
capacity is ended there and recorded oom with the figures; one under it runs to its end."""

from __future__ import annotations

from toy import ToyAdapter, toy_contract

from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus


def test_a_trial_whose_step_1_memory_report_is_past_capacity_ends_there_recorded_oom(tmp_path):
    """Real processes through the runner, 4 steps of 500 ms, capacity 0.25 GiB (256 MiB): one reporting 300 MiB
    reserved after step 1 is stopped before its last step, recorded oom with its peak and the arithmetic (and the
    memory model sees an OOM with its peak); one reporting 64 MiB runs to its end, ok, with that peak."""
    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(LocalExecutor.Config(kill_grace_s=0.5)), ToyAdapter(), toy_contract()) as runner:
        over = runner.submit({"mode": "gpumem", "alloc_mb": 300, "step_ms": 500}).result()
        fits = runner.submit({"mode": "gpumem", "alloc_mb": 64, "step_ms": 500}).result()
    assert over.status is TrialStatus.OOM, (over.status, over.reason, over.evidence)
    assert over.metrics.peak_memory_bytes == 300 * 2**20 and over.metrics.step_time_s is None
    assert over.reason == "out of memory: reported peak 300 MiB > capacity 256 MiB (stopped at its memory report)"
    assert any("peak of 300 MiB > the capacity 256 MiB" in e and "over by 44 MiB" in e for e in over.evidence)
    last = "iteration        4/"
    assert last not in (tmp_path / "trials" / str(over.id) / "stdout").read_text()  # ended before its last step
    assert last in (tmp_path / "trials" / str(fits.id) / "stdout").read_text()
    assert over.status.over_capacity()
    assert fits.status is TrialStatus.OK and fits.metrics.peak_memory_bytes == 64 * 2**20, fits.reason
    assert over.cost.wall_s < fits.cost.wall_s
    assert rec.get(over.id) == over
