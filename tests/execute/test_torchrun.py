"""torchrun: argv wrapping, and a real two-rank gloo launch whose rank 1 is killed by a signal."""

from __future__ import annotations

import signal
import sys

import pytest
from toy import TOY

from infrarsi.execute.classify import classify
from infrarsi.execute.executor import wait
from infrarsi.trial import LaunchSpec
from infrarsi.execute.torchrun import TorchrunExecutor, is_torchrun, root_cause, torchrun_argv, wrap


def test_wrapping():
    assert torchrun_argv(["python", "-m", "pkg.mod", "--x", "1"], nproc_per_node=2) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "pkg.mod", "--x", "1"]
    assert torchrun_argv(["python", "train.py"], nproc_per_node=4)[-3:] == ["--nproc-per-node", "4", "train.py"]
    line = ["torchrun", "--nproc-per-node", "2", "t.py"]
    assert is_torchrun(line) and torchrun_argv(line, nproc_per_node=8) == line
    assert wrap(LaunchSpec(argv=["python", "t.py"])).argv == ["python", "t.py"]  # one process: unchanged
    with pytest.raises(ValueError, match="expected `python -m module"):
        torchrun_argv(["bash", "run.sh"], nproc_per_node=2)
    with pytest.raises(ValueError, match="single-node"):
        torchrun_argv(["python", "t.py"], nproc_per_node=2, nnodes=2)


def test_root_cause_reads_the_failed_rank():
    text = ("Root Cause (first observed failure):\n[0]:\n  time      : 2026\n  host      : localhost\n"
            "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 7238)  (SIGKILL)\n")
    assert root_cause(text) == (1, -9)
    assert root_cause("nothing here") is None


def test_two_gloo_ranks_and_a_killed_worker(tmp_path):
    spec = LaunchSpec(argv=["python", TOY, "--mode", "gloo"], processes=2, devices=2, time_limit_s=120)
    ex = TorchrunExecutor()
    out = wait(ex, ex.submit(spec, tmp_path, token="tok-gloo"))
    stdout, stderr = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert "rank 0 world 2 allreduce=1" in stdout and "rank 1 world 2 allreduce=1" in stdout
    assert out.returncode == 1 and out.signal is None  # torchrun itself exits 1 ...
    v = classify(out, None, stdout=stdout, stderr=stderr, parse_error="no iteration lines")
    assert v.signal == signal.SIGKILL  # ... but the trial records the worker's signal
    assert any("rank 1 ended by signal 9" in e for e in v.evidence)
