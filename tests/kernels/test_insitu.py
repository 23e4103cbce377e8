"""Inside the training process: a candidate whose bytes changed since run start is refused, and a sampled
call is recomputed by the reference on the same tensors (a mismatch ends the trial as numerics_drift)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import torch

from infrarsi.adapters.megatron.log import classify_failure
from infrarsi.trial import TrialStatus
from infrarsi.kernels import verdicts
from infrarsi.kernels.insitu import SpotChecked
from infrarsi.kernels.loader import KERNELS_ROOT, load_candidate, load_reference, sha256_of

from .conftest import ADVERSARIAL, INSITU

TINY = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
        "--vocab-size", "128", "--global-batch-size", "2", "--micro-batch-size", "2", "--train-iters", "2"]
GOOD_FILE = KERNELS_ROOT / "rmsnorm" / "triton_rows.py"
GOOD = f"{GOOD_FILE}@rows16"  # one of the file's VARIANTS (kernels/loader.py)


def _train(kernel: str, env_extra: dict | None = None, iters: int = 2) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != verdicts.ENV}
    env.update({"TRITON_INTERPRET": "1", "INFRARSI_SPOT_EVERY": "1", **(env_extra or {})})
    argv = [*TINY[:-1], str(iters)]
    return subprocess.run([sys.executable, "-m", "infrarsi.workloads.minigpt", *argv, "--kernel", kernel],
                          capture_output=True, text=True, env=env, timeout=600)


def test_a_candidate_wrong_only_on_training_sized_batches_is_caught_in_situ():
    """many_rows_wrong.py passes every offline family (they have few rows) and is 1% off at 128 rows."""
    out = _train(f"rmsnorm={INSITU / 'many_rows_wrong.py'}")
    assert out.returncode == 3, out.stderr[-2000:]
    assert "infrarsi kernel spot check failed: rmsnorm=" in out.stderr and "forward" in out.stderr
    status, reason, evidence = classify_failure(out.stderr + out.stdout)
    assert status is TrialStatus.NUMERICS_DRIFT and "spot check" in reason
    assert verdicts.drifted(evidence)[0][:2] == ("rmsnorm", str(INSITU / "many_rows_wrong.py"))


def test_a_wrong_gradient_is_caught_in_backward():
    out = _train(f"rmsnorm={ADVERSARIAL / 'wrong_backward.py'}")
    assert out.returncode == 3, out.stderr[-2000:]
    assert "spot check failed" in out.stderr and "backward: gradient of argument" in out.stderr


def test_a_candidate_cannot_tell_a_checked_call_from_an_ordinary_one():
    """Class 3: watch_aware.py is exact when an argument's grad_fn is an infrarsi autograd Function (the old check
    wrapped the checked call's inputs in one) and rounds through bf16 otherwise. At the default rate (one of an op's
    first 8 calls, drawn after the call, then 1 in 50) it finds nothing to tell checked calls by: it rounds every
    call, and the check catches it within the first 8 (3 iterations x 3 norms = 9 calls): in the forward's output, or
    in the backward's gradients (its rounded output feeds them), whichever the drawn call checks first."""
    out = _train(f"rmsnorm={INSITU / 'watch_aware.py'}", {"INFRARSI_SPOT_EVERY": "50"}, iters=3)
    assert out.returncode == 3, out.stderr[-2000:]
    assert f"infrarsi kernel spot check failed: rmsnorm={INSITU / 'watch_aware.py'}" in out.stderr
    assert re.search(r"call [1-8]: (forward: output 0|backward: gradient of argument)", out.stderr), out.stderr[-2000:]


