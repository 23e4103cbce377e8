"""Untrusted code is isolated, not watched (execute/isolation.py: bubblewrap). A trial of a run sees its own
directory read-write, the repository and the Python environment read-only, and no run directory, experience
bank, verifier cache, seal key, ``.git`` or home folder; its PID namespace ends every process it started. A kernel
candidate's dynamic checks run in the same isolation. The classes of the isolation issue each have a test here:
2 (the verifier reaches no secret; a trial cannot forge a cached verdict), 4 (a trial cannot read the run's
records nor write the bank), 5 (descendants do not escape, setsid and an empty environment included), 6 (writes to
``.git``, ``__pycache__`` and a sibling run fail; nothing needs detecting afterwards). Without isolation
(``INFRARSI_ISOLATION=off``) the record says so and the seal chain is checked after each trial.

These run for real, as root on this machine; the Makefile installs bubblewrap."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from infrarsi.rundir import chain
from infrarsi.execute.executor import wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec

from .conftest import ROOT, TRITON_RMSNORM, tiny


@pytest.fixture(autouse=True)
def _isolation_works():
    """bubblewrap missing (a machine where `make test` ran without root): skipped, and -ra says why; installed but
    not isolating: a failure."""
    if shutil.which(os.environ.get("INFRARSI_BWRAP") or "bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: `make test` installs it as root (apt-get install bubblewrap)")
    assert isolation_problem() is None, f"this machine cannot isolate trials: {isolation_problem()}"


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


# Tries every record of its run (from INFRARSI_TRIAL_DIR), the seal key and the bank; one JSON line of what happened.
ATTACK = """
import json, os, sys
from pathlib import Path
trial = Path(os.environ["INFRARSI_TRIAL_DIR"])
run = trial.parent.parent
out = {}
def read(name, p):
    try:
        out["read " + name] = len(Path(p).read_bytes())
    except OSError as e:
        out["read " + name] = e.strerror
def append(name, p):
    try:
        with open(p, "a") as f:
            f.write("forged\\n")
        out["write " + name] = "written"
    except OSError as e:
        out["write " + name] = e.strerror
for rel in sys.argv[3:]:
    read(rel, run / rel)
    append(rel, run / rel)
out["env"] = sorted(k for k in os.environ if k in ("OPENAI_API_KEY", "HF_TOKEN", "INFRARSI_TRIAL_TOKEN"))
read("key", sys.argv[1])
read("bank", sys.argv[2])
append("bank", sys.argv[2])
(trial / "outputs" / "mine.txt").write_text("a trial writes its own outputs")
append("trial dir", trial / "mine.txt")  # the runner's folder: not the trial's to write
try:
    (trial / "clock.json").symlink_to("../../noise.json")  # the harness's own record, pointed at a sealed one
    out["plant clock.json"] = "planted"
except OSError as e:
    out["plant clock.json"] = e.strerror
