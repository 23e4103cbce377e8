"""Holes 2 and 6: records edited (consistently or not) after they were made, and a contract re-sealed with
its lock. Every one is refused by report, apply and run, naming the first record that does not match."""

import json
import shutil

import pytest

from infrarsi.rundir import chain
from infrarsi.rundir.names import SEALS


def _edit_json(path, fn):
    body = json.loads(path.read_text())
    fn(body)
    path.write_text(json.dumps(body, indent=2, sort_keys=True))


def _forge_verification(run):
    """A consistent edit: every step time of the candidate's verify trials divided by 2, and the headline to match."""
    ver = json.loads((run / "verification.json").read_text())
    cand = next(c for c in ver["candidates"] if c["promoted"])
    for _, b in cand["trials"]:
        _edit_json(run / "trials" / str(b) / "trial.json",
                   lambda t: t["metrics"].update(step_time_s=t["metrics"]["step_time_s"] / 2))
    cand["speedup"] *= 2
    cand["ci95"] = [x * 2 for x in cand["ci95"]]
    cand["candidate_s"] = [x / 2 for x in cand["candidate_s"]]
    (run / "verification.json").write_text(json.dumps(ver, indent=2, sort_keys=True))
    return cand["trials"][0][1]


def test_consistently_edited_records_are_refused_by_report_and_apply(recorded, cli):
    _forge_verification(recorded)
    r = cli("report", "--run-dir", recorded)
    assert r.returncode == 1 and "verification.json was edited after it was sealed" in r.err, r.stderr
    assert "(and 3 more)" in r.err  # the three candidate trials
    assert not (recorded / "report.md").exists()
    r = cli("apply", "--run-dir", recorded, "--dry-run")
    assert r.returncode == 1 and "apply refused: tampered records" in r.err and "verification.json" in r.err


def test_one_edited_trial_record_is_named(recorded, cli):
    _edit_json(recorded / "trials" / "7" / "trial.json", lambda t: t.update(status="ok"))
    r = cli("apply", "--run-dir", recorded, "--dry-run")
    assert r.returncode == 1 and "trials/7/trial.json was edited after it was sealed" in r.err, r.stderr


def test_a_forged_noise_profile_is_refused_by_run(recorded, cli):
    _edit_json(recorded / "noise.json", lambda n: n.update(mde=0.001, repeats_for_target=2))
    r = cli("run", "--run-dir", recorded)
    assert r.returncode == 1 and "noise.json was edited after it was sealed" in r.err, r.stderr


def test_a_forged_in_flight_record_is_refused_not_resumed(recorded, cli):
    src = recorded / "trials" / "5" / "trial.json"
    forged = recorded / "trials" / "999"
    forged.mkdir()
    body = json.loads(src.read_text())
    body.update(id=999, status="running", metrics={}, path=str(forged))
    (forged / "trial.json").write_text(json.dumps(body))
    r = cli("run", "--run-dir", recorded)
    assert r.returncode == 1 and "carries no seal" in r.err and "trials/999/trial.json" in r.err, r.stderr
    assert not (forged / "stdout").exists()  # never launched


def test_a_deleted_record_is_refused(recorded, cli):
    shutil.rmtree(recorded / "trials" / "3")
    r = cli("report", "--run-dir", recorded)
    assert r.returncode == 1 and "trials/3/trial.json was sealed but is gone" in r.err, r.stderr


def test_contract_and_lock_edited_together_are_refused(recorded, cli):
    """Edit the contract, then rewrite the lock to match it (its hash recomputed): the lock's seal gives it away."""
    from infrarsi.contract.lock import contract_hash, normalized
    from infrarsi.contract.model import load_contract

    lock_path = recorded / "contract.lock"
    lock = json.loads(lock_path.read_text())
    contract = recorded.parent / "minigpt-cpu.toml"
    contract.write_text(contract.read_text().replace("max_trials = 14", "max_trials = 400"))
    c = load_contract(contract)
    lock.update(sha256=contract_hash(c), contract=normalized(c))
    lock_path.write_text(json.dumps(lock))
    for verb in (("run",), ("apply", "--dry-run")):
        r = cli(*verb, "--run-dir", recorded)
        assert r.returncode == 1 and "contract.lock was edited by hand" in r.err and "the lock, not the contract" in r.err


