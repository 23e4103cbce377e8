"""RunRecord: layout, ids, atomic writes (a full disk loses nothing), cost by status."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from infrarsi.execute.executor import Handle
from infrarsi.execute.record import RunRecord, cost_by_status
from infrarsi.trial import LaunchSpec
from infrarsi.trial import Cost, Metrics, TrialStatus


def test_start_launch_finish_roundtrip(tmp_path):
    rec = RunRecord(tmp_path / "run")
    assert rec.trials() == [] and rec.next_id() == 0
    t = rec.start({"mbs": 2}, role="baseline")
    assert t.id == 0 and t.status is TrialStatus.RUNNING and rec.running() == [t]
    spec = LaunchSpec(argv=["python", "-c", "pass"], env={"A": "1"})
    h = Handle(kind="local", trial_dir=str(rec.trial_dir(0)), token="abc", job_id="4242", submitted_at=1.0, time_limit_s=5)
    t = rec.launched(t, spec, h, command=["python", "-c", "pass"], env={"A": "1"})
    assert rec.get(0).job_id == "4242" and rec.handle(0) == h and rec.launch_info(0).token == "abc"
    assert (rec.trial_dir(0) / "command").read_text() == "python -c pass\n"
    done = rec.finish(t.model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=0.3),
                                           "cost": Cost(wall_s=10, devices=2)}))
    assert rec.finished() == [done] and rec.running() == [] and done.finished_at is not None
    assert rec.matching({"mbs": 2}, role="baseline") == rec.matching({"mbs": 2}) == [done]
    assert rec.matching({"mbs": 2}, role="search") == [] and rec.matching({"mbs": 4}) == []
    with pytest.raises(ValueError, match="final status"):
        rec.finish(rec.start({"mbs": 4}))
    assert [x.id for x in rec.trials()] == [0, 1]


def test_ids_are_unique_across_threads_and_gaps(tmp_path):
    rec = RunRecord(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: rec.start({"i": i}).id, range(24)))
    assert sorted(ids) == list(range(24))
    (rec.trials_dir / "30").mkdir()  # a directory whose trial.json was never written (crash after mkdir)
    assert len(rec.trials()) == 24 and rec.next_id() == 31
    # Another process sharing the run directory gets its own ids too.
    other = RunRecord(tmp_path)
    assert other.start({}).id == 31 and rec.start({}).id == 32


def test_cost_by_status(tmp_path):
    rec = RunRecord(tmp_path)
    for status, wall, dev in [(TrialStatus.OK, 10, 2), (TrialStatus.OOM, 3, 2), (TrialStatus.OOM, 1, 1)]:
        t = rec.start({})
        m = Metrics(step_time_s=1.0) if status is TrialStatus.OK else Metrics()
        rec.finish(t.model_copy(update={"status": status, "metrics": m, "cost": Cost(wall_s=wall, devices=dev)}))
    assert cost_by_status(rec.finished()) == {"ok": 20.0, "oom": 7.0, "total": 27.0} == rec.cost_by_status()


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (a real full disk). Where mounting is not allowed, the record's temporary file
    is pre-created as a link to /dev/full, which fails every write with ENOSPC."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    yield mnt, r.returncode == 0
    if r.returncode == 0:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_loses_nothing_already_written(small_disk):
    mnt, mounted = small_disk
    rec = RunRecord(mnt / "run")
    t0 = rec.finish(rec.start({"a": 1}).model_copy(update={"status": TrialStatus.OK, "metrics": Metrics(step_time_s=1.0)}))
    t1 = rec.start({"a": 2})
    before = (rec.trial_dir(1) / "trial.json").read_bytes()
    if mounted:
        filler = open(mnt / "filler", "wb", buffering=0)
        with pytest.raises(OSError):
            while True:
                filler.write(b"x" * 4096)
    else:
        os.symlink("/dev/full", rec.trial_dir(1) / f".trial.json.{os.getpid()}.{threading.get_ident()}.tmp")
    big = t1.model_copy(update={"status": TrialStatus.CRASH, "evidence": ["x" * 200] * 100})
    with pytest.raises(OSError) as e:
        rec.finish(big)
    assert e.value.errno in (errno.ENOSPC, errno.EFBIG)
    assert (rec.trial_dir(1) / "trial.json").read_bytes() == before  # the old version, whole
    assert [t.status for t in rec.trials()] == [TrialStatus.OK, TrialStatus.RUNNING]
    assert rec.get(0) == t0
    assert not [p for p in rec.trial_dir(1).iterdir() if p.name.endswith(".tmp")]  # no half-written litter
    if mounted:
        filler.close()
        (mnt / "filler").unlink()
    assert rec.finish(big).status is TrialStatus.CRASH  # space again: the write goes through
