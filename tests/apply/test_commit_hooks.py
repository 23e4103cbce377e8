"""What `infrarsi apply` commits as a person's `git commit` would: the repository's hooks run (a failing one stops
the commit with its output; --no-verify skips them), the message names no path of this machine, a second apply says
which tuned launch it replaces, and sbatch.sh asks for the contract's resources."""

import json
import subprocess

from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import write_verified_run

from .test_atomic import snapshot

OUT = "infrarsi-tuned"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _apply(run_dir, repo, consoles, **kw):
    con, err, out, errbuf = consoles
    out.truncate(0), errbuf.truncate(0)
    return stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err, **kw), out.getvalue(), errbuf.getvalue()


def _hook(repo, name, body):
    h = repo / ".git" / "hooks" / name
    h.write_text(f"#!/bin/sh\n{body}\n")
    h.chmod(0o755)


def _entry(devices: int = 8) -> str:
    """A Megatron command in the contract (no launch file): apply writes launch.sh and sbatch.sh."""
    return ('name = "entry"\n[workload]\nadapter = "megatron"\nentrypoint = "python pretrain_gpt.py"\n'
            '[workload.args]\nnum_layers = 32\nhidden_size = 4096\nnum_attention_heads = 32\nseq_length = 4096\n'
            'global_batch_size = 64\nmicro_batch_size = 1\n'
            f'[hardware]\nkind = "H100-80GB"\ndevices = {devices}\nmemory_capacity_gib = 80\n'
            '[invariants.timing]\ntimeout_s = 60\n[scope.knobs]\ntensor_parallel = [1, 2, 4]\n')


def test_a_failing_hook_stops_the_commit_with_its_output_and_no_verify_skips_it(run_dir, repo, consoles):
    _hook(repo, "pre-commit", "echo 'lint: tabs in infrarsi-tuned/minigpt-cpu/launch.sh' >&2; exit 1")
    before = snapshot(repo)
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 1, err
    assert "pre-commit hook refused the commit (exit 1): lint: tabs in infrarsi-tuned/minigpt-cpu/launch.sh" in err
    assert "--no-verify" in err and snapshot(repo) == before  # nothing kept
    code, out, err = _apply(run_dir, repo, consoles, hooks=False)
    assert code == 0, err
    assert "--no-verify: the repository's hooks were not run" in " ".join(out.split())


def test_the_hooks_run_as_git_commit_runs_them(run_dir, repo, consoles):
    """pre-commit passes, commit-msg adds a trailer (kept in the commit), post-commit runs after it."""
    ran = repo.parent / "ran"
    _hook(repo, "pre-commit", f"echo pre-commit >> {ran}")
    _hook(repo, "commit-msg", f'echo commit-msg >> {ran}; printf "\\nChange-Id: I0123\\n" >> "$1"')
    _hook(repo, "post-commit", f"echo post-commit >> {ran}; git log -1 --format=%s >> {ran}")
    code, out, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    said = ran.read_text().splitlines()
    assert said[:3] == ["pre-commit", "commit-msg", "post-commit"] and said[3].startswith("infrarsi: tuned launch")
    assert git(repo, "log", "-1", "--format=%B").rstrip().endswith("Change-Id: I0123")
    assert "the repository's hooks ran: pre-commit, commit-msg, post-commit" in " ".join(out.split())


def test_the_commit_names_no_path_of_this_machine(run_dir, repo, consoles, tmp_path):
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    committed = [git(repo, "log", "-1", "--format=%B")]
    committed += [git(repo, "show", f"HEAD:{p}") for p in git(repo, "show", "--name-only", "--format=", "HEAD").split()
                  if p.endswith(".json")]
    for text in committed:
        assert str(tmp_path) not in text and "/tmp/" not in text, text
    assert "Run directory: run (outside the repository)" in committed[0]


def test_a_second_apply_says_which_tuned_launch_it_replaces(repo, consoles, tmp_path):
    first = write_verified_run(tmp_path / "one", _entry(), {"tensor_parallel": 2}, speedup=1.3)
    second = write_verified_run(tmp_path / "two", _entry(), {"tensor_parallel": 4}, speedup=1.4, seed=1)
    code, out, err = _apply(first, repo, consoles)
    assert code == 0 and "replaces" not in out, (out, err)
    con, errc, buf, errbuf = consoles
    assert stage.run(second, repo=repo, dry_run=True, console=con, err=errc) == 0
    assert f"this replaces the tuned launch committed earlier in {OUT}/entry (tensor_parallel=2; 1.3" in " ".join(
        buf.getvalue().split())
    code, out, err = _apply(second, repo, consoles)
    assert code == 0, err
    assert "this replaces the tuned launch committed earlier" in " ".join(out.split())
    msg = git(repo, "log", "-1", "--format=%B")
    assert f"Replaces: the tuned launch committed earlier in {OUT}/entry (tensor_parallel=2;" in msg
    assert json.loads((repo / OUT / "entry" / "audit.json").read_text())["changes"] == {"tensor_parallel": 4}


def test_sbatch_asks_for_the_contracts_devices_and_no_trial_timeout(repo, consoles, tmp_path):
    """An 8 x H100 contract: --gpus-per-node=8 (was the launch's process count, 1) and no --time of the trial's
    60 s timeout (was --time=1): the job runs under the partition's limit, and a comment says how to set one."""
    run_dir = write_verified_run(tmp_path / "p", _entry(8), {"tensor_parallel": 2})
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    sbatch = (repo / OUT / "entry" / "sbatch.sh").read_text()
    assert "#SBATCH --nodes=1" in sbatch and "#SBATCH --gpus-per-node=8" in sbatch, sbatch
    assert not [ln for ln in sbatch.splitlines() if ln.startswith("#SBATCH --time")], sbatch
    assert "the contract's 8 x H100-80GB on 1 node(s)" in sbatch
