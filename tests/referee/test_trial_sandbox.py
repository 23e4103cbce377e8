"""Hole 3, at run time: a kernel candidate that writes into the repository while it is verified or while its
trial runs. Isolated (the default), the repository is read-only to it and the write fails where it is made;
without isolation any write outside the trial's own directory fails the trial (the repository is snapshotted
around it)."""

import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, TRITON_RMSNORM, tiny

KERNEL_FILE = "kernels/rmsnorm/triton_rows.py"
KERNEL = f"{KERNEL_FILE}@rows4"
# Written when the module is imported: the workload and the verifier both import it.
WRITE = 'from pathlib import Path as _P\n_P("PWNED").write_text("the candidate was here\\n")\n'


def _writer(cli, project):
    (project / "kernels/rmsnorm").mkdir(parents=True)
    (project / "kernels/rmsnorm/writer.py").write_text(
        WRITE + TRITON_RMSNORM + "\n\ndef forward(x, w, eps):\n    return rmsnorm(x, w, eps)\n")
    (project / "c.toml").write_text(tiny(knobs='kernel_rmsnorm = ["kernels/rmsnorm/writer.py"]',
                                         baseline='kernel_rmsnorm = "kernels/rmsnorm/writer.py"'))
    assert cli("init", "c.toml", "--run-dir", "run").returncode == 0
    return cli("doctor", "--run-dir", "run")


def test_an_isolated_trial_cannot_write_outside_its_directory(cli, project):
    r = _writer(cli, project)
    assert r.returncode == 1 and not (project / "PWNED").exists()
    assert "Read-only file system" in (project / "run/trials/0/stderr").read_text(), r.stderr


def test_an_unisolated_trial_that_writes_outside_its_directory_is_invalid(cli, project, monkeypatch):
    monkeypatch.setenv("INFRARSI_ISOLATION", "off")
    r = _writer(cli, project)
    assert r.returncode == 1 and "ended invalid: wrote outside its trial directory: created PWNED" in r.err, r.stderr


@pytest.mark.slow  # the real verifier, twice (about 20 s on two cores)
def test_a_candidate_that_writes_while_verified_fails_verification(project, monkeypatch, tmp_path):
    """The run stage's own per-candidate verification (kernels/space.py's verify_watched), isolated or not."""
    from infrarsi.kernels.space import verify_watched

    monkeypatch.setenv("INFRARSI_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(project)
    (project / "kernels/rmsnorm").mkdir(parents=True)
    honest = project / KERNEL_FILE
    shutil.copy(ROOT / KERNEL_FILE, honest)
    writer = project / "kernels/rmsnorm/writer.py"
    fut = "from __future__ import annotations\n"
    writer.write_text((ROOT / KERNEL_FILE).read_text().replace(fut, fut + WRITE, 1))
    res, wrote = verify_watched(KERNEL, "rmsnorm", None, project / "run")
    assert res.verdict == "pass" and wrote == []  # the honest candidate passes
    res, wrote = verify_watched("kernels/rmsnorm/writer.py", "rmsnorm", None, project / "run")
    assert res.verdict == "fail" and not (project / "PWNED").exists()
    # refused before it runs (pathlib is off the static lint), or caught writing if it ever did run
    assert any(r.startswith("static-import") for r in res.reasons) or any("PWNED" in w for w in wrote), res.reasons
