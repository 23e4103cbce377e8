"""Hole 1: a kernel candidate that prints its own Megatron-style `elapsed time per iteration` lines.

The candidate is a correct RMSNorm that also prints, during each iteration, a forged line for the
previous one claiming 10 ms (the parser keeps the last line of an iteration, so the forgery wins the
log). The harness's clock (arrival times of the lines through its pipe) says otherwise: the trial is
invalid, with both numbers, and the doctor stops on it.
"""

import pytest

from .conftest import tiny

FORGED = ' iteration {it:8d}/       6 | consumed samples: {s:12d} | elapsed time per iteration (ms): 10.0 | ' \
         'global batch size:     4 | number of skipped iterations:   0 | number of nan iterations:   0 |'

LATE = '''"""RMSNorm, correct, plus forged iteration lines (one per iteration, printed after the real one)."""
import torch

_calls = [0]
CALLS_PER_ITERATION = 12  # rmsnorm runs 3 times per micro-batch (1 layer: two norms + the final one) x 4 micro-batches


def forward(x, w, eps):
    n = _calls[0]
    _calls[0] += 1
    if n and n % CALLS_PER_ITERATION == 0:
        it = n // CALLS_PER_ITERATION
        print(FORGED.format(it=it, s=4 * it), flush=True)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
'''

BURST = '''"""RMSNorm, correct, plus a burst of forged iteration lines when the process exits."""
import atexit

import torch


def _forge():
    for it in range(1, 7):
        print(FORGED.format(it=it, s=4 * it), flush=True)


atexit.register(_forge)


def forward(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
'''


def _doctor_with(cli, project, source):
    (project / "kernels/rmsnorm").mkdir(parents=True)
    (project / "kernels/rmsnorm/fast.py").write_text(f"FORGED = {FORGED!r}\n" + source)
    # The candidates compute with plain torch: the in-trial kernel watch is off (INFRARSI_SPOT_EVERY=0), so the
    # harness's clock is what judges them, as the loss referee's tests do for theirs.
    text = tiny(knobs='kernel_rmsnorm = ["kernels/rmsnorm/fast.py"]', baseline='kernel_rmsnorm = "kernels/rmsnorm/fast.py"')
    (project / "c.toml").write_text(text.replace('adapter = "minigpt"',
                                                 'adapter = "minigpt"\nenv = { INFRARSI_SPOT_EVERY = "0" }'))
    assert cli("init", "c.toml", "--run-dir", "run").returncode == 0
    return cli("doctor", "--run-dir", "run")


def _forgery_caught(r, project):
    assert r.returncode == 1, r.stdout + r.stderr
    # The forged line for an iteration follows the real one: the iteration is reported twice (the harness's time is
    # scored in any case, so the forged 10 ms could not win even alone).
    assert "ended invalid: iteration " in r.err and "was reported twice" in r.err, r.stderr
    stdout = (project / "run/trials/0/stdout").read_text()
    assert "elapsed time per iteration (ms): 10.0" in stdout  # the forged lines are in the log, and were not believed


def test_forged_iteration_lines_fail_the_trial_with_both_numbers(cli, project):
    _forgery_caught(_doctor_with(cli, project, LATE), project)


@pytest.mark.slow
def test_a_burst_of_forged_lines_at_exit_fails_the_trial(cli, project):
    _forgery_caught(_doctor_with(cli, project, BURST), project)


PACED = '''"""RMSNorm, correct; the real iteration lines are held back and replayed when the process exits, each claiming
50 ms and printed 50 ms after the one before: the arrival gaps match the claim, the process only sleeps."""
import atexit
import re
import sys
import time

import torch

_held = []


class _Hold:
    def __init__(self, inner):
        self.inner = inner

    def write(self, text):
        if "elapsed time per iteration" in text:
            _held.append(re.sub(r"per iteration \\(ms\\): [0-9.]+", "per iteration (ms): 50.0", text))
            return len(text)
        return self.inner.write(text)

    def __getattr__(self, name):
        return getattr(self.inner, name)


sys.stdout = _Hold(sys.stdout)


def _replay():
    for line in _held:
        sys.stdout.inner.write(line + "\\n")
        sys.stdout.inner.flush()
        time.sleep(0.050)


atexit.register(_replay)


def forward(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
'''


def test_a_forger_that_paces_its_lines_is_caught_by_the_cpu_it_did_not_use(cli, project):
    r = _doctor_with(cli, project, PACED)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "its lines were paced, not computed" in r.err, r.stderr
    stdout = (project / "run/trials/0/stdout").read_text()
    assert stdout.count("elapsed time per iteration (ms): 50.0") == 6  # the whole log is the replay
