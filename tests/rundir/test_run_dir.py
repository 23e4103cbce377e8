"""One owner of the run directory: no module outside infrarsi/rundir names a run file, the records are typed, and
apply tells a kernel file by the plan's typed kind (not by the words of its audit line)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from infrarsi.testing.recorded_run import cached_recorded_run, copy_run

PACKAGE = Path(__file__).resolve().parents[2] / "infrarsi"
# Every record of a run directory (rundir/names.py): no other module's code may name one (prose in docstrings may).
RECORDS = ("contract.lock", "seals.jsonl", "runner.lock", "noise.json", "search.json", "verification.json",
           "verification.progress.json", "stages.json", "proposals.pending.json", "verdicts.json", "trial.json",
           "launch.json", "clock.json", "proposal.json", "env.json", "job.sbatch", "report.md", "report.html", "report_files")


@pytest.fixture
def run_dir(tmp_path_factory, tmp_path):
    return copy_run(cached_recorded_run(tmp_path_factory.getbasetemp()), tmp_path / "project")


def test_no_module_outside_the_run_directory_names_a_run_file():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "rundir":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}" for name in RECORDS
                          if name in node.value]
    assert not found, "\n".join(found)


def test_the_records_are_typed(run_dir):
    from infrarsi.report import load_run
    from infrarsi.rundir import RunDir, SearchRecord, Stages, Verification

    data = load_run(run_dir)
    assert isinstance(data.verification, Verification) and isinstance(data.search, SearchRecord)
    best = max(data.verification.promoted(), key=lambda c: c.speedup)
    assert best.ci95[0] > 1 + data.verification.mde and all(len(p) == 2 for p in best.trials)
    assert all(v.verdict == "pass" and v.sha256 for v in data.search.kernel_verdicts.values())
    run = RunDir(run_dir)
    assert run.lock().sha256 == data.contract_sha256 and run.lock().locked_at == data.locked_at
    assert run.stages() == Stages() and run.progress().pairs == {}  # not written yet: empty, never a guess
    assert run.trial(0).id == 0 and run.launch(0) is None  # the recorded trials were never launched


def test_a_record_that_does_not_read_is_named_and_left_as_it_is(run_dir):
    from infrarsi.errors import RecordError
    from infrarsi.rundir import RunDir

    run = RunDir(run_dir)
    p = run.file(run.VERIFICATION)
    cut = p.read_bytes()[:50]
    p.write_bytes(cut)
    with pytest.raises(RecordError, match=run.VERIFICATION):
        run.verification()
    assert p.read_bytes() == cut


def test_apply_tells_a_kernel_file_by_its_kind_not_by_its_audit_line(run_dir, tmp_path):
    from infrarsi.apply import make_plan, problems
    from infrarsi.report import load_run
    from infrarsi.testing.recorded_run import KERNEL

    repo = tmp_path / "plain"
    repo.mkdir()
    plan = make_plan(load_run(run_dir), repo=repo)
    kernel = next(f for f in plan.files if f.path == KERNEL)
    assert kernel.kind == "kernel" and {f.kind for f in plan.files} == {"kernel", "launch", "profile", "audit"}
    reworded = dataclasses.replace(plan, files=[dataclasses.replace(f, why="a verified candidate") for f in plan.files])
    assert problems(reworded, repo, ["kernels/swiglu/*.py"], git=False) == [
        f"{KERNEL} is outside the locked scope ['kernels/swiglu/*.py']"]


def test_the_search_records_priors_are_typed_and_an_older_search_record_reads(run_dir):
    import json

    from infrarsi.rundir import RunDir, SearchRecord
    from infrarsi.trial import Prior

    run = RunDir(run_dir)
    path = run.file(run.SEARCH)
    before = path.read_bytes()
    rec = run.search()
    assert rec.priors and all(isinstance(p, Prior) for p in rec.priors)
    run.write_search(rec)
    assert path.read_bytes() == before  # typed in code, the same bytes on disk
    # a search record as the run stage wrote it before its priors were typed: each prior as its dumped mapping
    older = json.loads(before)
    older["priors"] = [{"knob": "micro_batch_size", "value": 4, "time_mean": -0.1, "time_sd": 0.3, "mem_mean": 0.2,
                        "mem_sd": 0.4, "source": "llm", "rationale": "fewer steps"}]
    assert SearchRecord.model_validate(older).priors == [
        Prior(knob="micro_batch_size", value=4, time_mean=-0.1, time_sd=0.3, mem_mean=0.2, mem_sd=0.4, source="llm",
              rationale="fewer steps")]
