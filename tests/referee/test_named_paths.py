"""Issue 66 class 4: the home folder reached through named paths. A trial is shown what its launch names -- a
Hugging Face home, a PYTHONPATH entry, a cache folder -- but never a folder that holds the user's keys with it: the
home root, ``.ssh``, ``.aws``, ``.netrc``, a Hugging Face home's ``token``/``stored_tokens``. ``..`` is folded
before deciding (``repo/../..`` is the home folder), and what holds keys inside a shown folder is covered; the named
thing itself still reads (an honest job's hub cache, its own cache folder)."""

import json
import sys
import uuid
from pathlib import Path

import pytest

from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec

PROBE = r"""
import json, os, sys
from pathlib import Path
home = Path(sys.argv[1])
out = {}
for name in (".netrc", ".ssh/id_rsa", ".aws/credentials", ".cache/huggingface/token",
             ".cache/huggingface/stored_tokens", ".cache/huggingface/hub/models--acme--tok/refs/main",
             ".cache/pip-log.txt"):
    try:
        out[name] = (home / name).read_text()
    except OSError as e:
        out[name] = e.strerror
print(json.dumps(out), flush=True)
"""
SECRETS = {".netrc": "machine example.com password secret", ".ssh/id_rsa": "PRIVATE KEY",
           ".aws/credentials": "aws_secret_access_key = x", ".cache/huggingface/token": "hf_the_users_token",
           ".cache/huggingface/stored_tokens": "[work]\nhf_token = hf_another"}


def _home(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    for rel, text in {**SECRETS, ".cache/huggingface/hub/models--acme--tok/refs/main": "0123abcd",
                      ".cache/pip-log.txt": "the cache folder's own file"}.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    repo = home / "src" / "job"  # the repository under the home folder, as teams keep it
    (repo / ".infrarsi" / "run").mkdir(parents=True)
    (repo / ".infrarsi" / "run" / "contract.lock").write_text("{}")
    (repo / "probe.py").write_text(PROBE)
    return home, repo


# Each names the home folder's keys another way: (launch env, extra argv, runner's env)
CASES = {
    "HF_HOME named again with ..": ({"HF_HOME": "{home}/.cache/huggingface", "HF_HUB_OFFLINE": "1"},
                                    ["--hf-home", "{home}/.cache/../.cache/huggingface"], {}),
    "HF_HUB_CACHE at the HF home": ({}, [], {"HF_HUB_CACHE": "{home}/.cache/huggingface"}),
    "relative PYTHONPATH that climbs": ({"PYTHONPATH": "../../"}, [], {}),
    "runner's PYTHONPATH that climbs": ({}, [], {"PYTHONPATH": "{repo}/../.."}),
    "a named cache folder": ({}, ["--cache-dir", "{home}/.cache"], {}),
    "a named .ssh": ({}, ["--key", "{home}/.ssh/id_rsa"], {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_named_path_never_brings_the_users_keys(case, tmp_path, monkeypatch):
    assert isolation_problem() is None, isolation_problem()
    home, repo = _home(tmp_path)
    env, extra, runner = CASES[case]
    fill = {"home": str(home), "repo": str(repo)}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    for k, v in runner.items():
        monkeypatch.setenv(k, v.format(**fill))
    trial = repo / ".infrarsi" / "run" / "trials" / "0"
    spec = LaunchSpec(argv=[sys.executable, "probe.py", str(home), *(a.format(**fill) for a in extra)], cwd=str(repo),
                      env={k: v.format(**fill) for k, v in env.items()}, time_limit_s=120)
    ex = LocalExecutor()
    handle = ex.submit(spec, trial, token=f"named-{uuid.uuid4().hex[:8]}")
    end = wait(ex, handle, timeout_s=120)
    assert handle.sandboxed and end.returncode == 0, tail(trial / "stderr")
    got = json.loads(tail(trial / "stdout").splitlines()[-1])
    leaked = {k: v for k, v in got.items() if k in SECRETS and v == SECRETS[k]}
    assert leaked == {}, (case, leaked)
    if case.startswith("HF_"):  # the named thing is shown: the hub cache reads
        assert got[".cache/huggingface/hub/models--acme--tok/refs/main"] == "0123abcd", got
    if case == "a named cache folder":
        assert got[".cache/pip-log.txt"] == "the cache folder's own file", got
