"""Memory is one pool (execute/cgroup.py): a trial that fills its scratch tmpfs (memory, not disk) or allocates past
its memory cgroup's limit is ended by the kernel inside the trial, recorded ``oom`` with the limit and the peak, and
the run goes on: the runner lives, the next trial is ok. Real kernel OOM kills in a 200 MiB cgroup on this machine."""

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.execute import cgroup
from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus
from infrarsi.knobs import Knob, KnobSpace

LIMIT = 200 * 2**20
FLOOD = "import sys\nw = sys.stdout.write\nfor i in range(300_000):\n    w('x\\n')\n"  # 300,000 short lines, 600 kB
ENDLESS = "import sys\nfor i in range(70):\n    sys.stdout.write('y' * 2**20)\n"  # one line of 70 MiB
FILL_TMP = ("import os\nprint('filling /dev/shm', flush=True)\nwith open('/dev/shm/fill', 'wb') as f:\n"
            "    for _ in range(400):\n        f.write(b'x' * 2**20)\n        f.flush()\nprint('filled', flush=True)\n")


def _pool_or_why():
    return cgroup.MemoryPool(cgroup.pool_limit(cgroup.usable_memory_bytes())).why


needs_memcg = pytest.mark.skipif(bool(_pool_or_why()), reason=f"no memory cgroup here: {_pool_or_why()}")


class Script(ToyAdapter):
    """The toy workload, plus mode "shm": a script that writes 400 MiB into its /dev/shm (a tmpfs: memory)."""

    def knob_space(self, contract):
        return KnobSpace([Knob(name="mode", kind="categorical", domain=("shm", "alloc", "ok", "flood", "endless"), default="ok"),
                          Knob(name="alloc_mb", kind="int", domain=(0, 600), default=0)])

    def launch(self, contract, setting):
        script = {"shm": FILL_TMP, "flood": FLOOD, "endless": ENDLESS}.get(setting.get("mode"))
        if script:
            return super().launch(contract, {}).model_copy(update={"argv": ["python", "-c", script]})
        return super().launch(contract, setting)


@needs_memcg
def test_a_trial_that_fills_its_scratch_tmpfs_or_allocates_past_its_limit_is_oom_and_the_run_goes_on(tmp_path):
    rec = RunRecord(tmp_path)
    ex = LocalExecutor(LocalExecutor.Config(memory_max_bytes=LIMIT))
    with Runner(rec, ex, Script(), toy_contract(cap_gib=4.0, timeout_s=60)) as runner:
        # /dev/shm: a tmpfs of the isolated trial (1 GiB here), 400 MiB written; then 600 MiB of its own pages
        shm, alloc, after = runner.run([{"mode": "shm"}, {"mode": "alloc", "alloc_mb": 600}, {"mode": "ok"}])
    assert shm.network == "own" and not shm.warnings, shm.warnings  # isolated: its /dev/shm is its own tmpfs
    for t in (shm, alloc):
        assert t.status is TrialStatus.OOM, (t.status, t.reason, t.evidence)
        assert "at its memory limit of 200 MiB" in t.reason and "peak" in t.reason, t.reason
        assert t.signal == 9 or t.exit_code not in (0, None), (t.signal, t.exit_code)
    assert after.status is TrialStatus.OK, (after.reason, after.evidence)
    assert [t.status for t in rec.trials()] == [TrialStatus.OOM, TrialStatus.OOM, TrialStatus.OK]
    assert not list(ex._pool.path.iterdir()) or all(not p.is_dir() for p in ex._pool.path.iterdir())  # none left


def test_the_runners_own_memory_cgroup_is_found_in_either_version():
    v1 = "4:memory:/process_api/abc\n0::/\n"
    info1 = "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    assert cgroup.own_memory_cgroup(v1, info1) == (cgroup.Path("/sys/fs/cgroup/memory/process_api/abc"), 1)
    assert cgroup.own_memory_cgroup("0::/user.slice/x.scope\n", "1 0 0:1 / /proc rw - proc proc rw\n") is None
    assert cgroup.own_memory_cgroup("", "") is None


def test_a_flood_of_short_lines_or_a_line_without_end_is_not_kept_past_the_runners_bound(tmp_path):
    """The runner keeps at most clock.MAX_LINES stamps and clock.MAX_BYTES of each stream of a trial: past them the
    trial is stopped and recorded invalid with the figures; the next trial runs."""
    from infrarsi.execute.clock import MAX_BYTES, MAX_LINES, read_clock

    rec = RunRecord(tmp_path)
    with Runner(rec, LocalExecutor(), Script(), toy_contract(timeout_s=60)) as runner:
        flood, endless, after = runner.run([{"mode": "flood"}, {"mode": "endless"}, {"mode": "ok"}])
    for t in (flood, endless):
        assert t.status is TrialStatus.INVALID, (t.status, t.reason, t.evidence)
        assert t.reason.startswith("its stdout printed more than the runner keeps of a stream"), t.reason
        assert "lines kept" in t.reason and "more bytes came through the pipe, not kept" in t.reason
        clock = read_clock(rec.trial_dir(t.id))
        assert len(clock["arrivals_s"]) <= MAX_LINES
        assert (rec.trial_dir(t.id) / "stdout").stat().st_size <= MAX_BYTES
    assert "200000 lines" in flood.reason and "64 MiB" in endless.reason
    assert after.status is TrialStatus.OK, (after.reason, after.evidence)