def test_a_rehashed_lock_whose_contract_was_deleted_is_refused(recorded, cli):
    (recorded.parent / "minigpt-cpu.toml").unlink()
    r = cli("report", "--run-dir", recorded)
    assert r.returncode == 1 and "minigpt-cpu.toml, locked into" in r.err and "is gone" in r.err, r.stderr


def test_records_remember_the_lock_they_were_made_under(recorded, cli):
    """Even a key holder who re-locks the run to another contract cannot carry the old records over."""
    from infrarsi.contract.lock import contract_hash, normalized, workload_sha256
    from infrarsi.contract.model import load_contract
    from infrarsi.testing.sealed import reseal_lock

    contract = recorded.parent / "minigpt-cpu.toml"
    contract.write_text(contract.read_text().replace("max_trials = 14", "max_trials = 400"))
    c = load_contract(contract)
    lock = json.loads((recorded / "contract.lock").read_text())
    lock.update(sha256=contract_hash(c), contract=normalized(c), workload_sha256=workload_sha256(contract_hash(c), {}))
    reseal_lock(recorded, lock)
    r = cli("apply", "--run-dir", recorded, "--dry-run")
    assert r.returncode == 1 and "trials/0/trial.json was sealed under lock" in r.err and "re-sealed" in r.err, r.stderr


def test_an_edited_chain_is_refused(recorded, cli):
    log = recorded / SEALS
    lines = log.read_text().splitlines()
    e = json.loads(lines[4])
    e["sha256"] = "0" * 64
    lines[4] = json.dumps(e)
    log.write_text("\n".join(lines) + "\n")
    r = cli("report", "--run-dir", recorded)
    assert r.returncode == 1 and "seals.jsonl entry 4" in r.err and "does not match its seal" in r.err, r.stderr


def test_the_honest_run_still_reports_and_applies(recorded, cli):
    assert cli("report", "--run-dir", recorded).returncode == 0
    r = cli("apply", "--run-dir", recorded, "--dry-run")
    assert r.returncode == 0, r.stderr


def test_the_key_lives_outside_the_run(recorded):
    assert not chain.key_path().resolve().is_relative_to(recorded.resolve())
    assert chain.key_path().stat().st_mode & 0o077 == 0


def test_a_write_cut_by_a_crash_still_resumes(recorded, monkeypatch):
    """kill -9 between the chain entry and the file (simulated: the process dies in the file's replace): the file
    is at its previous sealed version, the chain's last line may be half written. Neither is tampering: the run
    still loads, and the next write seals the file as it is ("mends" it) before its own entry."""
    from infrarsi.contract.lock import load_locked
    from infrarsi.rundir import RunDir, chain

    run = RunDir(recorded)
    t = run.trial_file(2, "trial.json")
    before = t.read_text()
    body = json.loads(before)
    body["reason"] = "rewritten"

    def killed(target, data):
        raise SystemExit("killed")

    with monkeypatch.context() as m:
        m.setattr(chain, "_put", killed)
        with pytest.raises(SystemExit):
            run.write(t, json.dumps(body))
    assert t.read_text() == before
    with open(recorded / SEALS, "a") as f:
        f.write('{"n": 99, "path": "trials/2/tr')  # and a later entry cut mid-line
    load_locked(recorded)
    run.write(run.trial_file(3, "trial.json"), run.trial_file(3, "trial.json").read_text())
    last = [json.loads(x) for x in (recorded / SEALS).read_text().splitlines()[-2:]]
    assert last[0]["path"] == "trials/2/trial.json" and last[0]["mends"] == last[0]["n"] - 1  # sealed as it is
    load_locked(recorded)
    t.write_text(json.dumps(body))  # the write that never happened, made by hand now: an edit
    with pytest.raises(chain.SealError, match="trials/2/trial.json was edited after it was sealed"):
        load_locked(recorded)


