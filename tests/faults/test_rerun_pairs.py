"""A verification pair cannot be re-rolled: a run killed during verification runs the cut pair again and records it
(the report lists it), and rolling the record of the pairs back one sealed version, deleting the verification and
editing the stages record is refused by name, on a simulated cluster run by the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from .conftest import cli, one_line_error, sim_contract, sim_env, start, trials, wait_for

PROGRESS, VERIFICATION, STAGES = "verification.progress.json", "verification.json", "stages.json"


def _watch(p, run_dir: Path, seen: list[bytes], until=lambda: False) -> None:
    """Keep every version of the pairs' record the process writes (each is written whole, by a rename)."""
    f = run_dir / PROGRESS
    while p.poll() is None and not until():
        try:
            data = f.read_bytes()
        except FileNotFoundError:
            data = None
        if data is not None and (not seen or seen[-1] != data):
            seen.append(data)
        time.sleep(0.01)


def _sealed_shas(run_dir: Path, rel: str) -> list[str]:
    return [e["sha256"] for e in map(json.loads, (run_dir / "seals.jsonl").read_text().splitlines()) if e["path"] == rel]


@pytest.fixture
def short_run(tmp_path):
    """init + doctor of the simulated cluster, with a search of two trials: verification comes soon."""
    env = sim_env(tmp_path)
    run_dir = tmp_path / "run"
    assert cli("init", sim_contract(tmp_path, max_trials=2), "--run-dir", run_dir, env=env).returncode == 0
    r = cli("doctor", "--run-dir", run_dir, env=env)
    assert r.returncode == 0, r.stderr
    return run_dir, env


def test_a_pair_cut_by_a_kill_is_recorded_and_a_rolled_back_pair_is_refused(short_run, tmp_path):
    run_dir, env = short_run
    seen: list[bytes] = []
    p = start("run", "--run-dir", run_dir, env=env)
    cut = lambda: any(t["status"] == "running" for t in trials(run_dir, "verify", finished=False).values()) and len(seen)
    _watch(p, run_dir, seen, until=cut)
    assert wait_for(cut, proc=p), p.communicate()
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    p = start("run", "--run-dir", run_dir, env=env)  # resumes: the interrupted pair is run again
    _watch(p, run_dir, seen)
    assert p.wait() == 0, p.communicate()
    seen.append((run_dir / PROGRESS).read_bytes())
    shas = _sealed_shas(run_dir, PROGRESS)
    versions = {__import__("hashlib").sha256(v).hexdigest(): v for v in seen}
    assert len(shas) >= 2 and shas[-2] in versions, "missed the pairs' record's previous version"

    # The attack, on a copy: the pairs' record one sealed version back, the verification gone, the stages edited
    # so that `run` verifies again -- and would re-run the last pair until its interval clears.
    attacked = tmp_path / "attacked"
    shutil.copytree(run_dir, attacked)
    (attacked / PROGRESS).write_bytes(versions[shas[-2]])
    (attacked / VERIFICATION).unlink()
    stages = json.loads((attacked / STAGES).read_text())
    stages.pop("verify")
    (attacked / STAGES).write_text(json.dumps(stages))
    n = len(trials(attacked, finished=False))
    line = one_line_error(cli("run", "--run-dir", attacked, env=env))
    assert "tampered records" in line and "(and 2 more)" in line, line
    assert len(trials(attacked, finished=False)) == n  # nothing was run again
    from infrarsi.rundir import chain
    from infrarsi.report import load_run

    found = " ".join(chain.problems(attacked))  # what report and apply refuse with, in full
    assert f"{STAGES} was edited after it was sealed" in found and f"{VERIFICATION} was sealed but is gone" in found
    assert f"{PROGRESS} was rolled back to an earlier sealed version" in found, found
    with pytest.raises(chain.SealError):
        load_run(attacked)

    # The honest run: the pair the kill cut was run again, and the report says which and why.
    from infrarsi.report.render import build, to_markdown

    md = to_markdown(build(load_run(run_dir), sections=["verification"]))
    assert "**Pairs run again: 1.**" in md and "interrupted by a restart of the runner" in md, md
    assert "Verify trials no pair accounts for" not in md
