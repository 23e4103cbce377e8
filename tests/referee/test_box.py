"""The box is an allowlist (execute/isolation.py): each class a new attacker tried has a test here, all answered by
one probe trial of a run (it tries every class and prints one JSON line; module fixture), plus the cases that need
no trial. Classes: 1 the network (host loopback, abstract and /run sockets), 2 the environment (an allowlist plus
workload.env and workload.pass_env), 3 kernel state (the keyring's calls, TIOCSTI), 4 run directories at any depth
and the machine's secrets, 5 the disk (a size-limited scratch, the runner's reserve), 6 the runner's files (a
folder the trial cannot write, reads that follow nothing, a fresh folder per attempt)."""

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from infrarsi.execute import isolation, runner
from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec


@pytest.fixture(autouse=True)
def _isolation_works():
    assert isolation_problem() is None, f"this machine cannot isolate trials: {isolation_problem()}"


# Every class at once; what each attempt got (a value, or the OSError's strerror).
PROBE = r"""
import ctypes, json, os, platform, socket, sys
from pathlib import Path
a = json.loads(sys.argv[1])
out = {}
def attempt(name, f):
    try:
        out[name] = f()
    except OSError as e:
        out[name] = e.strerror or str(e)
def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(address)
    return "connected"
def own_loopback():  # what torchrun's rendezvous does: a server on 127.0.0.1 and a client of it
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    return connect(socket.AF_INET, srv.getsockname())
attempt("host loopback", lambda: connect(socket.AF_INET, ("127.0.0.1", a["port"])))
attempt("abstract socket", lambda: connect(socket.AF_UNIX, "\0" + a["abstract"]))
attempt("run socket", lambda: connect(socket.AF_UNIX, a["run_socket"]))
attempt("own loopback", own_loopback)
out["env"] = sorted(k for k in os.environ if k in a["names"])
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY = {"x86_64": 248, "aarch64": 217}[platform.machine()]
def add_key():
    r = libc.syscall(ADD_KEY, b"user", b"infrarsi-probe", b"from trial A", 12, -3)  # the session keyring
    if r < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "added"
attempt("add_key", add_key)
attempt("deep run", lambda: len(Path(a["deep_run_log"]).read_bytes()))
attempt("run in data", lambda: len(Path(a["data_run_log"]).read_bytes()))
attempt("data", lambda: len(Path(a["data_file"]).read_bytes()))
attempt("shadow", lambda: len(Path("/etc/shadow").read_bytes()))
out["machine"] = sorted(p for p in ("/home", "/srv", "/mnt", "/var/lib") if os.path.exists(p))
def fill():
    n = 0
    with open("/tmp/fill", "wb") as f:
        try:
            while n < a["fill_bytes"]:
                f.write(b"x" * 2**20); f.flush(); n += 2**20
        except OSError as e:
            return [n, e.strerror]
    return [n, "no error"]
attempt("fill", fill)
os.remove("/tmp/fill")
trial = Path(os.environ["INFRARSI_TRIAL_DIR"])
attempt("replace stdout", lambda: os.symlink(a["home_secret"], trial / "stdout.new") or "planted")
attempt("fifo stderr", lambda: os.mkfifo(trial / "exit.status") or "planted")
attempt("outputs", lambda: (trial / "outputs" / "ckpt").write_bytes(b"ok") and "written")
print(json.dumps(out), flush=True)
"""


