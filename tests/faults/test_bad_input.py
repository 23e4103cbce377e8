"""Bad input at init and hostile files: one line naming the file, the key and the fix; --debug shows the traceback;
nothing locked or written on the way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, cli, one_line_error, sim_env

SIM = (ROOT / "contracts" / "sim-dense8b-h100x8.toml").read_text()
MEGATRON_LAUNCH = (ROOT / "tests" / "fixtures" / "megatron" / "gpt2_345m_idioms.sh").read_text()


@pytest.fixture
def env(tmp_path):
    return sim_env(tmp_path)


def test_a_binary_contract_is_one_line_and_debug_shows_the_traceback(tmp_path, env):
    c = tmp_path / "c.toml"
    c.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    line = one_line_error(cli("init", c, "--run-dir", tmp_path / "run", env=env))
    assert str(c) in line and "not a text file" in line, line
    assert not (tmp_path / "run").exists()
    r = cli("--debug", "init", str(tmp_path / "nowhere.toml"), "--run-dir", tmp_path / "run", env=env)
    assert r.returncode == 1


def test_a_directory_is_not_reported_as_missing(tmp_path, env):
    line = one_line_error(cli("init", tmp_path, "--run-dir", tmp_path / "run", env=env))
    assert "is a directory" in line and "does not exist" not in line, line


@pytest.mark.parametrize("entrypoint, words", [
    ("python -m infrarsi.workloads.no_such_workload", "no module 'infrarsi.workloads.no_such_workload'"),
    ("python -m json.tool", "the simulated adapter launches"),
    ("/opt/nowhere/train", "is not installed here"),
])
def test_an_entrypoint_that_would_be_ignored_or_cannot_run_is_refused_at_init(tmp_path, env, entrypoint, words):
    c = tmp_path / "c.toml"
    c.write_text(SIM.replace('entrypoint = "python -m infrarsi.workloads.simulated"', f'entrypoint = "{entrypoint}"'))
    line = one_line_error(cli("init", c, "--run-dir", tmp_path / "run", env=env))
    assert str(c) in line and "workload.entrypoint" in line and words in line, line
    assert not (tmp_path / "run" / "contract.lock").exists()


def _megatron(tmp_path, launch_text, launch_name="launch.sh", adapter="megatron"):
    (tmp_path / launch_name).write_text(launch_text)
    c = tmp_path / "c.toml"
    c.write_text(f'name = "m"\n[workload]\nadapter = "{adapter}"\nlaunch = "{tmp_path / launch_name}"\n'
                 f'[hardware]\nkind = "H100-80GB"\ndevices = 4\nmemory_capacity_gib = 80\n')  # gpt2_345m_idioms.sh: 4 ranks
    return c


def test_a_launch_whose_torchrun_is_missing_names_the_launch_file(tmp_path, env):
    c = _megatron(tmp_path, MEGATRON_LAUNCH.replace("\ntorchrun ", "\n/opt/missing/bin/torchrun "))
    line = one_line_error(cli("init", c, "--run-dir", tmp_path / "run", env=env))
    assert f"workload.launch {tmp_path / 'launch.sh'}" in line and "/opt/missing/bin/torchrun" in line and "not installed" in line, line
    ok = _megatron(tmp_path, MEGATRON_LAUNCH)  # plain `torchrun`: the one beside this interpreter
    assert cli("init", ok, "--run-dir", tmp_path / "run", env=env).returncode == 0


@pytest.mark.parametrize("content, words", [("", "is empty"), ("\n  \n", "is empty"), (None, "is a directory")])
def test_an_empty_or_directory_launch_file_is_not_read_as_the_framework_defaults(tmp_path, env, content, words):
    if content is None:
        (tmp_path / "job.toml").mkdir()
        c = tmp_path / "c.toml"
        c.write_text('name = "t"\n[workload]\nadapter = "torchtitan"\nlaunch = "job.toml"\n'
                     '[hardware]\nmemory_capacity_gib = 80\n')
    else:
        c = _megatron(tmp_path, content, "job.toml", adapter="torchtitan")
    line = one_line_error(cli("init", c, "--run-dir", tmp_path / "run", env=env))
    assert "workload.launch " in line and "job.toml" in line and words in line, line


def test_a_run_directory_held_by_another_process_is_refused_naming_it(tmp_path, env):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from infrarsi.runlock import hold\n"
                               "with hold(sys.argv[1], 'run'):\n    print('held', flush=True); time.sleep(600)", str(run)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for cmd in ("doctor", "run"):
            line = one_line_error(cli(cmd, "--run-dir", run, env=env))
            assert f"in use by pid {holder.pid} on {socket.gethostname()} since" in line and f"kill {holder.pid}" in line
        debug = cli("run", "--run-dir", run, "--debug", env=env)  # the traceback, on request
        assert debug.returncode == 1 and "Traceback" in debug.stderr and "RunDirBusy" in debug.stderr
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    from infrarsi.runlock import holder as who, hold

    notes = []
    with hold(run, "run", on_takeover=notes.append):  # the dead holder's lock is free: taken over, and said so
        assert who(run)["pid"] == os.getpid()
    assert len(notes) == 1 and f"pid {holder.pid}" in notes[0]
    with hold(run, "run", on_takeover=notes.append):  # a lock released in order is not a takeover
        pass
    assert len(notes) == 1


def test_two_holders_in_one_moment_one_wins(tmp_path):
    """Racing processes: exactly one holds the directory at a time."""
    run = tmp_path / "run"
    run.mkdir()
    code = ("import sys, time\nfrom infrarsi.runlock import hold, RunDirBusy\n"
            "try:\n    with hold(sys.argv[1], 'run'):\n        time.sleep(1.5); print('won')\n"
            "except RunDirBusy:\n    print('refused')")
    ps = [subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = sorted(p.communicate()[0].strip() for p in ps)
    assert outs.count("won") == 1 and outs.count("refused") == 3, outs


def test_bank_stats_on_an_empty_file_refuses_and_writes_nothing(tmp_path, env):
    bank = tmp_path / "empty.sqlite"
    bank.write_bytes(b"")
    line = one_line_error(cli("bank", "stats", "--bank", bank, env=env))
    assert str(bank) in line, line
    assert bank.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]
