"""A launch whose srun starts a podman container: the container is the box (execute/containers.py), on the real
one-node Slurm and a real podman, with an image imported from a local root file system (no registry is reachable).

The image is a bare tree (links to /usr, an /etc/passwd); the launch mounts the machine's /usr, the Python
environment and the repository read-only, as a team mounts its code and data into a base image."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from toy import TOY, ToyAdapter, toy_contract

from infrarsi.execute import containers, isolation
from infrarsi.execute.executor import wait
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner, unisolated
from infrarsi.execute.slurm import SlurmExecutor
from infrarsi.trial import LaunchSpec
from infrarsi.trial import TrialStatus
from infrarsi.verify.reverify import isolation_gate

IMAGE = "localhost/infrarsi-test-tree"
REPO = Path(__file__).resolve().parents[2]


def _tree_tar() -> bytes:
    """A root file system of links and a passwd file: what runs comes from the folders the launch mounts."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for d in ("usr", "etc", "proc", "sys", "dev", "tmp", "run", "root", "var/tmp"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@pytest.fixture(scope="session")
def podman(tmp_path_factory):
    """{"CONTAINERS_CONF": ...}: the environment under which podman runs a container on this machine, with the test
    image imported; skipped (with podman's own words) where podman is missing or cannot run a container here."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (Debian: apt-get install podman runc)")
    d = tmp_path_factory.mktemp("podman")
    (d / "tree.tar").write_bytes(_tree_tar())
    r = subprocess.run(["podman", "import", str(d / "tree.tar"), IMAGE], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"podman import failed: {r.stderr.strip()[-300:]}")
    # This machine: crun refuses its hybrid cgroups (controllers on both v1 and v2), and runc may not raise the
    # ulimits podman asks for (root without CAP_SYS_RESOURCE here): runc, and the highest ulimits it can set.
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    conf = d / "containers.conf"
    env = {"CONTAINERS_CONF": str(conf)}
    for nproc in (resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768, 16384, 4096):
        conf.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
                        f'[engine]\nruntime = "{"runc" if shutil.which("runc") else "crun"}"\n')
        r = subprocess.run(["podman", "run", "--rm", "-v", "/usr:/usr:ro", IMAGE, "/usr/bin/true"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, **env})
        if r.returncode == 0:
            return env
    pytest.skip(f"podman cannot run a container here: {r.stderr.strip()[-300:]}")


def _mounts(*extra: str, repo: str = f"{REPO}:{REPO}:ro") -> list[str]:
    """-v options for the machine's /usr, the interpreter and the repository (``repo``), read-only unless said."""
    out = []
    for p in dict.fromkeys(["/usr", sys.base_prefix, repo, *extra]):
        out += ["-v", p if p.count(":") else f"{p}:{p}:ro"]
    return out


def _podman_launch(code_or_argv: list[str], *, mounts: list[str], cwd: Path) -> list[str]:
    venv_python = str(Path(sys.executable))
    return ["srun", "--ntasks-per-node=1", "podman", "run", "--rm", *mounts, "-w", str(cwd), IMAGE, venv_python,
            *code_or_argv]


# Reads a record of its run, writes the repository and its outputs, calls keyctl, reads an exported secret.
PEEK = """
import ctypes, os, pathlib
trial = pathlib.Path(os.environ['INFRARSI_TRIAL_DIR'])
run = trial.parent.parent
def attempt(f):
    try:
        f(); return 'ok'
    except OSError as e:
        return e.strerror
libc = ctypes.CDLL(None, use_errno=True)
keyctl = libc.syscall(250, 0, 0, 0, 0, 0)  # KEYCTL_GET_KEYRING_ID
print('run record:', attempt(lambda: (run / 'noise.json').read_text()))
print('repository:', attempt(lambda: open('PWNED', 'w')))
print('outputs:', attempt(lambda: open(trial / 'outputs' / 'ok', 'w')))
print('keyctl:', os.strerror(ctypes.get_errno()) if keyctl == -1 else keyctl)
print('secret:', os.environ.get('MY_API_TOKEN'), 'pid:', os.getpid())
"""