# Issue 66 class 3: secrets under allowed prefixes whose names do not say so, judged by value or by name.
SECRET_VALUES = {
    "TORCH_HUB_URL": "https://hub.example/api/models?token=hf_q8Xz31LmPp0aRw",  # a token in a URL's query
    "TRITON_PROXY": "https://ghp_9dK2mQ7xLr4TzW1v@proxy.example",  # a token as userinfo, no password
    "SLURM_ACCESS": "Basic dXNlcjpodW50ZXIy",  # an Authorization header's value
    "TORCH_HUB_HEADER": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl",
    "NCCL_DB_PASS": "hunter2",  # a *_PASS name
    "CUDA_LICENSE": "a8F3kQ9zL2mN7pR4tV6wX1yB5cD0eG",  # a high-entropy value under a name nobody documents
    "HF_PRIVATE_MIRROR": "mirror",  # HF_: only the names Hugging Face documents
    "PYTHONSTARTUP_TOKEN": "x",
    "LISTED_SECRET_URL": "https://api.example/v1?key=abc123",  # not listed: dropped; pass_env would pass it
}
HONEST_ENV = {"NCCL_DEBUG": "WARN", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128",
              "HF_HUB_CACHE": "/nonexistent/hub/models--gpt2/snapshots/607a30d783dfa663caf39e06633721c8d4cfcd7e",
              "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0",
              "CUDA_VISIBLE_DEVICES": "GPU-5f3a8c2e-1b7d-4e9a-9c3f-2a6b8d0e4f1a",  # a GPU by its UUID
              "NCCL_TOPO_FILE": sys.executable}  # a path: not judged as a key


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """One isolated trial of a run tries every class; (its JSON line, the paths it was given)."""
    tmp = tmp_path_factory.mktemp("box")
    project = tmp / "project"
    deep = project / "exp" / "2026-12-01" / "run"  # a run directory two folders down the repository
    (deep / "trials" / "0").mkdir(parents=True)
    (deep / "contract.lock").write_text("{}")
    (deep / "trials" / "0" / "stdout").write_text("step 1 | step time 0.101 s\n" * 10)
    data = tmp / "data"  # data outside the repository, named on the command line, with an old run inside
    (data / "old" / "run" / "trials" / "0").mkdir(parents=True)
    (data / "old" / "run" / "seals.jsonl").write_text("{}\n")
    (data / "old" / "run" / "trials" / "0" / "stdout").write_text("a baseline's log\n")
    (data / "tokens.bin").write_bytes(b"\0" * 64)
    run = project / ".infrarsi" / "run"
    run.mkdir(parents=True)
    (run / "contract.lock").write_text("{}")
    secret = tmp / "home-secret"
    secret.write_text("the user's secret")

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    abstract = f"infrarsi-probe-{uuid.uuid4().hex[:8]}"
    ab = socket.socket(socket.AF_UNIX)
    ab.bind("\0" + abstract)
    ab.listen(8)
    run_socket = f"/run/infrarsi-probe-{uuid.uuid4().hex[:8]}.sock"
    rs = socket.socket(socket.AF_UNIX)
    rs.bind(run_socket)
    rs.listen(8)
    planted = {"DATABASE_URL": "postgres://app:hunter2@db/x", "MY_LLM_ENDPOINT": "http://127.0.0.1:8000/v1",
               "HF_ENDPOINT": "https://user:pw@hub.example", "LISTED_BY_USER": "yes", "OMP_NUM_THREADS": "1",
               "HF_HUB_OFFLINE": "1", **HONEST_ENV, **SECRET_VALUES}
    names = [*planted, "FROM_CONTRACT", "PATH"]
    saved = {k: os.environ.get(k) for k in planted}
    os.environ.update(planted)
    args = {"port": srv.getsockname()[1], "abstract": abstract, "run_socket": run_socket, "names": names,
            "deep_run_log": str(deep / "trials" / "0" / "stdout"),
            "data_run_log": str(data / "old" / "run" / "trials" / "0" / "stdout"),
            "data_file": str(data / "tokens.bin"), "fill_bytes": 64 * 2**20, "home_secret": str(secret)}
    script = tmp / "probe.py"
    script.write_text(PROBE)
    trial = run / "trials" / "0"
    try:
        ex = LocalExecutor()
        spec = LaunchSpec(argv=[sys.executable, str(script), json.dumps(args), "--data-path", str(data)],
                          cwd=str(project), env={"FROM_CONTRACT": "1"}, pass_env=["LISTED_BY_USER"],
                          scratch_bytes=16 * 2**20, time_limit_s=120)
        handle = ex.submit(spec, trial, token=f"probe-{uuid.uuid4().hex[:8]}")
        end = wait(ex, handle, timeout_s=120)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for s in (srv, ab, rs):
            s.close()
        os.unlink(run_socket)
    assert end.returncode == 0, tail(trial / "stderr")
    return json.loads(tail(trial / "stdout").splitlines()[-1]), handle, trial, secret


