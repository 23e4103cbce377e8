"""Real torchtitan 0.2.2 trials on this CPU, through the adapter, the runner and the local executor.

Each test trains llama3's debug model for a few steps with torchrun (2 ranks, gloo), from the tokenizer
and dataset built from the project's own text (contracts/torchtitan-cpu/assets). Sizes are small so the
two default tests take about half a minute on 2 cores; the SIGKILL resume (two torchtitan launches, ~20-30 s)
runs with ``-m slow``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from infrarsi.adapters.torchtitan import TorchtitanAdapter
from infrarsi.contract.model import Contract, load_contract
from infrarsi.execute import make_executor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus

# find_spec, not importorskip: importing torchtitan here would import triton into the test process before the
# kernel tests set TRITON_INTERPRET=1 (the trials import it in their own processes)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                                reason="the torchtitan extra is not installed (pip install -e '.[torchtitan]')")

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "contracts" / "torchtitan-cpu" / "llama3_cpu.toml"
ASSETS = ROOT / "contracts" / "torchtitan-cpu" / "assets"


def entrypoint(tmp: Path, *, seq: int, gbs: int, local: int, steps: int, extra: str = "") -> str:
    """The repository's job file with a smaller size; every path absolute, so any working directory works."""
    return (f"torchrun --nproc-per-node=2 -m torchtitan.train --job.config_file {JOB} "
            f"--model.hf_assets_path {ASSETS / 'tokenizer'} --training.dataset_path {ASSETS / 'data'} "
            f"--job.dump_folder {tmp / 'outputs'} --training.seq_len {seq} --training.global_batch_size {gbs} "
            f"--training.local_batch_size {local} --training.steps {steps} {extra}").strip()


def contract_dict(tmp: Path, *, cap_gib: float, steps: int = 4, **size) -> dict:
    return {
        "name": "tt-test",
        "workload": {"adapter": "torchtitan", "entrypoint": entrypoint(tmp, steps=steps, **size)},
        "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": cap_gib},
        "invariants": {"timing": {"warmup_steps": 1, "measured_steps": 2, "timeout_s": 180},
                       "loss": {"compare_steps": steps, "rtol": 0.02}},
        "scope": {"knobs": {"recompute_granularity": ["none", "selective", "full"], "micro_batch_size": [1, 2, 4, 8]}},
    }


def run_trials(tmp: Path, contract: Contract, settings: list[dict]):
    with Runner(RunRecord(tmp / "run"), make_executor(), TorchtitanAdapter(), contract) as r:
        return [r.submit(s).result() for s in settings]


def test_fsdp_two_rank_trial_trains_and_is_measured(tmp_path):
    c = Contract.model_validate(contract_dict(tmp_path, cap_gib=4.0, seq=128, gbs=4, local=2))
    (t,) = run_trials(tmp_path, c, [{}])
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    m = t.metrics
    # step time = tokens per step / (tps x world): 4 x 128 tokens over 2 ranks; median of steps 2..3
    assert m.step_time_s is not None and 0.01 < m.step_time_s < 30
    assert len(m.losses) == 4 and 7.0 < m.losses[0] < 8.5 and m.losses[-1] < m.losses[0]  # ln(2048) = 7.62
    assert m.peak_memory_bytes is not None and 0.5 * 2**30 < m.peak_memory_bytes < 4 * 2**30
    cmd = (tmp_path / "run" / "trials" / str(t.id) / "command").read_text()
    assert "launchers/torchtitan_cpu.py" in cmd and "-m torch.distributed.run --standalone" in cmd
    assert "parallelism" not in cmd.split("--job.dump_folder")[1]  # the job's own FSDP layout, unchanged
    out = (tmp_path / "run" / "trials" / str(t.id) / "stdout").read_text()
    assert "Applied FSDP to the model" in out


