"""The datasets cache is written by every ``load_dataset`` (a ``.lock`` beside what it prepares, even from local
files): with ``~/.cache/huggingface/datasets`` present (a run by hand makes it) the box showed it read-only and every
torchtitan trial crashed on the lock. Each trial gets an empty, writable datasets cache of its own; the user's is
left as it was. A temporary HOME, never the real one."""

import json
import sys
import uuid
from pathlib import Path

import pytest

from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec

ROOT = Path(__file__).resolve().parents[2]

JOB = r"""
import json, os, sys
from pathlib import Path
from datasets import load_dataset
ds = load_dataset("json", data_files=sys.argv[1], split="train")
cache = Path(os.environ["HOME"]) / ".cache/huggingface/datasets"
print(json.dumps({"texts": list(ds["text"]), "cache": sorted(p.name for p in cache.iterdir())[:1]}), flush=True)
"""


def _home(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A home folder whose Hugging Face datasets cache holds another run's entry; (home, its datasets cache)."""
    home = tmp_path / "home"
    cache = home / ".cache/huggingface/datasets"
    cache.mkdir(parents=True)
    (cache / "another-runs-entry.lock").write_text("")
    monkeypatch.setenv("HOME", str(home))
    for k in ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return home, cache


def test_load_dataset_in_the_box_writes_a_datasets_cache_of_its_own(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    assert isolation_problem() is None, isolation_problem()
    home, cache = _home(tmp_path, monkeypatch)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(JOB)
    (repo / "data.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
    run = repo / ".infrarsi/run"
    (run / "trials/0").mkdir(parents=True)
    (run / "contract.lock").write_text("{}")
    spec = LaunchSpec(argv=[sys.executable, "train.py", str(repo / "data.jsonl")], cwd=str(repo), time_limit_s=240)
    ex = LocalExecutor()
    handle = ex.submit(spec, run / "trials/0", token=f"datasets-{uuid.uuid4().hex[:8]}")
    end = wait(ex, handle, timeout_s=240)
    assert handle.sandboxed and end.returncode == 0, tail(run / "trials/0/stderr")
    got = json.loads(tail(run / "trials/0/stdout").splitlines()[-1])
    assert got["texts"] == ["hello", "world"]
    assert got["cache"] and got["cache"] != ["another-runs-entry.lock"]  # its own, empty at its start
    assert sorted(p.name for p in cache.iterdir()) == ["another-runs-entry.lock"]  # the user's, as it was


@pytest.mark.slow  # a real torchtitan baseline, ~20-45 s; the box's side: test_load_dataset_in_the_box_writes_...
def test_a_torchtitan_trial_runs_with_a_datasets_cache_in_the_home_folder(tmp_path, monkeypatch):
    from infrarsi.adapters import get_adapter
    from infrarsi.contract.model import load_contract
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    from infrarsi.trial import TrialStatus

    assert isolation_problem() is None, isolation_problem()
    _, cache = _home(tmp_path, monkeypatch)
    monkeypatch.chdir(ROOT)
    contract = load_contract(ROOT / "contracts" / "torchtitan-cpu.toml")
    run = tmp_path / "run"
    run.mkdir()
    (run / "contract.lock").write_text("{}")
    with Runner(RunRecord(run), LocalExecutor(), get_adapter("torchtitan", base_dir=ROOT / "contracts"), contract,
                config=Runner.Config(oversubscribe=True)) as r:
        (t,) = r.run([dict(contract.baseline)])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence[-5:])
    assert sorted(p.name for p in cache.iterdir()) == ["another-runs-entry.lock"]