@pytest.mark.slurm
def test_a_podman_container_is_the_box_of_a_trial_with_its_own_srun(slurm, podman, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    run = repo / ".infrarsi" / "run"  # inside what the launch mounts: covered by an empty tmpfs in the container
    (run / "trials" / "0").mkdir(parents=True)
    (run / "noise.json").write_text('{"mde": 0.05}')
    (run / "contract.lock").write_text("{}")
    monkeypatch.setenv("MY_API_TOKEN", "s3cret")  # the submitting shell's secret (sbatch exports its environment)
    ex = SlurmExecutor(env=slurm.env)
    spec = LaunchSpec(argv=_podman_launch(["-c", PEEK], mounts=_mounts(f"{repo}:{repo}:ro"), cwd=repo), cwd=str(repo),
                      env=podman, time_limit_s=120)
    h = ex.submit(spec, run / "trials" / "0", token="tok-podman")
    out = wait(ex, h, timeout_s=180)
    trial = run / "trials" / "0"
    assert out.state == "COMPLETED" and out.returncode == 0, (trial / "stderr").read_text()[-2000:]
    assert h.sandboxed and h.isolation == containers.PODMAN_RUNTIME and h.network == "own", h
    said = (trial / "stdout").read_text().splitlines()
    assert said[:5] == ["run record: No such file or directory", "repository: Read-only file system", "outputs: ok",
                        "keyctl: Operation not permitted", "secret: None pid: 1"], said
    assert (trial / "outputs" / "ok").exists() and not (repo / "PWNED").exists()
    [line] = [ln for ln in (trial / "job.sbatch").read_text().splitlines() if ln.startswith("srun ")]
    assert line.startswith("srun --ntasks-per-node=1 podman run --rm -v /usr:/usr:ro") and "bwrap" not in line


class PodmanToy(ToyAdapter):
    """The toy workload in a podman container started by the launch's own srun."""

    def __init__(self, env: dict[str, str], *, writable_repo: bool = False) -> None:
        self.env, self.writable = env, writable_repo

    def launch(self, contract, setting):
        spec = super().launch(contract, setting)
        mounts = _mounts(repo=f"{REPO}:{REPO}" if self.writable else f"{REPO}:{REPO}:ro")
        return spec.model_copy(update={"argv": _podman_launch(spec.argv[1:], mounts=mounts, cwd=REPO),
                                       "env": {**spec.env, **self.env}, "cwd": str(REPO)})


@pytest.mark.slurm
def test_podman_trials_promote_without_an_opt_in_and_a_writable_mount_does_not(slurm, podman, tmp_path):
    """A verification pair run in podman containers passes the promotion's isolation gate; the same launch with the
    repository mounted writable runs recorded unisolated, with the mount and the fix named, and the gate refuses."""
    contract = toy_contract(timeout_s=120)
    rec = RunRecord(tmp_path / "run")
    with Runner(rec, SlurmExecutor(env=slurm.env), PodmanToy(podman), contract) as r:
        a, b = r.run([{"mode": "ok", "step_ms": 20}, {"mode": "ok", "step_ms": 100}])
    for t in (a, b):
        assert t.status is TrialStatus.OK and t.metrics.step_time_s, t.evidence
        assert t.isolation == containers.PODMAN_RUNTIME and not unisolated(t), t.warnings
    assert isolation_gate(contract, [(a, b)]) == ([], None)
    with Runner(RunRecord(tmp_path / "bare"), SlurmExecutor(env=slurm.env), PodmanToy(podman, writable_repo=True),
                contract) as r:
        [t] = r.run([{"mode": "ok", "step_ms": 20}])
    assert t.status is TrialStatus.OK and unisolated(t) and t.isolation == "", t.warnings
    assert f"podman run mounts {REPO} writable" in t.warnings[0] and f"-v {REPO}:{REPO}:ro" in t.warnings[0]
    bare, why = isolation_gate(contract, [(t, t)])
    assert bare == [t.id, t.id] and why.startswith("not promoted")


def test_what_podman_options_are_refused_as_isolation(tmp_path):
    """Options that undo the container's isolation are named, one line each, before anything runs."""
    box = isolation.Box(readable=[REPO])
    kw = dict(outputs=tmp_path / "outputs", env_names=["A"], one_node=True, profile=tmp_path / "p.json")

    def why(*opts: str) -> str | None:
        return containers.podman_isolation(containers.split_podman(["podman", "run", *opts, IMAGE, "true"]), box, **kw)[2]

    assert why("--rm", "-v", f"{REPO}:{REPO}:ro") is None
    assert "--privileged" in why("--privileged")
    assert "--pid=host" in why("--pid=host")
    assert "keyring" in why("--security-opt", "seccomp=unconfined")
    assert "named volume" in why("-v", "data:/data")
    assert "may not read" in why("-v", "/home:/home:ro") and "may not read" in why("-v", "/:/host:ro")
    assert "only GPU and RDMA devices" in why("--device", "/dev/sda")
    added, network, _ = containers.podman_isolation(containers.split_podman(
        ["podman", "run", "--network=host", IMAGE, "true"]), box, **kw)
    assert network == "shared" and "--network=none" not in added and ["--env", "A"] == added[-2:]
    git = REPO / ".git"
    added = containers.podman_isolation(containers.split_podman(["podman", "run", "-v", f"{REPO}:/w:ro", IMAGE]),
                                        isolation.Box(readable=[REPO], hidden=[git]), **kw)[0]
    assert (f"type=tmpfs,destination=/w/.git,notmpcopyup" in added if git.is_dir() else f"/dev/null:/w/.git:ro" in added)