def test_a_chain_cut_back_with_its_records_is_refused(recorded, tmp_path):
    """Records rolled back together with the chain (its last entries cut, or the whole run directory put back from
    a copy) read as a consistent earlier run; the run's head, kept beside the key, is ahead of it."""
    from infrarsi.testing.sealed import rewrite_sealed

    noise = json.loads((recorded / "noise.json").read_text())
    rewrite_sealed(recorded, "noise.json", json.dumps(noise))
    backup = tmp_path / "backup"
    shutil.copytree(recorded, backup)
    old = (recorded / "noise.json").read_bytes()
    rewrite_sealed(recorded, "noise.json", json.dumps({**noise, "mde": noise["mde"] / 10}))
    assert chain.problems(recorded) == []
    # the chain's last entry cut, and the record it sealed put back as it was
    log = recorded / SEALS
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))
    (recorded / "noise.json").write_bytes(old)
    found = chain.problems(recorded)
    assert found and "the chain was cut and records rolled back" in found[0], found
    # the whole run directory put back from the copy
    shutil.rmtree(recorded)
    shutil.copytree(backup, recorded)
    found = chain.problems(recorded)
    assert found and "the chain was cut and records rolled back" in found[0], found


def _fail_verdict(run):
    """The run stage's record of one candidate that failed verification (its own writer, sealed)."""
    from infrarsi.kernels import verdicts
    from infrarsi.testing.recorded_run import KERNEL

    cand = run.parent / KERNEL
    sha = __import__("hashlib").sha256(cand.read_bytes()).hexdigest()
    f = verdicts.record(run, {str(cand): {"op": "rmsnorm", "verdict": "fail", "sha256": sha,
                                          "reasons": ["forward: output 0: 9 of 4096 elements off"]}})
    assert chain.problems(run) == []  # as written, the records are whole
    return cand, f


def _pass_it(f):
    _edit_json(f, lambda d: [v.update(verdict="pass", reasons=[]) for v in d.values()])


def test_a_kernel_verdict_edited_from_fail_to_pass_is_refused_by_run_report_and_apply(recorded, cli):
    _, f = _fail_verdict(recorded)
    _pass_it(f)
    for verb in (("run",), ("report",), ("apply", "--dry-run")):
        r = cli(*verb, "--run-dir", recorded)
        assert r.returncode == 1 and "kernels/verdicts.json was edited after it was sealed" in r.err, (verb, r.stderr)


def test_a_kernel_verdict_file_copied_in_without_a_seal_is_refused(recorded, cli, monkeypatch):
    """A verdicts.json the run stage never wrote (a passing verdict for a candidate nobody verified, copied
    into the run): it carries no seal, so run, report, apply and the training process refuse it."""
    from infrarsi.kernels import verdicts
    from infrarsi.testing.recorded_run import KERNEL

    cand = recorded.parent / KERNEL
    f = verdicts.verdict_file(recorded)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({str(cand.resolve()): {"op": "rmsnorm", "verdict": "pass", "path": str(cand),
                                                    "sha256": __import__("hashlib").sha256(cand.read_bytes()).hexdigest()}}))
    for verb in (("run",), ("report",), ("apply", "--dry-run")):
        r = cli(*verb, "--run-dir", recorded)
        assert r.returncode == 1 and "kernels/verdicts.json carries no seal" in r.err, (verb, r.stderr)
    monkeypatch.setenv(verdicts.ENV, str(f))
    why = verdicts.refusal("rmsnorm", str(cand))
    assert why is not None and "kernels/verdicts.json carries no seal" in why


def test_an_edited_kernel_verdict_is_refused_inside_the_run_too(recorded, monkeypatch):
    """The training process will not run a candidate on an edited verdict file, and the run stage will not
    rewrite one (a rewrite would seal the edit)."""
    from infrarsi.kernels import verdicts

    cand, f = _fail_verdict(recorded)
    monkeypatch.setenv(verdicts.ENV, str(f))
    assert "is fail in this run" in verdicts.refusal("rmsnorm", str(cand))
    _pass_it(f)
    why = verdicts.refusal("rmsnorm", str(cand))
    assert why is not None and "kernels/verdicts.json was edited after it was sealed" in why
    with pytest.raises(chain.SealError, match="kernels/verdicts.json was edited"):
        verdicts.disqualify(recorded, str(cand), "numerics_drift in trial 9")
