"""A kernel candidate really replaces torchtitan's llama3 RMSNorm, through the launcher's patch hook.

The trials are real (torchtitan 0.2.2, 1 rank, a tiny size: the candidate runs in Triton's CPU
interpreter). Proof that the patch did something: each rank prints how often the candidate's forward ran
inside torchtitan's model, with the sha256 of the file it loaded; the loss trace stays within the
contract's tolerance of the unpatched run, and a deliberately wrong candidate breaks it.
"""

from __future__ import annotations

import importlib.util
import hashlib
import re
from pathlib import Path

import pytest

from infrarsi.adapters.torchtitan import TorchtitanAdapter
from infrarsi.contract.model import Contract
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
CANDIDATE_FILE = ROOT / "kernels" / "rmsnorm" / "triton_rows.py"
CANDIDATE = f"{CANDIDATE_FILE}@rows16"  # one of the file's VARIANTS (kernels/loader.py)
PATCH_LINE = re.compile(r"\[infrarsi-patch\] rmsnorm (\S+) sha256=([0-9a-f]{64}) calls=(\d+)")


def contract(tmp: Path, candidates: list[str]) -> Contract:
    ep = (f"torchrun --nproc-per-node=1 -m torchtitan.train --job.config_file {JOB} "
          f"--model.hf_assets_path {ASSETS / 'tokenizer'} --training.dataset_path {ASSETS / 'data'} "
          f"--job.dump_folder {tmp / 'outputs'} --training.seq_len 32 --training.global_batch_size 1 "
          f"--training.local_batch_size 1 --training.steps 2 --activation_checkpoint.mode none")
    return Contract.model_validate({
        "name": "tt-patch",
        "workload": {"adapter": "torchtitan", "entrypoint": ep},
        "hardware": {"kind": "cpu", "devices": 1, "memory_capacity_gib": 4.0},
        "invariants": {"timing": {"warmup_steps": 1, "measured_steps": 1, "timeout_s": 240},
                       "loss": {"compare_steps": 2, "rtol": 0.02}},
        "scope": {"knobs": {"kernel_rmsnorm": candidates}},
    })


def patch_report(tmp: Path, trial_id: int) -> tuple[str, str, int]:
    err = (tmp / "run" / "trials" / str(trial_id) / "stderr").read_text()
    m = PATCH_LINE.search(err)
    assert m, "the patch hook printed no report: the candidate was not installed"
    return m.group(1), m.group(2), int(m.group(3))


def _trials(tmp: Path, c: Contract, settings: list[dict]):
    with Runner(RunRecord(tmp / "run"), make_executor(), TorchtitanAdapter(), c) as r:
        base = r.submit({"kernel_rmsnorm": "reference"}).result()
        assert base.status is TrialStatus.OK, (base.reason, base.evidence)
        return base, [r.submit(s, reference_losses=base.metrics.losses).result() for s in settings]


@pytest.mark.slow  # ~1.5 min on 2 idle cores: two trainings, one through Triton's CPU interpreter
def test_a_verified_rmsnorm_candidate_runs_inside_torchtitans_forward(tmp_path):
    c = contract(tmp_path, ["reference", CANDIDATE])
    base, (patched,) = _trials(tmp_path, c, [{"kernel_rmsnorm": CANDIDATE}])
    assert "[infrarsi-patch]" not in (tmp_path / "run" / "trials" / str(base.id) / "stderr").read_text()
    assert patched.status is TrialStatus.OK, (patched.reason, patched.evidence)  # the loss referee passed it
    path, sha, calls = patch_report(tmp_path, patched.id)
    assert path == CANDIDATE and sha == hashlib.sha256(CANDIDATE_FILE.read_bytes()).hexdigest()
    # 6 layers x 2 norms + the final norm, once per forward, 2 steps (no activation checkpointing)
    assert calls == 13 * 2
    assert len(patched.metrics.losses) == 2
    for a, b in zip(base.metrics.losses, patched.metrics.losses):
        assert b == pytest.approx(a, rel=0.02)


WRONG = '''
"""RMSNorm, wrong on purpose: the reference times 4."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("ref", Path({ref!r}))
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)


def forward(x, weight, eps=1e-6):
    return _ref.forward(x, weight, eps) * 4.0
'''


