"""A real megatron-core trial on this CPU (2 gloo processes, pipeline parallel 2) through the Megatron adapter, the
runner and the local executor, and the run stage's memory offset for it: megatron-core's fake step, within 10% of
the peak the trial measured. About 40 s on 2 cores; the shipped contracts' estimates and the micro-batch cap check
run with ``-m slow`` (tests/estimate/test_megatron.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infrarsi.adapters.megatron import MegatronAdapter
from infrarsi.adapters.megatron.log import parse_log
from infrarsi.contract.model import Contract
from infrarsi.execute import make_executor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "tests" / "fixtures" / "megatron_cpu" / "tiny_pp2.sh"


def tiny_contract() -> Contract:
    return Contract.model_validate({
        "name": "megatron-tiny",
        "workload": {"adapter": "megatron", "launch": str(LAUNCH), "script_env": {"REPO": str(ROOT)}},
        "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 3.0},
        "invariants": {"timing": {"warmup_steps": 1, "measured_steps": 2, "timeout_s": 240},
                       "loss": {"compare_steps": 3, "rtol": 0.05}},
        "scope": {"knobs": {"pipeline_parallel": [1, 2], "tensor_parallel": [1, 2], "data_parallel": [1, 2],
                            "micro_batch_size": [1, 2]}},
        "baseline": {"pipeline_parallel": 2, "tensor_parallel": 1, "data_parallel": 1, "micro_batch_size": 1}})


def test_pipeline_parallel_trial_trains_and_the_offset_prices_it_within_ten_percent(tmp_path):
    from infrarsi.estimate.choice import memory_estimate

    contract = tiny_contract()
    adapter = MegatronAdapter()
    with Runner(RunRecord(tmp_path / "run"), make_executor(), adapter, contract) as r:
        t = r.submit(dict(contract.baseline)).result()
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    m = t.metrics
    assert len(m.losses) == 3 and 5.0 < m.losses[0] < 6.0  # ln(256) = 5.55 at initialisation
    assert m.step_time_s is not None and m.step_time_s > 0
    assert set(m.peak_memory_by_rank) == {0, 1}  # both pipeline stages report their peak data segment
    cmd = (tmp_path / "run" / "trials" / str(t.id) / "command").read_text()
    assert "-m torch.distributed.run --standalone" in cmd and "launchers/pretrain_gpt_cpu.py" in cmd
    assert "--pipeline-model-parallel-size 2" in cmd

    space = adapter.knob_space(contract)
    setting = space.complete(dict(contract.baseline))
    offset = memory_estimate(space, contract)  # the run stage's memory offset for this contract
    assert offset.basis(setting) == "fake step"
    est = offset(setting)
    assert abs(est / m.peak_memory_bytes - 1) < 0.10, (est / 2**20, m.peak_memory_bytes / 2**20)

    # what the report prints per trial: the figure the tuner priced the setting at, and its basis
    from infrarsi.priors.offline import offline_priors
    from infrarsi.search.record import fitted
    from infrarsi.search import Outcome, Tuner

    tuner = Tuner(space, memory_capacity_bytes=contract.hardware.memory_capacity_bytes, seed=0, memory_estimate=offset,
                  priors=offline_priors(space, workload={}, hardware=contract.hardware.model_dump()))
    tuner.tell(setting, Outcome("ok", step_time_s=m.step_time_s, peak_memory_bytes=m.peak_memory_bytes))
    assert fitted(tuner).estimate[setting.key()] == (est, "fake step")


@pytest.mark.slow
def test_layouts_start_from_the_same_weights_with_cpu_initialization(tmp_path):
    """--use-cpu-initialization and one seed per layer: TP 2, DP 2 and PP 2 train the same model (the referee's
    exact band holds them); without it megatron-core draws per TP shard and per stage."""
    import subprocess
    import sys

    traces = {}
    for layout in (["--tensor-model-parallel-size", "2", "--sequence-parallel"], [],
                   ["--pipeline-model-parallel-size", "2"]):
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(ROOT / "launchers" / "pretrain_gpt_cpu.py"), "--num-layers", "4", "--hidden-size", "64",
                "--num-attention-heads", "4", "--seq-length", "64", "--vocab-size", "256", "--swiglu",
                "--normalization", "RMSNorm", "--disable-bias-linear", "--attention-dropout", "0.0",
                "--hidden-dropout", "0.0", "--micro-batch-size", "1", "--global-batch-size", "4", "--train-iters", "2",
                "--bf16", "--seed", "1234", "--use-cpu-initialization", *layout]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        log = parse_log(p.stdout)
        assert p.returncode == 0 and log.iterations, p.stderr[-2000:]
        traces[" ".join(layout) or "DP 2"] = [(it.loss, it.grad_norm) for it in log.iterations]
    ref = traces.pop("DP 2")
    for name, trace in traces.items():
        for (loss, gn), (rloss, rgn) in zip(trace, ref):
            assert abs(loss / rloss - 1) < 1e-4 and abs(gn / rgn - 1) < 2e-3, (name, trace, ref)