def test_a_checked_call_hands_the_candidate_the_callers_own_tensors():
    """What the candidate sees on a checked call (every call checked here) is what an unchecked call sees: the
    caller's tensor objects, and its outputs carry its own autograd node, no wrapper of the check's."""
    seen = []
    cand = load_candidate(GOOD)

    class Recorder:
        def forward(self, *args):
            seen.append(args)
            return cand.forward(*args)

    x0 = torch.randn(6, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    plain = cand.forward(x0 * 1.0, w, 1e-6)
    for every in (1, 0):  # checked on every call / never checked
        x = x0 * 1.0
        sc = SpotChecked("rmsnorm", str(GOOD), Recorder(), load_reference("rmsnorm"), every=every)
        y = sc.forward(x, w, 1e-6)
        assert seen[-1][0] is x and seen[-1][1] is w and type(x.grad_fn) is type((x0 * 1.0).grad_fn)
        assert type(y.grad_fn).__name__ == type(plain.grad_fn).__name__ and y.grad_fn.next_functions[0][0] is x.grad_fn
        y.sum().backward()
    assert sc.calls == 1 and x0.grad is not None


def test_the_workload_refuses_bytes_that_changed_since_run_start(tmp_path):
    cand = tmp_path / "rmsnorm" / "cand.py"
    cand.parent.mkdir()
    shutil.copy(GOOD_FILE, cand)
    f = verdicts.record(tmp_path / "run", {f"{cand}@rows16": {"op": "rmsnorm", "verdict": "pass",
                                                              "sha256": sha256_of(cand)}})
    cand.write_text(cand.read_text().replace("rstd[:, None] * w[None, :]", "rstd[:, None] * w[None, :] * 1.01", 1))
    out = _train(f"rmsnorm={cand}@rows16", {verdicts.ENV: str(f)})
    assert out.returncode == 2, out.stderr[-2000:]
    assert "infrarsi kernel refused: rmsnorm=" in out.stderr and "changed since it was verified" in out.stderr
    status, _, _ = classify_failure(out.stderr)
    assert status is TrialStatus.CONTRACT_VIOLATION


def test_disqualified_and_unverified_candidates_are_refused(tmp_path, monkeypatch):
    f = verdicts.record(tmp_path, {str(GOOD): {"op": "rmsnorm", "verdict": "pass", "sha256": sha256_of(GOOD)}})
    monkeypatch.setenv(verdicts.ENV, str(f))
    assert verdicts.refusal("rmsnorm", str(GOOD)) is None
    assert "never verified" in verdicts.refusal("rmsnorm", f"{GOOD_FILE}@rows4")  # another variant of the file

    class T:
        id = 7
        evidence = [f"{verdicts.DRIFT}: rmsnorm={GOOD} call 1: forward: output 0: 3 of 8 elements off"]

    assert verdicts.after_trial(tmp_path, T()) == [str(GOOD)]
    assert "disqualified" in verdicts.refusal("rmsnorm", str(GOOD))
    assert verdicts.after_trial(tmp_path, T()) == []  # once
    # a resumed run re-records its verdicts: the disqualification stays for the same bytes
    verdicts.record(tmp_path, {str(GOOD): {"op": "rmsnorm", "verdict": "pass", "sha256": sha256_of(GOOD)}})
    assert "disqualified" in verdicts.refusal("rmsnorm", str(GOOD))


def test_an_honest_candidate_survives_checking_every_call():
    sc = SpotChecked("rmsnorm", str(GOOD), load_candidate(GOOD), load_reference("rmsnorm"), every=1)
    x = torch.randn(6, 64, requires_grad=True)
    w = torch.randn(64, requires_grad=True)
    for _ in range(3):
        y = sc.forward(x, w, 1e-6)
        y.sum().backward()
    assert sc.checked == 3 and x.grad is not None and w.grad is not None
    want = torch.autograd.grad(load_reference("rmsnorm").forward(x, w, 1e-6).sum(), (x,))[0]
    assert torch.allclose(x.grad, 3 * want, atol=1e-4)  # the check's hooks leave the gradients as they are


def test_the_run_stage_marks_a_drifted_candidate_in_its_record(tmp_path):
    from rich.console import Console

    from infrarsi.kernels.space import after_trial

    verdicts.record(tmp_path, {str(GOOD): {"op": "rmsnorm", "verdict": "pass", "sha256": sha256_of(GOOD)}})
    kv = {str(GOOD): {"verdict": "pass", "reasons": [], "sha256": sha256_of(GOOD)}}

    class T:
        id = 3
        evidence = [f"{verdicts.DRIFT}: rmsnorm={GOOD} call 51: forward: output 0: 9 of 4096 elements off"]

    err = Console(stderr=True, record=True)
    after_trial(tmp_path, T(), err, kv)
    assert kv[str(GOOD)]["verdict"] == "disqualified" and "trial 3" in kv[str(GOOD)]["reasons"][0]
    assert "disqualified for this run" in err.export_text()


def test_a_candidate_that_skips_triton_in_training_is_caught_by_how_it_computes():
    """host_in_training.py launches Triton on the verifier's few rows and computes right values with torch on the
    host on training's 128 rows: every spot check passes; the watch on every training call does not."""
    out = _train(f"rmsnorm={INSITU / 'host_in_training.py'}", {"INFRARSI_SPOT_EVERY": "50"})
    assert out.returncode == 3, out.stderr[-2000:]
    assert f"infrarsi kernel spot check failed: rmsnorm={INSITU / 'host_in_training.py'} call 1" in out.stderr
    assert "launched no Triton kernel on training's tensors" in out.stderr or "on the host" in out.stderr
    status, _, _ = classify_failure(out.stderr + out.stdout)
    assert status is TrialStatus.NUMERICS_DRIFT


def test_a_backward_wrong_in_training_but_right_when_it_sees_the_check_is_caught():
    """Issue 66 class 6: backward_wrong_unless_checked.py passes every offline check; in training its backward hands back
    half again the gradient unless it finds the check's fp64 copies alive. The backward check is drawn after the backward ran, from
    what every call's hooks kept (no copy exists before the draw): nothing tells a checked backward from another."""
    out = _train(f"rmsnorm={INSITU / 'backward_wrong_unless_checked.py'}", {"INFRARSI_SPOT_EVERY": "50"}, iters=3)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "spot check failed" in out.stderr and "backward: gradient of argument" in out.stderr, out.stderr[-2000:]


def test_a_backward_computed_on_the_host_in_training_is_caught_by_how_it_computes():
    """Issue 66 class 6: backward_on_host.py launches Triton in backward on the verifier's rows and computes with numpy
    on training's 128 rows (right values): the watch on every backward call ends the trial."""
    out = _train(f"rmsnorm={INSITU / 'backward_on_host.py'}", {"INFRARSI_SPOT_EVERY": "50"})
    assert out.returncode == 3, out.stderr[-2000:]
    assert "backward launched no Triton kernel" in out.stderr or "backward computed with torch on the host" in \
        out.stderr, out.stderr[-2000:]