@pytest.mark.slow
def test_a_wrong_candidate_inside_torchtitan_breaks_the_loss_invariant(tmp_path, monkeypatch):
    monkeypatch.setenv("INFRARSI_SPOT_EVERY", "0")  # the loss referee alone (a spot check would stop it at call 1)
    wrong = tmp_path / "kernels" / "rmsnorm" / "wrong_x4.py"
    wrong.parent.mkdir(parents=True)
    wrong.write_text(WRONG.format(ref=str(ROOT / "kernels" / "rmsnorm" / "reference.py")))
    c = contract(tmp_path, ["reference", str(wrong)])
    base, (bad,) = _trials(tmp_path, c, [{"kernel_rmsnorm": str(wrong)}])
    assert patch_report(tmp_path, bad.id)[2] == 13 * 2
    assert bad.status is TrialStatus.NUMERICS_DRIFT, (bad.status, bad.reason, bad.metrics.losses, base.metrics.losses)


# The hook itself, in a fresh process (the candidate's triton must import in interpreter mode): install the
# patch as the launcher does, build torchtitan's own llama3 norm and call it on a training-sized batch.
HOOK = '''
import sys
sys.path.insert(0, {launchers!r})
import torch
import torchtitan_patches
torchtitan_patches.install_from_env()
import torchtitan.models.llama3.model.model as llama3_model
norm = llama3_model.nn.RMSNorm(64, eps=1e-6)
x = torch.randn(2 * 64, 64, requires_grad=True)  # 2 sequences x 64 tokens: more rows than any verifier family
for _ in range(3):
    norm(x).sum().backward()
print("calls", torchtitan_patches.CALLS["rmsnorm"])
'''


def _hook(candidate: Path | str, every: str) -> "subprocess.CompletedProcess":
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("INFRARSI_KERNEL_VERDICTS", "TRITON_INTERPRET")}
    env.update({"INFRARSI_PATCHES": json.dumps({"rmsnorm": str(candidate)}), "INFRARSI_SPOT_EVERY": every,
                "PYTHONPATH": str(ROOT)})
    return subprocess.run([sys.executable, "-c", HOOK.format(launchers=str(ROOT / "launchers"))], capture_output=True,
                          text=True, env=env, timeout=300)


def test_the_hook_spot_checks_a_candidate_that_cheats_on_training_sized_batches():
    """many_rows_wrong.py passes every offline check and is 1% off at 128 rows: every call is checked here
    (INFRARSI_SPOT_EVERY=1; by default one of an op's first 8 calls, drawn, and 1 in 50 after)."""
    from infrarsi.adapters.torchtitan.log import classify_torchtitan_failure
    from infrarsi.kernels import verdicts

    cheat = ROOT / "tests" / "kernels" / "insitu" / "many_rows_wrong.py"
    out = _hook(cheat, "1")
    assert out.returncode == 3, out.stderr[-2000:]
    assert f"infrarsi kernel spot check failed: rmsnorm={cheat} call 1: forward" in out.stderr
    status, reason, evidence = classify_torchtitan_failure(out.stderr)
    assert status is TrialStatus.NUMERICS_DRIFT and "spot check" in reason
    assert verdicts.drifted(evidence)[0][:2] == ("rmsnorm", str(cheat))  # what the run stage disqualifies


def test_the_hook_lets_an_honest_candidate_through_every_checked_call():
    out = _hook(CANDIDATE, "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "calls 3" in out.stdout and "spot check failed" not in out.stderr


@pytest.mark.slow
def test_a_wrong_candidate_inside_torchtitan_is_caught_by_the_spot_check(tmp_path):
    """The default policy: one of the first 8 calls (drawn) is recomputed by the reference, so the trial ends in
    its first steps as numerics_drift, with the line the run stage disqualifies the candidate by."""
    from infrarsi.kernels import verdicts

    wrong = tmp_path / "kernels" / "rmsnorm" / "wrong_x4.py"
    wrong.parent.mkdir(parents=True)
    wrong.write_text(WRONG.format(ref=str(ROOT / "kernels" / "rmsnorm" / "reference.py")))
    c = contract(tmp_path, ["reference", str(wrong)])
    _, (bad,) = _trials(tmp_path, c, [{"kernel_rmsnorm": str(wrong)}])
    assert bad.status is TrialStatus.NUMERICS_DRIFT and "spot check" in bad.reason, (bad.status, bad.reason)
    assert verdicts.drifted(bad.evidence)[0][:2] == ("rmsnorm", str(wrong))
    assert re.search(r"call [1-8]: forward", (tmp_path / "run" / "trials" / str(bad.id) / "stderr").read_text())