print(json.dumps(out), flush=True)
"""
RECORDS = ["noise.json", "verification.json", "trials/0/trial.json", "seals.jsonl", "contract.lock"]


def _attack(run: Path, tmp_path: Path, executor, bank: Path, records=RECORDS):
    script = tmp_path / "attack.py"
    script.write_text(ATTACK)
    trial = run / "trials" / "99"
    spec = LaunchSpec(argv=[sys.executable, str(script), str(chain.key_path()), str(bank), *records], time_limit_s=60,
                      cwd=str(run.parent))
    handle = executor.submit(spec, trial, token=f"attack-{uuid.uuid4().hex[:8]}")
    outcome = wait(executor, handle, timeout_s=60)
    assert outcome.returncode == 0, (trial / "stderr").read_text()
    return handle, json.loads((trial / "stdout").read_text().splitlines()[-1]), trial


def test_an_isolated_trial_cannot_read_its_runs_records_nor_write_the_bank(recorded, tmp_path, monkeypatch):
    """Class 4: the doctor's records (losses, step times, noise) are not there to copy, and the bank in the
    repository's folder (a visible place) reads as empty and refuses the write."""
    bank = recorded.parent / "bank.sqlite"
    bank.write_bytes(b"the experience bank")
    monkeypatch.setenv("INFRARSI_BANK", str(bank))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-runner-s")  # the runner's secrets stay in the runner
    monkeypatch.setenv("HF_TOKEN", "hf-the-runner-s")
    before = {rel: (recorded / rel).read_bytes() for rel in RECORDS}
    assert chain.problems(recorded) == []
    handle, got, trial = _attack(recorded, tmp_path, LocalExecutor(), bank)
    assert handle.sandboxed and not handle.unsandboxed_why
    assert {k: v for k, v in got.items() if k.startswith("read ") and k[5:] in RECORDS} == \
        {f"read {rel}": "No such file or directory" for rel in RECORDS}  # the run directory is an empty folder
    writes = {k[6:]: v for k, v in got.items() if k.startswith("write ") and k[6:] in RECORDS}
    assert set(writes) == set(RECORDS) and set(writes.values()) <= {"Read-only file system", "No such file or directory"}
    # a hidden file is /dev/null on a nodev mount: it cannot be opened; a hidden folder is empty
    assert got["read key"] in ("Permission denied", "No such file or directory")  # the key is not there to read
    assert got["read bank"] == "Permission denied" and got["write bank"] in ("Permission denied", "Read-only file system")
    assert got["env"] == ["INFRARSI_TRIAL_TOKEN"]
    assert bank.read_bytes() == b"the experience bank"
    assert (trial / "outputs" / "mine.txt").is_file()  # its outputs/ is writable
    # the trial's folder is the runner's: nothing can be planted where the runner writes its records
    assert got["write trial dir"] == got["plant clock.json"] == "Read-only file system"
    assert not (trial / "clock.json").is_symlink()
    last = json.loads((recorded / "seals.jsonl").read_text().splitlines()[-1])
    assert last["path"] == "trials/99/clock.json"  # and sealed it under its own name, not as noise.json
    after = {rel: (recorded / rel).read_bytes() for rel in RECORDS}
    assert after["seals.jsonl"].startswith(before.pop("seals.jsonl"))  # the runner sealed the trial's clock.json
    assert {rel: after[rel] for rel in before} == before  # nothing recorded changed
    assert chain.problems(recorded) == []


def test_without_isolation_the_writes_land_and_the_handle_says_why(recorded, tmp_path):
    bank = tmp_path / "bank.sqlite"
    bank.write_bytes(b"bank")
    handle, got, _ = _attack(recorded, tmp_path, LocalExecutor(LocalExecutor.Config(isolation=False)), bank,
                             ["noise.json", "verification.json", "trials/0/trial.json"])
    assert not handle.sandboxed and "isolation is off" in handle.unsandboxed_why
    assert got["write noise.json"] == "written" and got["read key"] == len(chain.key_path().read_bytes())
    found = chain.problems(recorded)  # the post-hoc check the runner makes after every unisolated trial
    assert found[0].startswith("noise.json was edited after it was sealed"), found
    assert any(p.startswith("trials/0/trial.json was edited") for p in found)


# --------------------------------------------------------------------------------------------- class 2
# A kernel candidate that, when imported, re-seals noise.json with the seal key (the minimum detectable effect / 10).
RESEAL = '''
import os
from infrarsi.rundir import RunDir
run = RunDir(os.environ["ATTACKED_RUN"])
noise = run.noise()
run.write_noise(noise.model_copy(update={"mde": noise.mde / 10}))
'''


def test_a_kernel_candidate_under_verification_reaches_no_secret(recorded, tmp_path, monkeypatch):
    """Class 2: the dynamic checks -- the boundary, called here without the static lint in front -- run the
    candidate where neither the seal key nor the run is: its re-seal of noise.json fails, nothing changes."""
    from infrarsi.kernels.verify import VerifySettings, _dynamic_in_subprocess

    cand = tmp_path / "kernels" / "rmsnorm" / "reseal.py"
    cand.parent.mkdir(parents=True)
    cand.write_text(RESEAL)
    monkeypatch.setenv("ATTACKED_RUN", str(recorded))
    noise = (recorded / "noise.json").read_bytes()
    reasons, cases = _dynamic_in_subprocess(cand, "rmsnorm", VerifySettings(seed=1))
    assert (recorded / "noise.json").read_bytes() == noise and chain.problems(recorded) == []
    assert reasons and reasons[0].startswith("error: importing the candidate raised"), reasons
    assert cases == []


