"""Class 7 of the isolation issue: the harness must not fail an honest user. A user's Megatron-style training script
that draws carriage-return progress bars and writes checkpoints and TensorBoard files where its flags say (folders
of its repository), tuned with ``infrarsi tune ... > tune.log`` from a folder that is not a git work tree: every
trial is ok -- the adapter points the outputs into each trial's directory, the clock cuts lines as the pipe does,
and the runner's own log is nobody's business but the user's."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

CONTRACT = """name = "honest"
[workload]
adapter = "megatron"
entrypoint = "python train.py"
args = { num_layers = 2, hidden_size = 32, num_attention_heads = 4, seq_length = 32, global_batch_size = 8, train_iters = 6, lr = 0.05, seed = 1, save = "checkpoints", save_interval = 2, tensorboard_dir = "tb" }
[hardware]
devices = 1
memory_capacity_gib = 2.0
[invariants.timing]
warmup_steps = 2
measured_steps = 4
timeout_s = 60
[invariants.loss]
compare_steps = 6
seed_runs = 0
[scope.knobs]
micro_batch_size = [1, 4]
[budget]
max_trials = 1
doctor_repeats = 2
confirm_speedup = 100.0  # not a test of the noise: a loaded machine must not stop it at the doctor
"""


def test_an_honest_job_with_progress_bars_checkpoints_and_tensorboard_is_ok_with_tune_logged_to_a_file(env, project):
    shutil.copy(Path(__file__).parent / "honest" / "train.py", project / "train.py")
    (project / "c.toml").write_text(CONTRACT)
    assert subprocess.run(["git", "-C", str(project), "rev-parse"], capture_output=True).returncode != 0  # no git
    with open(project / "tune.log", "w") as log:
        r = subprocess.run([sys.executable, "-m", "infrarsi.cli", "tune", "c.toml", "--run-dir", "run"], cwd=project,
                           env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600)
    text = " ".join((project / "tune.log").read_text().split())  # rich wraps long lines: compare on one line
    # every stage ran; the run may promote nothing (two pairs on a loaded machine may not clear the noise): exit 3
    assert r.returncode == 0 or (r.returncode == 3 and "tune: finished without a promotion" in text), text[-3000:]
    trials = [json.loads(p.read_text()) for p in sorted((project / "run" / "trials").glob("*/trial.json"))]
    assert len(trials) >= 6 and {t["status"] for t in trials} == {"ok"}, \
        [(t["id"], t["status"], t["reason"]) for t in trials if t["status"] != "ok"]
    assert all(t["warnings"] == [] for t in trials)  # isolated, every one
    assert "candidate(s) promoted" in text and "wrote outside" not in text
    # the job's outputs went to each trial's own folder, not into the repository
    assert not (project / "checkpoints").exists() and not (project / "tb").exists()
    for t in trials:
        out = project / t["path"] / "outputs"
        assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "6"
        assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 1
        assert (project / t["path"] / "stdout").read_bytes().count(b"\r") >= 20  # its progress bars
    assert sorted(p.name for p in project.iterdir()) == ["c.toml", "run", "train.py", "tune.log"]


def test_without_isolation_the_runners_own_log_in_the_working_directory_is_not_the_trials(tmp_path, monkeypatch):
    """The repository guard of an unisolated trial (the second line, where a machine has no bwrap) leaves alone the
    files the runner itself holds open for writing: `infrarsi tune ... > tune.log` in the working directory."""
    import threading
    import time

    sys.path.insert(0, str(ROOT / "tests" / "execute"))
    from toy import ToyAdapter, toy_contract

    from infrarsi.execute.local import LocalExecutor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner

    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    done = threading.Event()
    with open(project / "tune.log", "w") as log:  # what the shell's `> tune.log` gives the runner

        def chatter():
            while not done.is_set():
                log.write("trial running\n")
                log.flush()
                time.sleep(0.01)

        writer = threading.Thread(target=chatter)
        writer.start()
        try:
            with Runner(RunRecord(project / "run"), LocalExecutor(LocalExecutor.Config(isolation=False)), ToyAdapter(),
                        toy_contract()) as runner:
                (t,) = runner.run([{"mode": "ok", "step_ms": 100}])
        finally:
            done.set()
            writer.join()
    assert t.status.value == "ok", (t.reason, t.evidence)
    assert t.warnings and t.warnings[0].startswith("ran without isolation")
