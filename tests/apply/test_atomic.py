"""`infrarsi apply` checks everything, then writes atomically, and its commit is its audit: on every failure path a
test can provoke (a stale index.lock, a hard link, a git-ignored destination, a lock that appears while it writes)
the user's repository is exactly as it was; a hook or a clean filter cannot make the commit differ from the audit."""

import hashlib
import json
import os
import stat
import subprocess

from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import KERNEL

OUT = "infrarsi-tuned/minigpt-cpu"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _apply(run_dir, repo, consoles, hooks=True):
    con, err, out, errbuf = consoles
    return (stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err, hooks=hooks), out.getvalue(),
            errbuf.getvalue())


def snapshot(repo):
    """Everything of the repository a user could tell apart: refs and reflog, the index's bytes, the status, and
    every file of the work tree with its bytes, mode and inode (a file replaced is not the file it was)."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        if ".git" in dirnames and os.path.samefile(dirpath, repo):
            dirnames.remove(".git")
        for name in [*filenames, *dirnames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            files[os.path.relpath(p, repo)] = (st.st_mode, st.st_ino, st.st_nlink,
                                               open(p, "rb").read() if stat.S_ISREG(st.st_mode) else None)
    return {"refs": git(repo, "for-each-ref"), "head": git(repo, "rev-parse", "HEAD"), "reflog": git(repo, "reflog"),
            "index": (repo / ".git" / "index").read_bytes(), "status": git(repo, "status", "--porcelain", "--ignored"),
            "files": files}


def test_a_stale_index_lock_is_refused_before_anything_is_written(run_dir, repo, consoles):
    lock = repo / ".git" / "index.lock"
    lock.write_text("")  # a git killed in the middle of an add
    before = snapshot(repo)
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 1 and "index.lock exists" in err and "nothing was written" in err, err
    assert snapshot(repo) == before and lock.exists()


def test_a_hard_link_is_refused_and_the_other_name_is_untouched(run_dir, repo, consoles, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text("precious, not the repository's\n")
    (repo / "kernels/rmsnorm").mkdir(parents=True)
    os.link(outside, repo / KERNEL)  # the tracked kernel file is a second name of a file outside the repository
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a hard-linked kernel")
    before = snapshot(repo)
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 1 and "unsafe destination" in err and f"{KERNEL} is a hard link" in err, err
    assert outside.read_text() == "precious, not the repository's\n"
    assert snapshot(repo) == before


def test_a_git_ignored_destination_is_refused_and_left_as_it_was(run_dir, repo, consoles):
    (repo / ".gitignore").write_text("infrarsi-tuned/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore the tuned folder")
    mine = repo / OUT / "launch.sh"
    mine.parent.mkdir(parents=True)
    mine.write_text("#!/bin/bash\n# the user's own, ignored by git\n")
    before = snapshot(repo)
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 1 and f"{OUT}/launch.sh is ignored by git here" in err and "nothing was written" in err, err
    assert mine.read_text() == "#!/bin/bash\n# the user's own, ignored by git\n"
    assert snapshot(repo) == before and not (repo / KERNEL).exists()


def test_a_failure_after_the_files_are_written_puts_everything_back(run_dir, repo, consoles, monkeypatch):
    """Another git process takes the index between the checks and the commit: the files apply wrote, the folders it
    made and the index are put back, and HEAD never moved."""
    from infrarsi.apply import transaction as tx

    (repo / "kernels/rmsnorm").mkdir(parents=True)
    (repo / KERNEL).write_text("# the user's version\n")  # an existing file apply replaces: it must come back
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a kernel of the user's")
    before = snapshot(repo)
    real = tx.stage_index
    seen = {}

    def racing(root, files, blobs):
        seen["written"] = (repo / OUT / "launch.sh").is_file() and (repo / KERNEL).read_text() != "# the user's version\n"
        (repo / ".git" / "index.lock").write_text("")
        return real(root, files, blobs)

    monkeypatch.setattr(tx, "stage_index", racing)
    code, _, err = _apply(run_dir, repo, consoles)
    assert seen["written"]  # the failure came after the files were written
    assert code == 1 and "index.lock" in err and "left as it was" in err, err
    (repo / ".git" / "index.lock").unlink()
    assert snapshot(repo) == before


def test_the_commit_holds_exactly_what_the_audit_certifies_whatever_the_hooks_and_filters(run_dir, repo, consoles):
    """A pre-commit hook that edits an audited file, a post-commit hook, a reference-transaction hook and a clean
    filter that rewrites every .sh file: the hooks run, and the one that edits refuses the commit with the repository
    as it was; with --no-verify no hook of the user's runs and the commit holds the audited bytes."""
    hooks = repo / ".git" / "hooks"
    ran = repo.parent / "hooks-ran"
    for name, body in (("pre-commit", f"echo '# hook' >> {OUT}/launch.sh; git add {OUT}/launch.sh"),
                       ("post-commit", ""), ("reference-transaction", "")):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {ran}\n{body}\n")
        (hooks / name).chmod(0o755)
    (repo / ".gitattributes").write_text("*.sh filter=shout\n")
    git(repo, "config", "filter.shout.clean", "sed s/exec/EXEC/")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "a filter", "--no-verify")
    ran.unlink(missing_ok=True)
    before = snapshot(repo)
    code, out, err = _apply(run_dir, repo, consoles)
    assert code == 1 and "the repository's pre-commit hook rewrote infrarsi-tuned/" in err, err
    assert "--no-verify" in err and ran.read_text() == "pre-commit\n"
    assert snapshot(repo) == before
    ran.unlink()
    code, out, err = _apply(run_dir, repo, consoles, hooks=False)
    assert code == 0, err
    audit = json.loads(git(repo, "show", f"HEAD:{OUT}/audit.json"))
    for f in audit["files"]:
        blob = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"HEAD:{f['path']}"], check=True,
                              capture_output=True).stdout
        assert hashlib.sha256(blob).hexdigest() == f["sha256"], f["path"]
        assert (repo / f["path"]).read_bytes() == blob  # the work tree holds what was committed
    assert set(git(repo, "show", "--name-only", "--format=", "HEAD").split()) == {f["path"] for f in audit["files"]} | {
        f"{OUT}/audit.json"}
    assert not ran.exists(), ran.read_text()  # no hook of the user's ran
    assert "--no-verify: the repository's hooks were not run" in out


