"""A trial sees its Python sources read-only, so Python in it cannot write the bytecode it lacks: without the
harness, a package without ``__pycache__`` is compiled anew by every process of every trial (the whole of a
``uv``-installed environment: 32 s instead of 6-13 s for torchtitan's imports here, docs/isolation.md). The
executor compiles it once, before the first isolated trial, outside the box (execute/bytecode.py); the trial reads
it and cannot write it."""

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from infrarsi.execute import bytecode
from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec

# The trial: imports the package verbosely (-v says where each module's code came from), then tries to leave a
# file in its __pycache__ for the next trial.
JOB = r"""
import importlib, sys
import pkgx.mod
cache = pkgx.mod.__cached__
print("CACHED", cache, flush=True)
try:
    open(cache + ".left", "w").write("x")
    print("WROTE", flush=True)
except OSError as e:
    print("REFUSED", e.errno, flush=True)
"""


def _package(root: Path) -> Path:
    """A package outside the repository, named by PYTHONPATH, without bytecode: ``root/lib``."""
    lib = root / "lib"
    (lib / "pkgx").mkdir(parents=True)
    (lib / "pkgx" / "__init__.py").write_text("")
    (lib / "pkgx" / "mod.py").write_text("VALUE = sum(range(10))\n" * 50)
    return lib


def _trial(tmp_path: Path, monkeypatch, executor: LocalExecutor) -> tuple[str, str, Path]:
    """One isolated trial of JOB; (stdout, stderr, the package's folder)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # nothing but the harness writes bytecode here
    lib = _package(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "job.py").write_text(JOB)
    run = repo / ".infrarsi/run"
    (run / "trials/0").mkdir(parents=True)
    (run / "contract.lock").write_text("{}")
    spec = LaunchSpec(argv=[sys.executable, "-v", "job.py"], cwd=str(repo), env={"PYTHONPATH": str(lib)},
                      time_limit_s=120)
    handle = executor.submit(spec, run / "trials/0", token=f"bytecode-{uuid.uuid4().hex[:8]}")
    end = wait(executor, handle, timeout_s=120)
    out, err = tail(run / "trials/0/stdout"), tail(run / "trials/0/stderr", max_bytes=1 << 22)
    assert handle.sandboxed and end.returncode == 0, err[-2000:]
    return out, err, lib / "pkgx"


def test_an_isolated_trial_imports_the_bytecode_the_harness_compiled_and_cannot_write_there(tmp_path, monkeypatch):
    assert isolation_problem() is None, isolation_problem()
    out, err, pkg = _trial(tmp_path, monkeypatch, LocalExecutor())
    cached = str(pkg / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc")
    assert f"code object from '{cached}'" in err  # read from the harness's bytecode
    assert f"code object from {pkg / 'mod.py'}\n" not in err  # not compiled from source
    assert "REFUSED 30" in out  # read-only to the trial (EROFS): nothing left for the next trial
    assert not Path(cached + ".left").exists()


def test_without_the_harness_each_trial_compiles_a_package_without_bytecode(tmp_path, monkeypatch):
    """The control: with precompile off the trial compiles the module from source (what every trial did)."""
    assert isolation_problem() is None, isolation_problem()
    out, err, pkg = _trial(tmp_path, monkeypatch, LocalExecutor(LocalExecutor.Config(precompile=False)))
    assert f"code object from {pkg / 'mod.py'}\n" in err
    assert not (pkg / "__pycache__").exists()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_in_a_git_work_tree_bytecode_is_written_only_where_git_ignores_it(tmp_path):
    """``git status`` (what ``apply`` calls clean) is left as it was: no bytecode in a tree that would list it."""
    for name, ignore in (("ignores", "__pycache__/\n"), ("lists", "")):
        repo = tmp_path / name
        (repo / "src").mkdir(parents=True)
        (repo / "src" / "m.py").write_text("X = 1\n")
        (repo / ".gitignore").write_text(ignore)
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
        done = bytecode.precompile([repo])
        assert _git(repo, "status", "--porcelain", "--untracked-files=all") == ""
        assert bytecode.fresh(repo / "src" / "m.py") is (name == "ignores"), done.line()
        assert (done.written, done.skipped) == ((1, 0) if name == "ignores" else (0, 1))


def test_stale_bytecode_is_compiled_again(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("X = 1\n")
    assert not bytecode.fresh(src)
    assert bytecode.precompile([tmp_path]).written == 1 and bytecode.fresh(src)
    assert bytecode.precompile([tmp_path]).written == 0  # up to date: left as it is
    src.write_text("X = 22\n")  # another size: the bytecode no longer matches it
    assert not bytecode.fresh(src)
    assert bytecode.precompile([tmp_path]).written == 1 and bytecode.fresh(src)


@pytest.mark.slow
def test_the_benchmark_prints_start_up_with_the_bytecode_off_and_on(tmp_path):
    """scripts/bench_prune.py startup (docs/isolation.md's figures), one pair of real minigpt-cpu trials. Slow: two
    real trials; the default tests above keep the executor's bytecode covered."""
    from tests.execute.bench_run import bench_prune_on_minigpt

    out = bench_prune_on_minigpt(tmp_path, "startup", "--repeats", "1", "--timeline")
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("   0 ")]
    assert [(x[1], x[2]) for x in rows] == [("off", "ok"), ("on", "ok")], out[-3000:]
    assert "median first step line: off" in out


def test_nothing_in_a_run_directory_is_compiled(tmp_path):
    """A trial's outputs sit in its run directory: the harness never reads them, whether the walk meets the run
    directory or starts inside it."""
    run = tmp_path / "run"
    (run / "trials/0/outputs").mkdir(parents=True)
    (run / "contract.lock").write_text("{}")
    left = run / "trials/0/outputs/left.py"
    left.write_text("X = 1\n")
    assert bytecode.precompile([tmp_path]).sources == 0
    assert bytecode.precompile([run / "trials/0/outputs"]).sources == 0
    assert not bytecode.fresh(left)


def test_a_project_that_is_not_a_git_work_tree_is_left_as_the_user_left_it(tmp_path):
    """The user's own folders (repository, working directory) get bytecode only where their git ignores it: a
    plain folder of scripts gains no ``__pycache__`` (an environment's package beside it still does)."""
    project, lib = tmp_path / "project", tmp_path / "lib"
    for d in (project, lib):
        d.mkdir()
        (d / "m.py").write_text("X = 1\n")
    done = bytecode.precompile([project, lib], own=[project])
    assert sorted(p.name for p in project.iterdir()) == ["m.py"], done.line()
    assert bytecode.fresh(lib / "m.py") and (done.written, done.skipped) == (1, 1)