def test_class1_a_trial_reaches_no_host_service_but_has_its_own_loopback(probed):
    got, handle, _, _ = probed
    assert got["host loopback"] == "Connection refused"  # an LLM endpoint on the host's 127.0.0.1
    assert got["abstract socket"] == "Connection refused"  # abstract unix sockets live in the network namespace
    assert got["run socket"] == "No such file or directory"  # /run (munge, a desktop bus) is an empty tmpfs
    assert got["own loopback"] == "connected"  # torchrun's rendezvous on 127.0.0.1 works
    assert handle.network == "own"


def test_class2_the_environment_is_an_allowlist(probed):
    got = probed[0]
    # unlisted names (a database URL with its password, an endpoint) and a password inside an allowed one: dropped;
    # what the frameworks read, the contract's workload.env and the names workload.pass_env lists: kept
    assert got["env"] == sorted(["FROM_CONTRACT", "HF_HUB_OFFLINE", "LISTED_BY_USER", "OMP_NUM_THREADS", "PATH",
                                 *HONEST_ENV])


def test_class2_values_are_judged_and_prefixes_keep_only_documented_names(probed):
    """Issue 66 class 3: a token in a URL's query or userinfo, a Bearer/Basic value, a *_PASS name, a high-entropy
    value under a name nobody documents, an undocumented HF_/PYTHON name: none reaches the trial; the frameworks'
    own knobs (NCCL_DEBUG, PYTORCH_CUDA_ALLOC_CONF, a cache path with a commit hash) still do."""
    got = probed[0]
    assert sorted(set(got["env"]) & set(SECRET_VALUES)) == []
    assert set(HONEST_ENV) <= set(got["env"])
    # workload.pass_env is the user's door: a name listed there passes as it is, whatever its value
    assert isolation.clean_environment(SECRET_VALUES, pass_env=["LISTED_SECRET_URL", "NCCL_DB_PASS"]) == \
        {k: SECRET_VALUES[k] for k in ("LISTED_SECRET_URL", "NCCL_DB_PASS")}


def test_class3_the_kernel_keyring_is_refused(probed):
    got, handle, _, _ = probed
    assert got["add_key"] == "Operation not permitted"  # nothing to carry from trial A to trial B
    assert handle.unisolated == []


