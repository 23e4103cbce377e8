"""Issue 66 class 2: the machine's folders are allowlists. Of /etc a trial sees only what a Python, torch, NCCL and
Slurm-client process reads (isolation.ETC_SHOWN: traced, listed with reasons in docs/isolation.md); of /opt
nothing the launch or the Python environment does not name. The system's secrets that no list names -- a Kerberos
keytab, Slurm's database configuration and JWT key (under /etc/slurm or a Slurm tree in /opt), a TLS private key
outside /etc/ssl/private, a VPN configuration, a token exported in /etc/environment or /etc/profile.d -- are not
there, while what an honest process needs from /etc still works (its user's name, localhost, TLS, cc).

The secrets are written under the real /etc and /opt for the test (each name fresh, or one the machine lacks) and
removed afterwards, whatever happens (the fixture's finally)."""

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from infrarsi.execute.executor import tail, wait
from infrarsi.execute.local import LocalExecutor, isolation_problem
from infrarsi.trial import LaunchSpec

PROBE = r"""
import getpass, json, os, socket, ssl, subprocess, sys, time
out = {}
for p in json.loads(sys.argv[1]):
    try:
        with open(p) as f:
            out[p] = f.read()
    except OSError as e:
        out[p] = e.strerror
out["opt"] = sorted(os.listdir("/opt")) if os.path.isdir("/opt") else None
out["user"] = getpass.getuser()
out["localhost"] = socket.getaddrinfo("localhost", 29500, type=socket.SOCK_STREAM)[0][4][0]
out["tls"] = len(ssl.create_default_context().get_ca_certs()) >= 0 and ssl.get_default_verify_paths().capath
out["cc"] = subprocess.run(["cc", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
out["tz"] = time.strftime("%Z")
print(json.dumps(out), flush=True)
"""


@pytest.fixture
def planted():
    """Secrets where a machine keeps them, removed afterwards; {path: content}."""
    u = uuid.uuid4().hex[:8]
    wanted = {
        "/etc/krb5.keytab" if not os.path.lexists("/etc/krb5.keytab") else f"/etc/krb5-{u}.keytab":
            "\x05\x02 the host's Kerberos principal key",
        "/etc/slurm/slurmdbd.conf" if not os.path.lexists("/etc/slurm/slurmdbd.conf") else f"/etc/slurm/dbd-{u}.conf":
            "StoragePass=the-database-password",
        f"/etc/slurm/jwt-{u}.key": "the cluster's JWT signing key",
        f"/etc/pki/tls/private/server-{u}.key": "-----BEGIN PRIVATE KEY-----",
        f"/etc/openvpn/client/office-{u}.conf": "<key>the VPN client's key</key>",
        f"/etc/profile.d/site-{u}.sh": "export SITE_API_TOKEN=tok-from-profile-d",
        f"/opt/slurm-{u}/etc/slurmdbd.conf": "StoragePass=the-database-password",
    }
    made_dirs: list[Path] = []
    made: list[Path] = []
    try:
        for path, text in wanted.items():
            p = Path(path)
            for d in reversed(p.parents):
                if not d.exists():
                    d.mkdir()
                    made_dirs.append(d)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            made.append(p)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        yield wanted
    finally:
        for p in made:
            p.unlink(missing_ok=True)
        for d in reversed(made_dirs):
            try:
                d.rmdir()
            except OSError:
                pass


def test_a_trial_sees_no_system_secret_of_etc_or_opt_and_still_runs(planted, tmp_path):
    assert isolation_problem() is None, isolation_problem()
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "contract.lock").write_text("{}")
    paths = [*planted, "/etc/environment", "/etc/shadow", "/etc/ssh/ssh_host_rsa_key", "/etc/munge/munge.key"]
    trial = tmp_path / "run" / "trials" / "0"
    ex = LocalExecutor()
    spec = LaunchSpec(argv=[sys.executable, str(tmp_path / "probe.py"), json.dumps(paths)], cwd=str(tmp_path),
                      time_limit_s=120)
    end = wait(ex, ex.submit(spec, trial, token=f"etc-{uuid.uuid4().hex[:8]}"), timeout_s=120)
    assert end.returncode == 0, tail(trial / "stderr")
    got = json.loads(tail(trial / "stdout").splitlines()[-1])
    assert {p: got[p] for p in paths} == {p: "No such file or directory" for p in paths}
    assert got["opt"] is None  # nothing of /opt: neither the launch nor the Python environment names it
    # what an honest process reads from /etc still works
    assert got["user"] == "root" and got["localhost"] == "127.0.0.1" and got["cc"].startswith("cc ")
    assert got["tz"] and got["tls"] is not None
