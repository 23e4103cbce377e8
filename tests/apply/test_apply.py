"""`infrarsi apply`: one audited commit for the best promoted candidate, or a one-line refusal that
writes nothing."""

import hashlib
import json
import shlex
import stat
import subprocess
import time

import pytest

from infrarsi.adapters.launcher import load_profile
from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import KERNEL, KERNEL_SPEC, copy_run
from infrarsi.testing.sealed import reseal_lock, rewrite_sealed
from infrarsi.workloads.minigpt import build_parser

OUT = "infrarsi-tuned/minigpt-cpu"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _apply(run_dir, repo, consoles, dry_run=False):
    con, err, out, errbuf = consoles
    code = stage.run(run_dir, repo=repo, dry_run=dry_run, console=con, err=err)
    return code, out.getvalue(), errbuf.getvalue()


def _head(repo):
    return git(repo, "rev-parse", "HEAD").strip()


def test_apply_makes_one_audited_commit(run_dir, repo, consoles):
    before = _head(repo)
    code, out, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    ver = json.loads((run_dir / "verification.json").read_text())
    best = max((c for c in ver["candidates"] if c["promoted"]), key=lambda c: c["speedup"])
    lock = json.loads((run_dir / "contract.lock").read_text())
    # exactly one new commit, the tree clean afterwards
    assert git(repo, "rev-list", "--count", f"{before}..HEAD").strip() == "1"
    assert git(repo, "status", "--porcelain") == ""
    msg = git(repo, "log", "-1", "--format=%B")
    assert lock["sha256"] in msg
    assert f"{best['speedup']:.3f}x, 95% CI [{best['ci95'][0]:.3f}, {best['ci95'][1]:.3f}]" in msg
    assert ", ".join(f"{a}/{b}" for a, b in best["trials"]) in msg
    sha = hashlib.sha256((run_dir.parent / KERNEL).read_bytes()).hexdigest()
    assert f"{KERNEL}  sha256 {sha}" in msg and "inside scope (kernels/**/*.py)" in msg
    files = set(git(repo, "show", "--name-only", "--format=", "HEAD").split())
    assert files == {KERNEL, f"{OUT}/launch.sh", f"{OUT}/sbatch.sh", f"{OUT}/profile.json", f"{OUT}/audit.json"}
    assert (repo / KERNEL).read_bytes() == (run_dir.parent / KERNEL).read_bytes()
    # the tuned launch is the workload's own command line for the promoted setting
    launch = (repo / OUT / "launch.sh").read_text()
    assert (repo / OUT / "launch.sh").stat().st_mode & stat.S_IXUSR
    line = next(ln for ln in launch.splitlines() if ln.startswith("exec "))
    argv = shlex.split(line)[1:-1]  # drop exec and "$@"
    assert argv[:3] == ["python", "-m", "infrarsi.workloads.minigpt"]
    args = build_parser().parse_args(argv[3:])
    s = best["setting"]
    assert (args.micro_batch_size, args.attention_backend, args.intra_op_threads) == (
        s["micro_batch_size"], s["attention_backend"], s["intra_op_threads"])
    assert args.kernel == [f"rmsnorm={KERNEL_SPEC}"]  # the file written once (above), its variant named here
    sbatch = (repo / OUT / "sbatch.sh").read_text()
    assert "#SBATCH --nodes=1" in sbatch and "--micro-batch-size 8" in sbatch
    fw, setting = load_profile(repo / OUT / "profile.json")  # what infrarsi-launch --profile reads
    assert fw is None and setting["micro_batch_size"] == s["micro_batch_size"]
    assert not any(k.startswith("kernel_") for k in setting)
    audit = json.loads((repo / OUT / "audit.json").read_text())
    assert audit["contract_sha256"] == lock["sha256"] and audit["trials"] == best["trials"]
    assert "best of 1 promoted" in out


def test_dry_run_shows_the_diff_and_writes_nothing(run_dir, repo, consoles):
    before = _head(repo)
    code, out, err = _apply(run_dir, repo, consoles, dry_run=True)
    assert code == 0, err
    assert f"+++ b/{OUT}/launch.sh" in out and f"+++ b/{KERNEL}" in out and "--- /dev/null" in out
    assert "+exec python -m infrarsi.workloads.minigpt" in out
    assert "commit message that would be made" in out
    assert _head(repo) == before and git(repo, "status", "--porcelain") == ""
    assert not (repo / "infrarsi-tuned").exists()


def _refused(run_dir, repo, consoles, *needles, code_is=1):
    before = _head(repo)
    code, out, err = _apply(run_dir, repo, consoles)
    line = err.strip()
    assert code == code_is, (out, err)
    assert line.startswith("apply refused:") and "\n" not in line, line
    for n in needles:
        assert n in line, line
    assert _head(repo) == before and not (repo / "infrarsi-tuned").exists()


def test_refuses_a_dirty_tree(run_dir, repo, consoles):
    (repo / "README.md").write_text("edited\n")
    _refused(run_dir, repo, consoles, "dirty", "README.md")


