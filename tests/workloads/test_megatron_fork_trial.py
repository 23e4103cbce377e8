"""A fork's launch tuned without editing its flags, for real: the fork's pretrain_gpt.py adds
--data-mix-temperature and --log-grad-histograms through extra_args_provider and trains (the project's CPU
megatron-core trainer, whose parser takes the provider as Megatron-LM's parse_args does: strictly). A trial at a
setting other than the launch's runs through the Megatron adapter, the runner and the local executor: it trains, and
its command holds the fork's flags as written. 40-60 s on 2 loaded cores, so it runs with ``-m slow``; in the
default run its parts are covered by tests/workloads/test_megatron_gpt.py (a real trial of the same trainer),
tests/workloads/test_megatron_model.py::test_a_programs_extra_args_provider_adds_flags_the_training_loop_then_parses_strictly
and tests/adapters/megatron/test_flags.py::test_extra_args_provider_flags_are_the_programs_own."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.adapters.megatron import MegatronAdapter
from infrarsi.contract.model import Contract
from infrarsi.execute import make_executor
from infrarsi.execute.record import RunRecord
from infrarsi.execute.runner import Runner
from infrarsi.trial import TrialStatus

ROOT = Path(__file__).resolve().parents[2]
FORK = ROOT / "tests" / "fixtures" / "megatron_fork" / "provider_fork"


def fork_contract() -> Contract:
    return Contract.model_validate({
        "name": "megatron-fork",
        "workload": {"adapter": "megatron", "launch": str(FORK / "train.sh"), "cwd": str(FORK),
                     "script_env": {"REPO": str(ROOT)}},
        "hardware": {"kind": "cpu", "devices": 2, "memory_capacity_gib": 3.0},
        "invariants": {"timing": {"warmup_steps": 1, "measured_steps": 2, "timeout_s": 240},
                       "loss": {"compare_steps": 3, "rtol": 0.05}},
        "scope": {"knobs": {"pipeline_parallel": [1, 2], "tensor_parallel": [1, 2], "data_parallel": [1, 2],
                            "micro_batch_size": [1, 2]}},
        "baseline": {"pipeline_parallel": 2, "tensor_parallel": 1, "data_parallel": 1, "micro_batch_size": 1}})


@pytest.mark.slow
def test_a_forks_launch_trains_at_a_tuned_setting_with_its_own_flags_as_written(tmp_path):
    contract = fork_contract()
    adapter = MegatronAdapter()
    parsed = adapter.parsed(contract)
    assert parsed.warnings == [] and "extra_args_provider add_fork_args" in parsed.flags_from
    setting = {"pipeline_parallel": 1, "tensor_parallel": 2, "data_parallel": 1, "micro_batch_size": 2}
    with Runner(RunRecord(tmp_path / "run"), make_executor(), adapter, contract) as r:
        t = r.submit(setting).result()
    assert t.status is TrialStatus.OK, (t.reason, t.evidence)
    assert len(t.metrics.losses) == 3 and 5.0 < t.metrics.losses[0] < 6.0  # ln(256) = 5.55 at initialisation
    cmd = (tmp_path / "run" / "trials" / str(t.id) / "command").read_text()
    assert "pretrain_gpt.py" in cmd and "pretrain_gpt_cpu.py" not in cmd  # the fork's own program ran
    assert "--data-mix-temperature 0.7 --log-grad-histograms" in cmd  # its flags, byte for byte
    assert "--tensor-model-parallel-size 2" in cmd and "--pipeline-model-parallel-size 2" not in cmd