def test_a_setting_over_the_memory_cap_is_a_real_oom(tmp_path):
    # seq 512, local batch 8, no activation checkpointing peaks near 2.0 GiB of data segment per rank;
    # the start-up (torch, gloo, the dataset) fits in 1.75 GiB, the first forward does not.
    c = Contract.model_validate(contract_dict(tmp_path, cap_gib=1.75, steps=2, seq=512, gbs=16, local=8))
    (t,) = run_trials(tmp_path, c, [{"recompute_granularity": "none", "micro_batch_size": 8}])
    assert t.status is TrialStatus.OOM, (t.reason, t.evidence)
    assert any("DefaultCPUAllocator: can't allocate memory" in e for e in t.evidence)
    assert t.metrics.step_time_s is None


RUN_ONE = textwrap.dedent("""
    import sys
    from infrarsi.adapters.torchtitan import TorchtitanAdapter
    from infrarsi.contract.model import load_contract
    from infrarsi.execute import make_executor
    from infrarsi.execute.record import RunRecord
    from infrarsi.execute.runner import Runner
    c = load_contract(sys.argv[1])
    with Runner(RunRecord(sys.argv[2]), make_executor(), TorchtitanAdapter(), c) as r:
        r.submit({}).result()
""")


def _write_contract(path: Path, d: dict) -> None:
    def val(v):
        return json.dumps(v) if not isinstance(v, dict) else "{" + ", ".join(f"{k} = {val(x)}" for k, x in v.items()) + "}"

    lines = [f'name = {json.dumps(d["name"])}']
    for sec in ("workload", "hardware"):
        lines.append(f"[{sec}]")
        lines += [f"{k} = {val(v)}" for k, v in d[sec].items()]
    for sub, body in d["invariants"].items():
        lines.append(f"[invariants.{sub}]")
        lines += [f"{k} = {val(v)}" for k, v in body.items()]
    lines.append("[scope.knobs]")
    lines += [f"{k} = {val(v)}" for k, v in d["scope"]["knobs"].items()]
    path.write_text("\n".join(lines) + "\n")


# Slow: an end-to-end repeat, on torchtitan, of what default tests check on cheaper workloads. A runner killed with
# SIGKILL resumes its trial under the same id as attempt 1, finished ok, nothing left running:
#   tests/execute/test_runner.py::test_resume_after_kill_9_requeues_local_trials_and_keeps_finished_ones (toy),
#   tests/doctor/test_doctor_stage.py::test_doctor_on_minigpt_resumes_after_kill_9_and_prints_json (real minigpt).
# The ranks torchrun starts outside the trial's process group die with the runner, or are ended by token on resume:
#   tests/execute/test_orphans.py.
# A real torchtitan trial through the runner: test_fsdp_two_rank_trial_trains_and_is_measured (above).
@pytest.mark.slow
def test_a_trial_killed_with_its_runner_by_sigkill_resumes_under_the_same_id(tmp_path):
    d = contract_dict(tmp_path, cap_gib=4.0, steps=4, seq=128, gbs=4, local=2)
    cpath = tmp_path / "c.toml"
    _write_contract(cpath, d)
    run_dir = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", RUN_ONE, str(cpath), str(run_dir)], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stdout = run_dir / "trials" / "0" / "stdout"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "step:  1" not in (stdout.read_text() if stdout.exists() else ""):
        time.sleep(0.5)
    assert "step:  1" in stdout.read_text(), "the first trial never reached step 1"
    os.kill(child.pid, signal.SIGKILL)  # the runner dies mid-trial; its torchrun group is left behind
    child.wait()
    record = RunRecord(run_dir)
    assert [t.id for t in record.running()] == [0]
    c = load_contract(cpath)
    with Runner(record, make_executor(), TorchtitanAdapter(), c) as r:
        (fut,) = r.resume()
        t = fut.result()
    assert t.id == 0 and t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert len(t.metrics.losses) == 4 and record.running() == []
    info = json.loads((run_dir / "trials" / "0" / "launch.json").read_text())
    assert info.get("attempt") == 1
