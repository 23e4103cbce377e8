"""apply in the user's own repository, with the run directory inside it (the default .infrarsi/run): the run's
records never count as the user's change."""

import json
import subprocess
import sys
from pathlib import Path

from infrarsi.testing.recorded_run import copy_run

ROOT = Path(__file__).resolve().parents[2]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "infrarsi.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def _user_repo(recorded_root, tmp_path):
    """The user's repository: their contract and kernels committed, the run directory at .infrarsi/run."""
    repo = tmp_path / "user-repo"
    run_dir = copy_run(recorded_root, repo)
    (repo / ".infrarsi").mkdir()
    run_dir = run_dir.rename(repo / ".infrarsi" / "run")
    git(repo, "init", "-q")
    for k, v in (("user.name", "Test User"), ("user.email", "test@example.com"), ("commit.gpgsign", "false")):
        git(repo, "config", k, v)
    git(repo, "add", "--", *[p.name for p in repo.iterdir() if p.name not in (".git", ".infrarsi")])
    git(repo, "commit", "-q", "-m", "the user's training code")
    return repo, run_dir


def test_apply_commits_into_the_repository_that_holds_the_run_directory(recorded_root, tmp_path):
    repo, run_dir = _user_repo(recorded_root, tmp_path)
    assert git(repo, "status", "--porcelain")  # the run's records are untracked files in the tree
    r = cli("apply", "--run-dir", ".infrarsi/run", "--repo", ".", "--json", cwd=repo)
    assert r.returncode == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["applied"] is True and body["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert body["files"] and all(not f.startswith(".infrarsi") for f in body["files"])
    assert body["candidate"]["speedup"] > 1 and body["refused"] is None
    assert "/.infrarsi/run/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert git(repo, "status", "--porcelain") == ""  # the run directory is not a change; the commit holds the rest
    assert ".infrarsi" not in git(repo, "show", "--name-only", "--format=", "HEAD")


def test_a_change_of_the_users_own_still_refuses_and_says_so(recorded_root, tmp_path):
    repo, _ = _user_repo(recorded_root, tmp_path)
    (repo / "notes.txt").write_text("mine\n")
    r = cli("apply", "--run-dir", ".infrarsi/run", "--repo", ".", cwd=repo)
    assert r.returncode == 1
    assert "dirty: 1 change(s) of your own" in r.stderr and "notes.txt" in r.stderr, r.stderr
    refusal = next(ln for ln in r.stderr.splitlines() if ln.startswith("apply refused:"))
    assert ".infrarsi" not in refusal  # the run directory is never named as the user's change