def test_a_trial_cannot_forge_a_cached_verdict(recorded, tmp_path, monkeypatch):
    """Class 2: a trial that writes a cached PASS, MAC'd with the verifier cache's secret, for a candidate that fails
    every check: the cache (here inside the repository, a visible place) is hidden from it, and the verdict stands."""
    from infrarsi.kernels import verify as v

    project = recorded.parent
    bad = project / "kernels" / "rmsnorm" / "fallback_torch.py"
    shutil.copy(ROOT / "tests" / "kernels" / "adversarial" / "fallback_torch.py", bad)
    monkeypatch.setenv("INFRARSI_CACHE", str(project / ".cache"))
    v._secret()  # the cache exists, with its secret, before the trial
    forge = tmp_path / "forge.py"
    forge.write_text(
        "import hashlib, sys\nfrom pathlib import Path\nfrom infrarsi.kernels import verify as v\n"
        "p = Path(sys.argv[1]); key = v.cache_key(p, 'rmsnorm')\n"
        "r = v.VerifyResult(verdict='pass', reasons=[], cases=[], sha256=hashlib.sha256(p.read_bytes()).hexdigest(),"
        " op='rmsnorm', path=str(p))\n"
        "try:\n    v._write_cached(v.cache_dir() / f'{key}.json', key, r)\n    print('forged')\n"
        "except OSError as e:\n    print('refused:', e.strerror)\n")
    ex = LocalExecutor()
    trial = recorded / "trials" / "98"
    # the attacker knows where the cache is (the environment's allowlist alone would send it to its own empty home)
    spec = LaunchSpec(argv=[sys.executable, str(forge), str(bad)], cwd=str(project),
                      env={"PYTHONPATH": str(ROOT), "INFRARSI_CACHE": str(project / ".cache")}, time_limit_s=120)
    out = wait(ex, ex.submit(spec, trial, token=f"forge-{uuid.uuid4().hex[:8]}"), timeout_s=120)
    assert out.returncode == 0, (trial / "stderr").read_text()[-2000:]
    assert "refused:" in (trial / "stdout").read_text()
    res = v.verify(bad, op="rmsnorm")
    assert res.verdict == "fail" and not res.cached, res


