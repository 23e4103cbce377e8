"""`infrarsi apply` of a winner whose kernel the run stage generated: written to kernels/<op>/generated/
inside the locked scope, its bytes held to the verdict's sha256, refused when either does not hold."""

import hashlib
import json
import shlex
import subprocess

import pytest

from infrarsi.report.audit import generated_place
from infrarsi.stages import apply as stage
from infrarsi.testing.recorded_run import GENERATED_KERNEL, copy_run
from infrarsi.testing.sealed import rewrite_sealed
from infrarsi.workloads.minigpt import build_parser

OUT = "infrarsi-tuned/minigpt-cpu"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def gen_run(generated_root, tmp_path):
    return copy_run(generated_root, tmp_path / "project")


def _apply(run_dir, repo, consoles):
    con, err, out, errbuf = consoles
    return stage.run(run_dir, repo=repo, dry_run=False, console=con, err=err), out.getvalue(), errbuf.getvalue()


def test_a_generated_winner_is_written_inside_the_scope_and_committed(gen_run, repo, consoles):
    contract = (gen_run.parent / "minigpt-cpu.toml").read_text()
    assert 'kernel_rmsnorm = ["reference"]' in contract  # the contract never listed the generated file
    verdict = json.loads((gen_run / "search.json").read_text())["kernel_verdicts"][GENERATED_KERNEL]
    assert verdict["origin"] == "generated" and verdict["verdict"] == "pass"
    code, out, err = _apply(gen_run, repo, consoles)
    assert code == 0, err
    files = set(git(repo, "show", "--name-only", "--format=", "HEAD").split())
    assert GENERATED_KERNEL in files and f"{OUT}/launch.sh" in files
    src = (gen_run.parent / GENERATED_KERNEL).read_bytes()
    assert (repo / GENERATED_KERNEL).read_bytes() == src
    sha = hashlib.sha256(src).hexdigest()
    assert sha == verdict["sha256"]
    msg = git(repo, "log", "-1", "--format=%B")
    assert f"{GENERATED_KERNEL}  sha256 {sha}" in msg and "inside scope (kernels/**/*.py)" in msg
    line = next(ln for ln in (repo / OUT / "launch.sh").read_text().splitlines() if ln.startswith("exec "))
    assert build_parser().parse_args(shlex.split(line)[4:-1]).kernel == [f"rmsnorm={GENERATED_KERNEL}"]


def _refused(run_dir, repo, consoles, needle):
    code, out, err = _apply(run_dir, repo, consoles)
    assert code == 1 and err.startswith("apply refused:") and needle in err, (out, err)
    assert not (repo / GENERATED_KERNEL).exists() and not (repo / "infrarsi-tuned").exists()


def test_a_generated_winner_edited_after_its_verdict_is_refused(gen_run, repo, consoles):
    k = gen_run.parent / GENERATED_KERNEL
    k.write_text(k.read_text() + "\n# edited after the run\n")
    _refused(gen_run, repo, consoles, f"{GENERATED_KERNEL} changed since it was verified")


def test_a_generated_candidate_that_did_not_pass_is_not_a_locked_value(gen_run, repo, consoles):
    p = gen_run / "search.json"
    s = json.loads(p.read_text())
    s["kernel_verdicts"][GENERATED_KERNEL]["verdict"] = "fail"
    rewrite_sealed(gen_run, p.name, json.dumps(s))  # a key holder's edit: the audit is the check under test
    _refused(gen_run, repo, consoles, f"knob kernel_rmsnorm='{GENERATED_KERNEL}' is not among the locked values")


def test_a_generated_verdict_outside_the_generated_folder_is_not_a_locked_value(gen_run, repo, consoles):
    """origin "generated" is only taken for a file in kernels/<op>/generated/: a verdict that says so of any
    other file (here the training script's folder) does not widen the locked values."""
    elsewhere = "kernels/rmsnorm/triton_gen.py"
    (gen_run.parent / elsewhere).write_bytes((gen_run.parent / GENERATED_KERNEL).read_bytes())
    records = ["search.json", "verification.json", *(t.relative_to(gen_run).as_posix()
                                                      for t in gen_run.glob("trials/*/trial.json"))]
    for name in records:  # every record, as if the run had named it so (a key holder's edit)
        text = (gen_run / name).read_text()
        if GENERATED_KERNEL in text:
            rewrite_sealed(gen_run, name, text.replace(GENERATED_KERNEL, elsewhere))
    _refused(gen_run, repo, consoles, f"knob kernel_rmsnorm='{elsewhere}' is not among the locked values ['reference']")


@pytest.mark.parametrize("path, place", [
    ("kernels/rmsnorm/generated/x.py", "kernels/rmsnorm/generated/x.py"),
    ("/home/u/repo/kernels/rmsnorm/generated/x.py", "kernels/rmsnorm/generated/x.py"),  # a run named it absolute
    ("kernels/swiglu/generated/x.py", None),  # another op's folder
    ("src/kernels/rmsnorm/generated/x.py", None),  # relative, but not the repository's folder
    ("kernels/rmsnorm/generated/../../../train.py", None),
    ("kernels/rmsnorm/generated/x.sh", None),
])
def test_where_a_generated_candidate_belongs(path, place):
    assert generated_place(path, "rmsnorm") == place