def test_refuses_an_untracked_file(run_dir, repo, consoles):
    (repo / "notes.txt").write_text("x\n")
    _refused(run_dir, repo, consoles, "dirty", "notes.txt")


def test_refuses_a_kernel_outside_the_scope(out_of_scope_root, repo, consoles, tmp_path):
    run_dir = copy_run(out_of_scope_root, tmp_path / "project")
    _refused(run_dir, repo, consoles, f"{KERNEL} is outside the locked scope")
    assert not (repo / KERNEL).exists()


def test_refuses_a_kernel_changed_since_verification(run_dir, repo, consoles):
    k = run_dir.parent / KERNEL
    k.write_text(k.read_text() + "\n# tuned by hand\n")
    _refused(run_dir, repo, consoles, "changed since it was verified", "stale")


def test_refuses_a_kernel_that_failed_verification(run_dir, repo, consoles):
    p = run_dir / "search.json"
    s = json.loads(p.read_text())
    s["kernel_verdicts"][KERNEL_SPEC]["verdict"] = "fail"  # verdicts are per candidate value (file@variant)
    rewrite_sealed(run_dir, p.name, json.dumps(s))  # a key holder's edit: the audit is the check under test
    _refused(run_dir, repo, consoles, f"{KERNEL_SPEC} failed kernel verification")


def test_refuses_when_nothing_was_promoted(run_dir, repo, consoles):
    p = run_dir / "verification.json"
    v = json.loads(p.read_text())
    for c in v["candidates"]:
        c["promoted"] = False
    rewrite_sealed(run_dir, p.name, json.dumps(v))  # a key holder's edit: the audit is the check under test
    _refused(run_dir, repo, consoles, "no promoted candidate", "nothing to apply", code_is=3)  # 3: nothing promoted


def test_refuses_numbers_the_trials_do_not_give(run_dir, repo, consoles):
    p = run_dir / "verification.json"
    v = json.loads(p.read_text())
    v["candidates"][0]["speedup"] = 3.5
    rewrite_sealed(run_dir, p.name, json.dumps(v))  # a key holder's edit: the audit is the check under test
    _refused(run_dir, repo, consoles, "unverified candidate: its trials give speedup")


def test_refuses_verification_older_than_the_lock(run_dir, repo, consoles):
    p = run_dir / "contract.lock"
    lock = json.loads(p.read_text())
    lock["locked_at"] = time.time() + 3600  # re-locked after the verification finished
    reseal_lock(run_dir, lock)  # re-locked by a key holder: the audit is the check under test
    _refused(run_dir, repo, consoles, "stale verification")


def test_refuses_a_contract_changed_since_the_lock(run_dir, repo, consoles):
    c = run_dir.parent / "minigpt-cpu.toml"
    c.write_text(c.read_text().replace("max_trials = 14", "max_trials = 40"))
    _refused(run_dir, repo, consoles, "contract mismatch", "budget.max_trials 14 -> 40")


def test_refuses_verification_under_another_contract(run_dir, repo, consoles):
    p = run_dir / "verification.json"
    v = json.loads(p.read_text())
    v["contract_sha256"] = "0" * 64
    rewrite_sealed(run_dir, p.name, json.dumps(v))  # a key holder's edit: the audit is the check under test
    _refused(run_dir, repo, consoles, "contract mismatch", "000000000000")


@pytest.mark.parametrize("make", ["missing", "not_git"])
def test_refuses_a_target_that_is_not_a_git_tree(run_dir, tmp_path, consoles, make):
    target = tmp_path / "plain"
    if make == "not_git":
        target.mkdir()
    code, _, err = _apply(run_dir, target, consoles)
    assert code == 1 and "is not a git work tree" in err


def test_cli_apply_dry_run_smoke(run_dir, repo):
    from typer.testing import CliRunner

    from infrarsi.cli import app

    r = CliRunner().invoke(app, ["apply", "--run-dir", str(run_dir), "--repo", str(repo), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert f"+++ b/{OUT}/sbatch.sh" in r.output and not (repo / "infrarsi-tuned").exists()


def test_refuses_a_knob_value_outside_the_scope(repo, consoles, tmp_path):
    from infrarsi.testing.recorded_run import PROJECT, write_verified_run

    toml = (PROJECT / "contracts/minigpt-cpu.toml").read_text().replace(
        "micro_batch_size = [1, 2, 4, 8, 16]", "micro_batch_size = [1, 2]")
    run_dir = write_verified_run(tmp_path / "p", toml, {"micro_batch_size": 4})  # ran, verified, but not allowed
    _refused(run_dir, repo, consoles, "micro_batch_size=4 is not among the locked values [1, 2]")


def test_dry_run_into_a_plain_folder_shows_the_diff(run_dir, tmp_path, consoles):
    target = tmp_path / "plain"
    target.mkdir()
    code, out, err = _apply(run_dir, target, consoles, dry_run=True)
    assert code == 0, err
    assert "is not a git work tree; a real apply would refuse" in out and f"+++ b/{OUT}/launch.sh" in out
    assert list(target.iterdir()) == []
