"""The run stage under faults, on a simulated cluster: two runs on one directory, kill -9 during the search and
during re-verification, corrupted records, a full disk. Nothing recorded is lost or rewritten; every failure is one
line naming the file and the next command."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from .conftest import cli, one_line_error, start, trials, wait_for


def _settings(ts):
    return [json.dumps(t["setting"], sort_keys=True) for t in ts.values()]


def _kill(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def _snapshot(run_dir):
    """Every file's bytes under the run directory (but the lock's holder record)."""
    return {p: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file() and p.name != "runner.lock"}


@pytest.mark.slow
def test_a_second_run_on_the_same_directory_is_refused_and_a_dead_holders_lock_is_taken_over(sim_run):
    run_dir, env = sim_run
    first = start("run", "--run-dir", run_dir, env=env)
    assert wait_for(lambda: trials(run_dir, "search"), proc=first), first.communicate()
    second = cli("run", "--run-dir", run_dir, env=env)
    line = one_line_error(second)
    assert f"pid {first.pid} on {socket.gethostname()} since " in line and "`infrarsi run`" in line, line
    _kill(first)
    before = trials(run_dir, "search")
    again = cli("run", "--run-dir", run_dir, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"took over the lock of {run_dir}" in again.stderr and f"pid {first.pid}" in again.stderr
    after = trials(run_dir, "search")
    assert set(before) <= set(after) and len(after) <= 4
    assert len(set(_settings(after))) == len(after)  # one search: no setting twice
    assert not trials(run_dir, finished=False).keys() - trials(run_dir).keys()  # nothing left running


@pytest.mark.slow
def test_kill_during_verification_then_rerun_finishes_once_and_more_extends_on_purpose(sim_run):
    run_dir, env = sim_run
    p = start("run", "--run-dir", run_dir, env=env)
    running_verify = lambda: any(t["status"] == "running" for t in trials(run_dir, "verify", finished=False).values())
    assert wait_for(running_verify, proc=p), p.communicate()
    _kill(p)
    search_before = trials(run_dir, "search")
    stuck = [i for i, t in trials(run_dir, "verify", finished=False).items() if t["status"] == "running"]
    assert stuck
    # Provenance was written with each trial: the kill lost none of it.
    for i in search_before:
        assert json.loads((run_dir / "trials" / str(i) / "proposal.json").read_text()).get("kind"), i

    r = cli("run", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert trials(run_dir, "search") == search_before  # the stopped search was not reopened
    for i in stuck:
        t = json.loads((run_dir / "trials" / str(i) / "trial.json").read_text())
        assert t["status"] == "cancelled" and "interrupted by a restart" in t["reason"]
    assert not [t for t in trials(run_dir, finished=False).values() if t["status"] == "running"]
    ver = json.loads((run_dir / "verification.json").read_text())
    search = json.loads((run_dir / "search.json").read_text())
    assert set(map(int, search["proposals"])) == set(search_before)

    # A finished run is finished: the same command says so and runs nothing.
    snap = _snapshot(run_dir)
    r = cli("run", "--run-dir", run_dir, env=env)
    assert r.returncode == 0 and "run already finished" in r.stdout and "--more N" in r.stdout, r.stdout
    assert _snapshot(run_dir) == snap

    # --more N extends the search by exactly N trials, on purpose, and re-verifies.
    r = cli("run", "--run-dir", run_dir, "--more", "2", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    extended = trials(run_dir, "search")
    assert set(search_before) < set(extended) and len(extended) == len(search_before) + 2
    assert len(set(_settings(extended))) == len(extended)
    assert json.loads((run_dir / "verification.json").read_text())["finished_at"] > ver["finished_at"]
    search = json.loads((run_dir / "search.json").read_text())
    assert set(map(int, search["proposals"])) == set(extended)


def test_unreadable_records_are_refused_by_name_and_left_untouched(sim_run):
    run_dir, env = sim_run
    noise = run_dir / "noise.json"
    good = noise.read_bytes()
    noise.write_bytes(good[: len(good) // 2])
    line = one_line_error(cli("run", "--run-dir", run_dir, env=env))
    assert "noise.json" in line and ("left untouched" in line or "restore it" in line), line
    assert noise.read_bytes() == good[: len(good) // 2] and not trials(run_dir, "search")
    noise.write_bytes(good)

    lock = run_dir / "contract.lock"
    lock_bytes = lock.read_bytes()
    lock.write_bytes(os.urandom(300))
    garbage = lock.read_bytes()
    for cmd in (["run"], ["doctor"], ["report"]):
        line = one_line_error(cli(*cmd, "--run-dir", run_dir, env=env))
        assert str(lock) in line and "not a readable contract lock" in line, line
    assert lock.read_bytes() == garbage
    lock.write_bytes(lock_bytes)

    base = run_dir / "trials" / "0" / "trial.json"  # a doctor baseline run the search is measured against
    n_dirs = len(list((run_dir / "trials").iterdir()))
    cut = base.read_bytes()[:-40]
    base.write_bytes(cut)
    line = one_line_error(cli("run", "--run-dir", run_dir, env=env))
    assert "trials/0/trial.json" in line and ("cannot be read" in line or "restore it" in line), line
    assert base.read_bytes() == cut and len(list((run_dir / "trials").iterdir())) == n_dirs


@pytest.mark.slow
def test_a_truncated_trial_record_is_refused_by_name_and_left_untouched(sim_run):
    run_dir, env = sim_run
    p = start("run", "--run-dir", run_dir, env=env)
    assert wait_for(lambda: len(trials(run_dir, "search")) >= 2, proc=p), p.communicate()
    _kill(p)
    victim = run_dir / "trials" / str(min(trials(run_dir, "search"))) / "trial.json"
    cut = victim.read_bytes()[:100]
    victim.write_bytes(cut)
    snap = _snapshot(run_dir)
    line = one_line_error(cli("run", "--run-dir", run_dir, env=env))
    assert victim.relative_to(run_dir).as_posix() in line and ("cannot be read" in line or "restore it" in line), line
    assert _snapshot(run_dir) == snap  # nothing rewritten, nothing new


@pytest.mark.slow
def test_a_truncated_search_json_is_refused_not_rewritten(sim_run):
    run_dir, env = sim_run
    r = cli("run", "--run-dir", run_dir, "--max-trials", "3", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    search = run_dir / "search.json"
    cut = search.read_bytes()[:-200]
    search.write_bytes(cut)
    n = len(trials(run_dir))
    line = one_line_error(cli("run", "--run-dir", run_dir, "--more", "2", env=env))
    assert "search.json" in line and ("left untouched" in line or "restore it" in line), line
    assert search.read_bytes() == cut and len(trials(run_dir)) == n


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs (root only): a real full disk."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_loses_nothing(tmp_path, small_disk):
    from .conftest import sim_contract, sim_env

    env = sim_env(tmp_path)
    run_dir = small_disk / "run"
    assert cli("init", sim_contract(tmp_path), "--run-dir", run_dir, env=env).returncode == 0
    assert cli("doctor", "--run-dir", run_dir, env=env).returncode == 0
    p = start("run", "--run-dir", run_dir, env=env)
    assert wait_for(lambda: len(trials(run_dir, "search")) >= 2, proc=p)
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # fill the disk to the last block while the run goes on
        try:
            while True:
                f.write(b"\0" * 2**16)
                f.flush()
        except OSError:
            pass
    out, errtext = p.communicate(timeout=120)
    lines = [ln for ln in errtext.splitlines() if ln.startswith("error:")]
    assert p.returncode == 1 and "Traceback" not in errtext, errtext[-3000:]
    assert len(lines) == 1 and "no space left on the device writing" in lines[0] and str(small_disk) in lines[0], lines
    assert "nothing recorded was lost" in lines[0] and "infrarsi run --run-dir" in lines[0]
    for f in run_dir.rglob("*.json"):
        json.loads(f.read_text())  # every record is whole
    before = trials(run_dir, "search")
    filler.unlink()
    r = cli("run", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    after = trials(run_dir, "search")
    assert all(after[i] == t for i, t in before.items())  # finished trials kept as they were
    assert (run_dir / "verification.json").exists()
