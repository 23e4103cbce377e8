"""Honest jobs run in the box (false positives are defects too): one honest trial whose repository sits under the
home folder reads a tokenizer from the Hugging Face cache offline, writes the inductor and Triton cache folders its
launch names under the home folder, loads data with DataLoader workers, saves a checkpoint and draws a tqdm bar,
while the home folder's secrets stay out of reach; a launch script's ``$HOME`` is the user's; the contract's
``workload.env`` reaches every adapter's trials."""

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import LaunchSpec
from tests.execute.toy import ToyAdapter, toy_contract

JOB = r"""
import json, os, sys
from pathlib import Path
from tqdm import tqdm
from huggingface_hub import hf_hub_download
from tokenizers import Tokenizer
out = {}
home = Path(os.environ["HOME"])
out["tokens"] = Tokenizer.from_file(hf_hub_download("acme/tok", "tokenizer.json")).encode("hello world").ids
for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
    d = Path(os.environ[k])
    out[k] = sorted(p.name for p in d.iterdir())  # empty: another trial's entries are not there
    (d / "entry").write_text("compiled")
out["data"] = Path(sys.argv[1]).read_text()
out["bar"] = sum(1 for _ in tqdm(range(4), file=sys.stderr))
if "--torch" in sys.argv:  # DataLoader workers (shared memory in /dev/shm) and a checkpoint in outputs/
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.arange(16.0)), batch_size=4, num_workers=2)
    out["batches"] = sum(1 for _ in loader)
    ckpt = Path(os.environ["INFRARSI_TRIAL_DIR"]) / "outputs" / "ckpt.pt"
    torch.save({"w": torch.ones(2)}, ckpt)
    out["ckpt"] = torch.load(ckpt)["w"].tolist()
for name in (".netrc", ".ssh/id_rsa", ".cache/huggingface/token"):
    try:
        out[name] = (home / name).read_text()
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out), flush=True)
"""


def _honest(tmp_path, monkeypatch, *extra: str) -> tuple[dict, Path, Path]:
    """Runs JOB in the box from a repository under a home folder; (its JSON line, the trial, the home)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("tqdm")
    from tokenizers import Tokenizer, models, pre_tokenizers

    assert isolation_problem() is None, isolation_problem()
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snap = home / ".cache/huggingface/hub/models--acme--tok/snapshots/0123abcd"
    snap.mkdir(parents=True)
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs/main").write_text("0123abcd")
    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(snap / "tokenizer.json"))
    (home / ".cache/huggingface/token").write_text("hf_the_users_token")
    (home / ".netrc").write_text("machine example.com password secret")
    (home / ".ssh").mkdir()
    (home / ".ssh/id_rsa").write_text("PRIVATE KEY")
    inductor, triton = home / ".cache/inductor", home / ".triton/cache"
    for d in (inductor, triton):
        d.mkdir(parents=True)
        (d / "another-trials-entry").write_text("x")
    (home / "data").mkdir()
    (home / "data/corpus.txt").write_text("the user's data")
    repo = home / "src/job"  # the repository under the home folder
    repo.mkdir(parents=True)
    (repo / "train.py").write_text(JOB)
    run = repo / ".infrarsi/run"
    run.mkdir(parents=True)
    (run / "contract.lock").write_text("{}")
    trial = run / "trials/0"
    spec = LaunchSpec(argv=[sys.executable, "train.py", str(home / "data/corpus.txt"), *extra], cwd=str(repo),
                      env={"TORCHINDUCTOR_CACHE_DIR": str(inductor), "TRITON_CACHE_DIR": str(triton)},
                      time_limit_s=240)
    ex = LocalExecutor()
    handle = ex.submit(spec, trial, token=f"honest-{uuid.uuid4().hex[:8]}")
    end = wait(ex, handle, timeout_s=240)
    assert handle.sandboxed and end.returncode == 0, tail(trial / "stderr")
    return json.loads(tail(trial / "stdout").splitlines()[-1]), trial, home


def test_an_honest_job_with_its_home_caches_runs_in_the_box(tmp_path, monkeypatch):
    got, trial, home = _honest(tmp_path, monkeypatch)
    inductor = home / ".cache/inductor"
    assert got["tokens"] == [0, 1] and got["bar"] == 4 and "100%" in tail(trial / "stderr")
    assert got["TORCHINDUCTOR_CACHE_DIR"] == got["TRITON_CACHE_DIR"] == []
    assert got["data"] == "the user's data"
    assert all(got[k] in ("No such file or directory", "Permission denied")
               for k in (".netrc", ".ssh/id_rsa", ".cache/huggingface/token")), got
    assert sorted(p.name for p in inductor.iterdir()) == ["another-trials-entry"]  # nothing reached the user's


@pytest.mark.slow  # torch's start-up (seconds); the box's side: test_an_honest_job_with_its_home_caches_runs_in_the_box
def test_an_honest_torch_job_with_dataloader_workers_and_a_checkpoint_runs_in_the_box(tmp_path, monkeypatch):
    got, trial, _ = _honest(tmp_path, monkeypatch, "--torch")
    assert got["tokens"] == [0, 1] and got["batches"] == 4 and got["ckpt"] == [1.0, 1.0]
    assert (trial / "outputs/ckpt.pt").is_file()


def test_a_launch_script_reads_home_from_the_users_environment(tmp_path, monkeypatch):
    """``$HOME/data/...`` in a launch script is the user's home, as their shell would read it (it was "")."""
    from infrarsi.adapters.megatron.adapter import parse_megatron

    monkeypatch.setenv("HOME", "/home/alice")
    monkeypatch.setenv("MY_DATA", "/data/corpus")
    monkeypatch.setenv("DB_PASSWORD", "hunter2")
    script = ("#!/bin/bash\nDATA=$HOME/data/my_text_document\n"
              "torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
              "--seq-length 128 --global-batch-size 8 --data-path $DATA --tokenizer-model $MY_DATA/tok.model "
              "--wandb-project x$DB_PASSWORD\n")
    p = parse_megatron(script, path=str(tmp_path / "launch.sh"))
    args = p.launch.args
    assert args[args.index("--data-path") + 1] == "/home/alice/data/my_text_document"
    assert args[args.index("--tokenizer-model") + 1] == "/data/corpus/tok.model"
    assert args[args.index("--wandb-project") + 1] == "x"  # a secret-named variable is not read


def test_workload_env_reaches_the_trials_of_every_adapter(tmp_path):
    """The runner sets the contract's workload.env on every trial (an adapter whose launch drops it, as
    Megatron's did, included): the toy adapter sets no environment at all."""
    c = toy_contract()
    c = c.model_copy(update={"workload": c.workload.model_copy(update={"env": {"HONEST_FLAG": "from-contract"}})})
    rec = RunRecord(tmp_path / "run")
    with Runner(rec, LocalExecutor(), ToyAdapter(), c) as r:
        t = r.run([{"mode": "ok"}])[0]
    env = json.loads((Path(t.path) / "env.json").read_text())
    assert env.get("HONEST_FLAG") == "from-contract", env
