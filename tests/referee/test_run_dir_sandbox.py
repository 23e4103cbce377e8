"""Trial processes cannot write their run directory: a trial that tries to overwrite a sibling's record,
``noise.json``, ``verification.json`` or the seal chain, or to read the seal key, fails to, and nothing recorded
changes. Where the machine cannot sandbox (or the sandbox is off) the trial record says so and the seal chain is
checked after the trial, so the same write fails the trial instead."""

import json
import sys

import pytest

from infrarsi.contract import seal
from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor, sandbox_problem
from infrarsi.execute.spec import LaunchSpec

from .conftest import tiny

needs_sandbox = pytest.mark.skipif(sandbox_problem() is not None,
                                   reason=f"this machine cannot sandbox trials: {sandbox_problem()}")

# Tries every record of its run (from INFRARSI_TRIAL_DIR) and the seal key; prints one JSON line of what happened.
ATTACK = """
import json, os, sys
from pathlib import Path
trial = Path(os.environ["INFRARSI_TRIAL_DIR"])
run = trial.parent.parent
out = {}
for rel in sys.argv[2:]:
    try:
        with open(run / rel, "a") as f:
            f.write("forged\\n")
        out[rel] = "written"
    except OSError as e:
        out[rel] = e.strerror
(trial / "mine.txt").write_text("a trial writes its own directory")
(trial / "clock.json").symlink_to("../../noise.json")  # the harness's own record, pointed at a sealed one
out["key"] = Path(sys.argv[1]).read_bytes().hex()
print(json.dumps(out), flush=True)
"""
TARGETS = ["noise.json", "verification.json", "trials/0/trial.json", "seals.jsonl", "contract.lock"]


def _attack(run, tmp_path, executor, targets=TARGETS):
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    trial = run / "trials" / "99"
    spec = LaunchSpec(argv=[sys.executable, str(script), str(seal.key_path()), *targets], time_limit_s=60)
    handle = executor.submit(spec, trial, token="attack")
    outcome = wait(executor, handle, timeout_s=60)
    assert outcome.returncode == 0, (trial / "stderr").read_text()
    return handle, json.loads((trial / "stdout").read_text().splitlines()[-1]), trial


@needs_sandbox
def test_a_sandboxed_trial_cannot_write_its_run_directory_or_read_the_seal_key(recorded, tmp_path):
    before = {rel: (recorded / rel).read_bytes() for rel in TARGETS}
    assert seal.problems(recorded) == []
    handle, got, trial = _attack(recorded, tmp_path, LocalExecutor())
    assert handle.sandboxed and not handle.unsandboxed_why
    assert {rel: got[rel] for rel in TARGETS} == {rel: "Read-only file system" for rel in TARGETS}
    assert got["key"] == ""  # the key reads as empty inside the sandbox
    assert (trial / "mine.txt").is_file()  # its own directory stays writable
    assert not (trial / "clock.json").is_symlink()  # the harness wrote its record in place of the trial's symlink
    last = json.loads((recorded / "seals.jsonl").read_text().splitlines()[-1])
    assert last["path"] == "trials/99/clock.json"  # and sealed it under its own name, not as noise.json
    after = {rel: (recorded / rel).read_bytes() for rel in TARGETS}
    assert after["seals.jsonl"].startswith(before.pop("seals.jsonl"))  # the runner sealed the trial's clock.json
    assert {rel: after[rel] for rel in before} == before  # nothing recorded changed
    assert seal.problems(recorded) == []


def test_without_the_sandbox_the_writes_land_and_the_handle_says_why(recorded, tmp_path):
    targets = ["noise.json", "verification.json", "trials/0/trial.json"]
    handle, got, _ = _attack(recorded, tmp_path, LocalExecutor(LocalExecutor.Config(sandbox=False)), targets)
    assert not handle.sandboxed and "sandbox is off" in handle.unsandboxed_why
    assert got["noise.json"] == "written" and got["key"] == seal.key_path().read_bytes().hex()
    found = seal.problems(recorded)  # the post-hoc check the runner makes after every unsandboxed trial
    assert found[0].startswith("noise.json was edited after it was sealed"), found
    assert any(p.startswith("trials/0/trial.json was edited") for p in found)
    with open(recorded / "seals.jsonl", "a") as f:
        f.write("forged\n{}\n")
    assert "is not a seal entry; the chain was edited" in seal.problems(recorded)[0]
    (recorded / "contract.lock").write_text("forged")
    assert seal.problems(recorded) == [f"{recorded / 'contract.lock'} is not a lock (not a JSON object): it was "
                                       f"edited; the records cannot be trusted: rerun into a new --run-dir"]


# A correct RMSNorm whose module, at import, appends to every sibling trial's record of its run.
SIBLING = '''"""RMSNorm, correct, plus an attack on the records of the trials run before it."""
import os
from pathlib import Path

import torch

_me = Path(os.environ["INFRARSI_TRIAL_DIR"])
for _d in sorted(_me.parent.iterdir()):
    if _d != _me and (_d / "trial.json").is_file():
        try:
            with open(_d / "trial.json", "a") as _f:
                _f.write(" ")
            print(f"attack: appended to {_d.name}/trial.json", flush=True)
        except OSError as _e:
            print(f"attack: {_d.name}/trial.json: {_e.strerror}", flush=True)


def forward(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
'''


def _doctor(cli, project, monkeypatch, sandbox):
    monkeypatch.setenv("INFRARSI_SANDBOX", sandbox)
    (project / "kernels/rmsnorm").mkdir(parents=True)
    (project / "kernels/rmsnorm/sibling.py").write_text(SIBLING)
    text = tiny(knobs='kernel_rmsnorm = ["kernels/rmsnorm/sibling.py"]',
                baseline='kernel_rmsnorm = "kernels/rmsnorm/sibling.py"')
    # no seed run: the warm-up and the two repeats are trials enough with siblings to attack (one launch less)
    assert "compare_steps = 6\n" in text
    (project / "c.toml").write_text(text.replace("compare_steps = 6\n", "compare_steps = 6\nseed_runs = 0\n"))
    assert cli("init", "c.toml", "--run-dir", "run").returncode == 0
    return cli("doctor", "--run-dir", "run")


@needs_sandbox
def test_a_trial_that_edits_a_sibling_record_through_the_cli_fails_to(cli, project, monkeypatch):
    r = _doctor(cli, project, monkeypatch, "on")
    run = project / "run"
    assert "attack: 0/trial.json: Read-only file system" in (run / "trials/1/stdout").read_text()
    assert seal.problems(run) == []  # the doctor's records are as the runner wrote them
    t1 = json.loads((run / "trials/1/trial.json").read_text())
    assert t1["warnings"] == []
    assert r.returncode == 0, r.stderr  # otherwise an honest kernel: the doctor finishes


def test_without_the_sandbox_a_sibling_edit_fails_the_trial_and_is_recorded(cli, project, monkeypatch):
    r = _doctor(cli, project, monkeypatch, "off")
    run = project / "run"
    assert "attack: appended to 0/trial.json" in (run / "trials/1/stdout").read_text()
    assert r.returncode == 1
    assert "the run's records changed while it ran without the sandbox: trials/0/trial.json was edited" in r.err, r.stderr
    t1 = json.loads((run / "trials/1/trial.json").read_text())
    assert t1["status"] == "invalid" and "ran without the trial sandbox: the trial sandbox is off" in t1["warnings"][0]
    t0 = json.loads((run / "trials/0/trial.json").read_text())  # the first trial ran before any sibling existed
    assert "ran without the trial sandbox" in t0["warnings"][0]
