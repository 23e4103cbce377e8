"""A trial that fills the run directory's disk (a real 48 MiB filesystem here) and ends before the runner's next
poll leaves the runner room for its records all the same: the runner holds part of its reserve allocated
(``runner.reserve``) and gives it back to the records when the disk is full. The trial is recorded, its outputs are
removed, and the next trial runs."""

import os
import subprocess

import pytest
from toy import ToyAdapter, toy_contract

from infrarsi.execute.local import LocalExecutor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus
from infrarsi.knobs import Knob, KnobSpace

# 1 MiB writes into outputs/ until the disk refuses, no pause: the disk is full well within one 0.2 s poll
FILL = ("import os\np = os.path.join(os.environ['INFRARSI_TRIAL_DIR'], 'outputs', 'fill')\nn = 0\n"
        "try:\n    with open(p, 'wb') as f:\n        while True:\n            f.write(b'x' * 2**20)\n            n += 1\n"
        "except OSError as e:\n    print(f'wrote {n} MiB: {e}', flush=True)\n")


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB filesystem of its own (a tmpfs: needs root to mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a 48 MiB filesystem needs root")
    d = tmp_path / "disk"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


class Filler(ToyAdapter):
    def knob_space(self, contract):
        return KnobSpace([Knob(name="mode", kind="categorical", domain=("fill", "ok"), default="ok")])

    def launch(self, contract, setting):
        spec = super().launch(contract, {"mode": "ok"})
        if setting.get("mode") == "fill":
            spec = spec.model_copy(update={"argv": ["python", "-c", FILL]})
        return spec


def test_a_trial_that_fills_the_disk_leaves_the_runner_room_for_its_records(small_disk):
    rec = RunRecord(small_disk / "run")
    with Runner(rec, LocalExecutor(), Filler(), toy_contract(timeout_s=60)) as runner:
        assert (small_disk / "run" / "runner.reserve").stat().st_blocks * 512 == 6 * 2**20  # 1/8 of the disk
        fill, after = runner.run([{"mode": "fill"}, {"mode": "ok"}])
    # stopped while it ran (the runner saw the disk full), or ended by itself on ENOSPC: recorded either way
    assert fill.status.is_finished() and fill.status is not TrialStatus.OK, (fill.status, fill.reason)
    assert "MiB free" in fill.reason or "No space left" in " ".join(fill.evidence), (fill.reason, fill.evidence)
    assert rec.get(fill.id) == fill and (rec.trial_dir(fill.id) / "clock.json").is_file()
    assert any(e.startswith("outputs removed") for e in fill.evidence), fill.evidence
    assert after.status is TrialStatus.OK, (after.reason, after.evidence)
    assert not (small_disk / "run" / "runner.reserve").exists()  # held while the runner runs, not after


def test_a_trial_that_fills_the_disk_is_stopped_while_it_runs(small_disk):
    """Its outputs take the disk under the runner's reserve (the toy's 2 MiB writes, 128 MiB in all, on a 48 MiB
    disk): the runner stops it there, records it invalid with the arithmetic, and removes its outputs."""
    rec = RunRecord(small_disk / "run")
    with Runner(rec, LocalExecutor(), ToyAdapter(), toy_contract(timeout_s=60)) as runner:
        [t] = runner.run([{"mode": "fill"}])
    assert t.status is TrialStatus.INVALID and t.reason.startswith("stopped while it ran"), t.reason
    assert "MiB the runner keeps for its records" in t.reason and t.metrics.step_time_s is None
    assert any(e.startswith("outputs removed") for e in t.evidence)
    assert not (rec.trial_dir(t.id) / "outputs").exists() and rec.get(t.id) == t


def test_a_record_written_on_a_full_disk_takes_the_reserve(small_disk):
    """The disk filled to the last block (as by a trial between two polls): the record is written all the same,
    from the reserve's blocks; without a reserve it is refused (ENOSPC), nothing half-written."""
    from infrarsi.rundir import RunDir

    run = RunDir(small_disk / "run")
    run.path.mkdir()
    assert run.hold_reserve(4 * 2**20)
    _fill(small_disk / "filler")
    run.write(run.path / "trial.json", '{"id": 1}')
    assert (run.path / "trial.json").read_text() == '{"id": 1}' and not run.file("runner.reserve").exists()
    _fill(small_disk / "filler2")
    with pytest.raises(OSError) as e:  # nothing held any more: a full disk refuses the next
        run.write(run.path / "other.json", "x" * 2**20)
    assert e.value.errno == 28 and not (run.path / "other.json").exists()


def _fill(path):
    """Take every block left on the disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 2**16)
    except OSError:
        pass
    finally:
        os.close(fd)