def test_an_empty_repository_gets_its_first_commit(run_dir, tmp_path, consoles):
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    code, _, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    assert git(repo, "rev-list", "--count", "HEAD").strip() == "1" and git(repo, "status", "--porcelain") == ""
    assert KERNEL in git(repo, "ls-files").split()


def test_a_kernel_file_swapped_between_the_audit_and_the_commit_cannot_change_what_is_committed(run_dir, repo, consoles,
                                                                                                monkeypatch):
    """The audit hashes the kernel file; the file is then swapped for other bytes (at the moment the audit's checks
    returned, and again after the plan is made): the commit holds the bytes the audit hashed and the verifier
    passed, never the swapped ones."""
    from infrarsi.apply import writer

    source = run_dir.parent / KERNEL
    verified = source.read_bytes()
    swapped = verified + b"\ndef forward(*a):  # swapped in after the audit\n    return a[0]\n"
    real_problems, real_plan = writer.candidate_problems, writer.make_plan

    def problems_then_swap(*a, **k):
        out = real_problems(*a, **k)
        source.write_bytes(swapped)  # between the audit's hash and any later read
        return out

    def plan_then_swap(*a, **k):
        plan = real_plan(*a, **k)
        source.write_bytes(swapped + b"# and again\n")  # between the plan and the commit
        return plan

    monkeypatch.setattr(writer, "candidate_problems", problems_then_swap)
    monkeypatch.setattr("infrarsi.apply.make_plan", plan_then_swap)
    code, out, err = _apply(run_dir, repo, consoles)
    assert code == 0, err
    blob = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", f"HEAD:{KERNEL}"], check=True,
                          capture_output=True).stdout
    assert blob == verified and (repo / KERNEL).read_bytes() == verified
    assert source.read_bytes() != verified  # the swap did happen
    audit = json.loads(git(repo, "show", f"HEAD:{OUT}/audit.json"))
    assert {f["path"]: f["sha256"] for f in audit["files"]}[KERNEL] == hashlib.sha256(verified).hexdigest()