def test_class3_a_boxed_process_cannot_push_input_into_its_terminal():
    """TIOCSTI: a process given the user's terminal (``kernels verify`` from a shell) runs in a session of its own,
    so the terminal is not its controlling one and the kernel refuses the push."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    code = ("import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('pushed')\n"
            "except OSError as e:\n    print(e.strerror)")
    argv = isolation.bwrap_argv(isolation.Box(readable=isolation.python_paths()), [sys.executable, "-I", "-S", "-c", code])

    def terminal():  # the user's terminal as the caller's controlling one
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        r = subprocess.run(argv, stdin=slave, capture_output=True, text=True, timeout=60, preexec_fn=terminal)
    finally:
        os.close(slave)
        os.close(master)
    assert r.stdout.strip() == "Operation not permitted", r.stderr


def test_class4_run_directories_at_any_depth_and_the_machines_secrets_are_hidden(probed):
    got = probed[0]
    assert got["deep run"] == "No such file or directory"  # exp/<date>/run under the repository
    assert got["run in data"] == "No such file or directory"  # a run inside the named data folder
    assert got["data"] == 64  # the named data itself reads
    assert isinstance(got["shadow"], str)  # /etc/shadow: not there to read (/dev/null on a nodev mount)
    assert got["machine"] == []  # nothing of the machine beyond the allowlist: no /home, /srv, /mnt, /var/lib


def test_class5_scratch_is_a_size_limited_tmpfs(probed):
    written, why = probed[0]["fill"]
    assert why == "No space left on device" and written <= 16 * 2**20  # spec.scratch_bytes


def test_class5_the_runner_keeps_room_for_its_records(tmp_path, monkeypatch):
    """A disk under the reserve: no trial is launched (ENOSPC: the run stops with one line, the trial stays
    recorded as running); after a trial that filled it, its outputs go (links not followed) so its record fits."""
    trial = tmp_path / "run" / "trials" / "0"
    (trial / "outputs").mkdir(parents=True)
    (trial / "outputs" / "ckpt.pt").write_bytes(b"\0" * 4096)
    kept = tmp_path / "kept"
    kept.write_text("not the trial's")
    (trial / "outputs.1").symlink_to(kept)  # an earlier attempt's outputs, replaced by a link
    monkeypatch.setattr(runner, "RESERVE_BYTES", runner._free_bytes(tmp_path) + 2**40)
    monkeypatch.setattr(runner, "RESERVE_FRACTION", 1.0)
    with pytest.raises(OSError) as e:
        runner._check_reserve(tmp_path / "run")
    assert e.value.errno == errno.ENOSPC and "no trial was launched" in str(e.value)
    said = runner._keep_reserve(tmp_path / "run", trial)
    assert said.startswith("outputs removed") and not (trial / "outputs").exists()
    assert kept.read_text() == "not the trial's" and not os.path.lexists(trial / "outputs.1")
    monkeypatch.setattr(runner, "RESERVE_BYTES", 1)
    runner._check_reserve(tmp_path / "run")  # room enough: nothing said
    assert runner._keep_reserve(tmp_path / "run", trial) == ""


def test_class6_the_trials_folder_is_the_runners(probed):
    got, _, trial, _ = probed
    assert got["replace stdout"] == got["fifo stderr"] == "Read-only file system"
    assert got["outputs"] == "written" and (trial / "outputs" / "ckpt").read_bytes() == b"ok"


def test_class6_the_runner_reads_no_fifo_and_no_link_a_trial_left(tmp_path):
    """Without isolation a trial can still plant: a FIFO where stdout was (the runner would wait for ever) and a
    link to a secret where stderr was (it would land in the sealed record). Reads follow neither."""
    trial = tmp_path / "trial"
    trial.mkdir()
    os.mkfifo(trial / "stdout")
    secret = tmp_path / "secret"
    secret.write_text("the user's secret")
    (trial / "stderr").symlink_to(secret)
    got = {}
    t = threading.Thread(target=lambda: got.update(out=runner._read_text(trial / "stdout"),
                                                   err=runner._read_text(trial / "stderr")), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the runner waits on a FIFO the trial left"
    assert got == {"out": "", "err": ""}


def test_class6_every_attempt_gets_a_fresh_folder_and_writes_through_no_link(tmp_path):
    """An attempt killed with the runner left links where the runner's files and outputs/ were (to files in the
    home folder); the next attempt writes through none of them and starts with an empty outputs/."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "contract.lock").write_text("{}")
    trial = run / "trials" / "0"
    trial.mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    for name in ("bashrc", "ssh-config", "exit"):
        (home / name).write_text(f"the user's {name}\n")
    (trial / "stderr").symlink_to(home / "bashrc")
    (trial / "stdout").symlink_to(home / "ssh-config")
    (trial / "exit.status").symlink_to(home / "exit")
    (trial / "outputs").symlink_to(home)
    ex = LocalExecutor()
    code = ("import os, sys; print('out'); print('err', file=sys.stderr); "
            "open(os.environ['INFRARSI_TRIAL_DIR'] + '/outputs/ckpt', 'w').write('new')")
    end = wait(ex, ex.submit(LaunchSpec(argv=[sys.executable, "-c", code], cwd=str(tmp_path), time_limit_s=60),
                             trial, token=f"fresh-{uuid.uuid4().hex[:8]}"), timeout_s=60)
    assert end.returncode == 0, tail(trial / "stderr")
    assert {p.name: p.read_text() for p in home.iterdir()} == {n: f"the user's {n}\n" for n in ("bashrc", "ssh-config", "exit")}
    assert not (trial / "outputs").is_symlink() and (trial / "outputs" / "ckpt").read_text() == "new"
    assert (trial / "outputs.1").is_symlink()  # the earlier attempt's, moved aside, not followed
    assert tail(trial / "stdout") == "out\n" and "err" in tail(trial / "stderr")