# --------------------------------------------------------------------------------------------- class 5
def _alive_with(marker: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def _gone_within(marker: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive_with(marker)


# Starts a grandchild that leaves the session and the environment behind (setsid, env -i) and sleeps (its command
# line carries the marker argv[1] reversed); tries to signal the runner (its pid in argv[2]); exits at once (or
# sleeps: argv[3] == "stay").
ESCAPE = """
import os, subprocess, sys, time
subprocess.Popen(["setsid", "env", "-i", sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1][::-1]])
try:
    os.kill(int(sys.argv[2]), 0)
    print("runner visible", flush=True)
except ProcessLookupError:
    print("runner invisible", flush=True)
if sys.argv[3:] == ["stay"]:
    time.sleep(300)
"""


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "contract.lock").write_text("{}")  # a run directory (no lock body: its records are unsealed)
    return run


def test_no_descendant_outlives_its_trial_not_even_setsid_with_an_empty_environment(tmp_path):
    """Class 5: a grandchild that calls setsid and drops the environment (no token to find it by) is gone when
    the trial ends, and the trial could not see the runner to signal it."""
    marker = f"escaped-{uuid.uuid4().hex}"
    grandchild = marker[::-1]
    run = _run_dir(tmp_path)
    ex = LocalExecutor()
    trial = run / "trials" / "0"
    h = ex.submit(LaunchSpec(argv=[sys.executable, "-c", ESCAPE, marker, str(os.getpid()), "exit"], time_limit_s=60),
                  trial, token="tok-escape")
    try:
        out = wait(ex, h, timeout_s=60)
        assert out.returncode == 0 and out.leftovers == 0, (trial / "stderr").read_text()
        assert "runner invisible" in (trial / "stdout").read_text()
        assert _alive_with(grandchild) == [], "a setsid'd grandchild with an empty environment outlived its trial"
    finally:
        for pid in _alive_with(grandchild):
            os.kill(pid, signal.SIGKILL)


RUNNER = r"""
import sys, time
from pathlib import Path
from infrarsi.execute.local import LocalExecutor
from infrarsi.trial import LaunchSpec
h = LocalExecutor().submit(LaunchSpec(argv=[sys.executable, "-c", sys.argv[2], sys.argv[3], "1", "stay"],
                                      time_limit_s=600), Path(sys.argv[1]), token="tok-runner-killed")
print(h.job_id, flush=True)
time.sleep(600)
"""


def test_kill_9_of_the_runner_ends_a_descendant_that_left_session_and_environment(tmp_path):
    """Class 5: the same grandchild, while its trial runs, when the runner is killed with SIGKILL."""
    marker = f"escaped-{uuid.uuid4().hex}"
    grandchild = marker[::-1]
    run = _run_dir(tmp_path)
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(run / "trials" / "0"), ESCAPE, marker],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        runner.stdout.readline()
        deadline = time.monotonic() + 30
        while not _alive_with(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive_with(grandchild), "the grandchild never started"
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        assert _gone_within(grandchild, 10), "a setsid'd grandchild with an empty environment outlived its runner"
    finally:
        if runner.poll() is None:
            runner.kill()
        for pid in _alive_with(marker) + _alive_with(grandchild):
            os.kill(pid, signal.SIGKILL)
        from infrarsi.execute.left_behind import PidsCgroup

        PidsCgroup.discard("tok-runner-killed")  # what a resumed run does (LocalExecutor.adopt)


# --------------------------------------------------------------------------------------------- class 6
UNWATCHED = """
import json
from pathlib import Path
out = {}
for rel, text in ((".git/hooks/post-commit", "#!/bin/sh\\ncat ~/.infrarsi/seal.key > /tmp/stolen\\n"),
                  ("__pycache__/mod.cpython-311.pyc", "forged bytecode"),
                  (".infrarsi/other/trials/0/trial.json", "rolled back"),
                  ("mod.py", "print('edited')")):
    try:
        Path(rel).write_text(text)
        out[rel] = "written"
    except OSError as e:
        out[rel] = e.strerror
print(json.dumps(out), flush=True)
"""


def test_writes_to_git_pycache_and_a_sibling_run_fail_inside_the_trial(tmp_path):
    """Class 6: the repository is read-only to the trial and .git and sibling runs are not there: a planted hook, a
    forged .pyc and a rolled-back sibling record fail to be written (nothing to detect afterwards)."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "mod.py").write_text("print('honest')\n")
    (project / "__pycache__").mkdir()
    other = project / ".infrarsi" / "other"
    (other / "trials" / "0").mkdir(parents=True)
    (other / "contract.lock").write_text("{}")
    (other / "trials" / "0" / "trial.json").write_text('{"status": "ok"}')
    run = project / ".infrarsi" / "run"
    run.mkdir()
    (run / "contract.lock").write_text("{}")
    before = {k: v for k, v in _files(project).items() if not k.startswith(".infrarsi/run/")}
    ex = LocalExecutor()
    trial = run / "trials" / "0"
    out = wait(ex, ex.submit(LaunchSpec(argv=[sys.executable, "-c", UNWATCHED], cwd=str(project), time_limit_s=60),
                             trial, token="tok-unwatched"), timeout_s=60)
    assert out.returncode == 0, (trial / "stderr").read_text()
    got = json.loads((trial / "stdout").read_text().splitlines()[-1])
    assert all(v in ("Read-only file system", "No such file or directory") for v in got.values()), got
    after = {k: v for k, v in _files(project).items() if not k.startswith(".infrarsi/run/")}
    assert after == before  # .git (hooks), __pycache__, the sibling run and the code: as they were


# --------------------------------------------------------------------------------------- through the CLI
# A correct RMSNorm (conftest.TRITON_RMSNORM) whose module, at import, appends to every sibling trial's record of its
# run.
SIBLING = ('''"""RMSNorm, correct, plus an attack on the records of the trials run before it."""
import os
from pathlib import Path

_me = Path(os.environ["INFRARSI_TRIAL_DIR"])
for _d in sorted(_me.parent.iterdir()):
    if _d != _me:
        try:
            with open(_d / "trial.json", "a") as _f:
                _f.write(" ")
            print(f"attack: appended to {_d.name}/trial.json", flush=True)
        except OSError as _e:
            print(f"attack: {_d.name}/trial.json: {_e.strerror}", flush=True)


'''
           + TRITON_RMSNORM + '''

def forward(x, w, eps):
    return rmsnorm(x, w, eps)
''')


def _doctor(cli, project, monkeypatch, isolation):
    monkeypatch.setenv("INFRARSI_ISOLATION", isolation)
    monkeypatch.setenv("INFRARSI_SPOT_EVERY", "0")  # the attack is the point: a plain-torch kernel, no spot check
    (project / "kernels/rmsnorm").mkdir(parents=True)
    (project / "kernels/rmsnorm/sibling.py").write_text(SIBLING)
    text = tiny(knobs='kernel_rmsnorm = ["kernels/rmsnorm/sibling.py"]',
                baseline='kernel_rmsnorm = "kernels/rmsnorm/sibling.py"')
    # no seed run: the warm-up and the two repeats are trials enough with siblings to attack (one launch less)
    assert "compare_steps = 6\n" in text
    # its plain-torch RMSNorm would be refused by the in-trial kernel watch first: the watch is off here
    text = text.replace('adapter = "minigpt"', 'adapter = "minigpt"\nenv = { INFRARSI_SPOT_EVERY = "0" }')
    (project / "c.toml").write_text(text.replace("compare_steps = 6\n", "compare_steps = 6\nseed_runs = 0\n"))
    assert cli("init", "c.toml", "--run-dir", "run").returncode == 0
    return cli("doctor", "--run-dir", "run")


@pytest.mark.slow  # the sibling write inside a trial: test_writes_to_git_pycache_and_a_sibling_run_fail_inside_the_trial
def test_an_isolated_trial_finds_no_sibling_to_edit_through_the_cli(cli, project, monkeypatch):
    r = _doctor(cli, project, monkeypatch, "on")
    run = project / "run"
    assert "attack:" not in (run / "trials/1/stdout").read_text()  # its trials/ holds its own folder only
    assert chain.problems(run) == []  # the doctor's records are as the runner wrote them
    t1 = json.loads((run / "trials/1/trial.json").read_text())
    assert t1["warnings"] == []
    assert r.returncode == 0, r.stderr  # otherwise an honest kernel: the doctor finishes


def test_without_isolation_a_sibling_edit_fails_the_trial_and_is_recorded(cli, project, monkeypatch):
    r = _doctor(cli, project, monkeypatch, "off")
    run = project / "run"
    assert "attack: appended to 0/trial.json" in (run / "trials/1/stdout").read_text()
    assert r.returncode == 1
    assert "the run's records changed while it ran without isolation: trials/0/trial.json was edited" in r.err, r.stderr
    t1 = json.loads((run / "trials/1/trial.json").read_text())
    assert t1["status"] == "invalid" and t1["warnings"][0].startswith("ran without isolation: trial isolation is off")
    t0 = json.loads((run / "trials/0/trial.json").read_text())  # the first trial ran before any sibling existed
    assert "ran without isolation" in t0["warnings"][0]


def test_a_repository_under_tmp_or_home_whose_venv_links_to_an_absolute_interpreter_runs(tmp_path):
    """A repository under /tmp or the home folder (both an empty tmpfs in the trial, the repository bound back) with
    a venv whose bin/python is a symlink with an absolute target (python3 -m venv over pyenv: -> ~/.pyenv/...): the
    trial runs (bwrap failed with "Can't create file at .../bin/python" binding the link again under the repository)."""
    from infrarsi.execute.isolation import bwrap_argv, trial_box

    tool = tmp_path / "pyenv/versions/3.11/bin/python3"  # the interpreter, outside the repository, under a tmpfs root
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho ran in $(pwd)\n")
    tool.chmod(0o755)
    repo = tmp_path / "repo"
    (repo / ".venv/bin").mkdir(parents=True)
    (repo / ".venv/bin/python3").symlink_to(tool)  # absolute
    (repo / ".venv/bin/python").symlink_to("python3")  # relative, as venv makes it
    trial = tmp_path / "run/trials/0"
    trial.mkdir(parents=True)
    argv = [str(repo / ".venv/bin/python")]
    box = trial_box(trial, tmp_path / "run", argv=argv, env={}, cwd=repo, repository=repo,
                    readable=[tool.parent.parent])
    r = subprocess.run(bwrap_argv(box, argv), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"ran in {repo}", r.stderr


def test_kernel_candidates_outside_the_repository_are_readable_in_the_trial(tmp_path):
    """A candidate the launch names by PATH@VARIANT (minigpt's --kernel op=PATH@VARIANT) or inside a JSON object
    (torchtitan's INFRARSI_PATCHES) outside the repository: the trial reads its file (it did not exist in the box,
    and tests/adapters/torchtitan/test_patch.py's wrong candidate under tmp_path crashed with PatchError)."""
    from infrarsi.execute.isolation import bwrap_argv, trial_box

    repo = tmp_path / "repo"
    repo.mkdir()
    a, b = tmp_path / "k/rmsnorm/rows.py", tmp_path / "j/rmsnorm/wrong.py"
    for f in (a, b):
        f.parent.mkdir(parents=True)
        f.write_text(f"# {f.name}\n")
    trial = tmp_path / "run/trials/0"
    trial.mkdir(parents=True)
    argv = ["/bin/cat", str(a), str(b), "--kernel", f"rmsnorm={a}@rows16"]
    env = {"INFRARSI_PATCHES": json.dumps({"rmsnorm": f"{b}@x4"})}
    box = trial_box(trial, tmp_path / "run", argv=argv[:1] + argv[3:], env=env, cwd=repo, repository=repo)
    r = subprocess.run(bwrap_argv(box, argv[:3]), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "# rows.py\n# wrong.py\n", r.stderr


def test_a_socket_or_fifo_the_launch_names_is_not_shown_in_the_box(tmp_path):
    """A named path is shown as a file or a folder only: a socket (a host service) or a FIFO the command line or a
    JSON value of its environment names stays outside the box."""
    import socket

    from infrarsi.execute.isolation import named_paths

    sock_path, fifo, data = tmp_path / "svc.sock", tmp_path / "pipe", tmp_path / "data.bin"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(sock_path))
    os.mkfifo(fifo)
    data.write_bytes(b"x")
    try:
        got = named_paths(["python", "train.py", "--socket", str(sock_path), json.dumps({"fifo": str(fifo)}),
                           "--data", str(data)], {"SVC": str(sock_path)}, tmp_path)
    finally:
        srv.close()
    assert set(got) == {data}


def test_a_dangling_link_among_a_prefixs_matches_hides_none_of_its_siblings(tmp_path):
    """``--data-path /d/corpus`` names every file the prefix starts; one dangling link among them is not shown and
    the data files beside it still are."""
    from infrarsi.execute.isolation import named_paths

    (tmp_path / "corpus_text.bin").write_bytes(b"x")
    (tmp_path / "corpus_text.idx").write_bytes(b"x")
    (tmp_path / "corpus_gone").symlink_to(tmp_path / "nowhere")
    got = named_paths(["train.py", "--data-path", str(tmp_path / "corpus")], {}, tmp_path)
    assert set(got) == {tmp_path / "corpus_text.bin", tmp_path / "corpus_text.idx"}
