"""The verifier: every shipped candidate passes; every adversary is rejected for its own reason."""

from __future__ import annotations

import hashlib

import shutil
import subprocess
import sys
import time

import pytest
import torch

from infrarsi.kernels.loader import OPS, list_candidates, load_candidate, load_reference
from infrarsi.kernels.verify import Settings, _Snapshot, verify

from .conftest import ADVERSARIAL

SHIPPED = [p for op in OPS for p in list_candidates(op)]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_candidate_passes(path):
    result = verify(path)
    assert result.verdict == "pass", result.reasons
    assert result.reasons == []
    ref = load_reference(path.parent.name)
    covered = {(c.family, c.dtype) for c in result.cases}
    assert covered == {(f, str(d).removeprefix("torch.")) for f in ref.FAMILIES for d in ref.DTYPES}
    assert len({c.seed for c in result.cases}) >= 5  # fresh seeds, never one fixed input
    for case in result.cases:  # every output and every gradient was compared, within tolerance
        assert case.ok and case.errors
        assert any(k.startswith("grad.") for k in case.errors) and any(k.startswith("out") for k in case.errors)
        for e in case.errors.values():
            assert e["max_abs"] <= e["atol"] + e["rtol"] * 1e6  # finite and recorded
    assert verify(path).cached  # the second ask is answered from the cache


# adversary -> (codes that must be among the reasons, codes that must not be)
ADVERSARIES = {
    "cached_output.py": ({"alias", "stale"}, {"mismatch-forward", "mismatch-backward", "host-op"}),
    "special_cased_inputs.py": ({"mismatch-forward"}, {"host-op", "alias"}),
    "zeroing_inputs.py": ({"mutated-input"}, {"host-op"}),
    "wrong_odd_shapes.py": ({"mismatch-forward"}, {"host-op", "alias", "nondeterministic"}),
    "wrong_backward.py": ({"mismatch-backward"}, {"mismatch-forward", "host-op"}),
    "unwritten_tail.py": ({"non-finite"}, {"host-op"}),
    "racy.py": ({"nondeterministic"}, {"mismatch-forward", "mismatch-backward", "host-op"}),
    "fallback_host_math.py": ({"host-op"}, {"mismatch-forward", "mismatch-backward"}),
    "fallback_try_except.py": ({"static-try"}, set()),
    "fallback_torch.py": ({"static-fallback", "static-import"}, set()),
    "fallback_reference.py": ({"static-fallback", "static-import"}, set()),
    "timer_patch.py": ({"static-patch"}, set()),
}


def test_corpus_is_complete():
    assert {p.name for p in ADVERSARIAL.glob("*.py")} == set(ADVERSARIES)


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_adversary_rejected_for_the_right_reason(name):
    must, must_not = ADVERSARIES[name]
    result = verify(ADVERSARIAL / name, op="rmsnorm", use_cache=False)
    assert result.verdict == "fail"
    assert must <= result.codes(), result.reasons
    assert not (must_not & result.codes()), result.reasons


def test_odd_shape_bug_is_pinned_to_the_odd_families():
    result = verify(ADVERSARIAL / "wrong_odd_shapes.py", op="rmsnorm", use_cache=False)
    failing = {c.family for c in result.cases if not c.ok}
    assert failing == {"odd", "long_row", "noncontig"}  # rows of 77, 3001, 96: no power of two
    assert all(c.ok for c in result.cases if c.family in ("one_row", "batch"))  # rows of 256 and 64


def test_static_fallbacks_name_the_fallback():
    r = verify(ADVERSARIAL / "fallback_torch.py", op="rmsnorm", use_cache=False)
    assert any("torch.nn.functional.rms_norm" in x for x in r.reasons)
    r = verify(ADVERSARIAL / "fallback_reference.py", op="rmsnorm", use_cache=False)
    assert any("reference" in x for x in r.reasons) and any("importlib" in x for x in r.reasons)


# --------------------------------------------------------------------- the adversaries are real cheats
def _naive(module, *, seed=0, shape=(4, 64), backward=True, ref_after=False):
    """The weak check a generated kernel is usually held to: one fixed seed, one friendly shape."""
    torch.manual_seed(seed)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(shape[-1], requires_grad=True)
    ref = load_reference("rmsnorm")
    expect = None if ref_after else ref.forward(x, w)
    y = module.forward(x, w)
    if ref_after:
        expect = ref.forward(x, w)
    ok = torch.allclose(y, expect, atol=1e-4, rtol=1e-4)
    if backward:
        g = torch.randn_like(y)
        got = torch.autograd.grad(y, (x, w), g)
        want = torch.autograd.grad(ref.forward(x, w), (x, w), g)
        ok = ok and all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(got, want))
    return ok


@pytest.mark.parametrize("name, kwargs", [
    ("cached_output.py", {}),
    ("special_cased_inputs.py", {}),
    ("zeroing_inputs.py", {"backward": False, "ref_after": True}),
    ("wrong_odd_shapes.py", {}),
    ("wrong_backward.py", {"backward": False}),
    ("racy.py", {}),
    ("fallback_host_math.py", {}),
    ("fallback_try_except.py", {}),
])
def test_adversary_fools_a_naive_check(name, kwargs):
    """Each rejected adversary passes the usual weak test, so the verifier is what stops it."""
    assert _naive(load_candidate(ADVERSARIAL / name), **kwargs)


def test_naive_check_can_fail():
    """The weak check is not vacuous: the special-cased kernel fails it off its memorised seed."""
    assert not _naive(load_candidate(ADVERSARIAL / "special_cased_inputs.py"), seed=1)


# --------------------------------------------------------------------- machinery
def test_reference_submitted_as_candidate_is_rejected():
    r = verify(SHIPPED[0].parent / "reference.py", use_cache=False)
    assert r.verdict == "fail" and "static-no-kernel" in r.codes()


def test_cache_is_keyed_by_content(tmp_path):
    src = next(p for p in SHIPPED if p.name == "triton_rows16.py" and p.parent.name == "rmsnorm")
    copy = tmp_path / "rmsnorm" / "copy.py"
    copy.parent.mkdir()
    shutil.copy(src, copy)
    first = verify(copy)  # same bytes as a shipped candidate: same key
    assert first.passed and first.sha256 == verify(src).sha256
    copy.write_text(src.read_text() + "\n# one more line\n")
    again = verify(copy, settings=Settings(families=("one_row",)))  # new content: verified afresh
    assert not again.cached and again.passed and again.sha256 != first.sha256
    assert again.sha256 == hashlib.sha256(copy.read_bytes()).hexdigest()
    assert {c.family for c in again.cases} == {"one_row"}


def test_snapshot_catches_and_undoes_a_patched_timer():
    snap = _Snapshot({"time": time})
    real = time.perf_counter
    time.perf_counter = lambda: 0.0
    try:
        assert snap.changed_and_restore() == ["time.perf_counter"]
    finally:
        time.perf_counter = real
    assert time.perf_counter is real
    assert snap.changed_and_restore() == []


def test_verify_in_a_process_that_imported_triton_first(tmp_path):
    """megatron-core imports triton; verify must then run its dynamic checks in a fresh process."""
    src = next(p for p in SHIPPED if p.name == "triton_rows16.py" and p.parent.name == "rmsnorm")
    code = (
        "import os; os.environ.pop('TRITON_INTERPRET', None)\n"
        "import triton.language\n"
        "from infrarsi.kernels.verify import verify, Settings\n"
        "from infrarsi.kernels.loader import interpreter_ready\n"
        "assert not interpreter_ready()\n"
        f"r = verify({str(src)!r}, use_cache=False, settings=Settings(families=('one_row',)))\n"
        "print(r.verdict, len(r.cases))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["pass", "4"]  # one family x 2 dtypes x 2 seeds


def test_hanging_candidate_times_out(tmp_path):
    src = next(p for p in SHIPPED if p.name == "triton_rows16.py" and p.parent.name == "rmsnorm").read_text()
    hang = tmp_path / "rmsnorm" / "hang.py"
    hang.parent.mkdir()
    # a host loop that never ends once the kernel has run (static checks cannot see it)
    hang.write_text(src.replace("        return y.view(x.shape)\n",
                                "        while n_rows > 0:\n            n_rows = n_rows + 0\n"
                                "        return y.view(x.shape)\n"))
    t0 = time.perf_counter()
    r = verify(hang, use_cache=False, settings=Settings(families=("one_row",), timeout_s=1.0))
    assert r.verdict == "fail" and "timeout" in r.codes()
    assert time.perf_counter() - t0 < 30


KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)

'''


@pytest.mark.parametrize("body, code", [
    # never launches its kernel: the zeros come from torch
    ("def forward(x, weight, eps=1e-6):\n    return torch.zeros_like(x)\n", "no-triton"),
    # a forward(...) whose parameters differ from the reference's
    ("def forward(x, weight):\n    return x\n", "signature"),
    # launches a kernel but returns fp64
    ("def forward(x, weight, eps=1e-6):\n    y = torch.empty(x.shape, dtype=torch.float64)\n"
     "    _copy[(1,)](x, y, 1, BLOCK=16)\n    return y\n", "shape-dtype"),
    # computes in the kernel but has no autograd.Function: gradients come from torch
    ("def forward(x, weight, eps=1e-6):\n    y = torch.empty_like(x)\n    _copy[(1,)](x.detach(), y, 1, BLOCK=16)\n"
     "    return y\n", "autograd"),
])
def test_small_cheats_are_named(tmp_path, body, code):
    path = tmp_path / "rmsnorm" / "cand.py"
    path.parent.mkdir()
    path.write_text(KERNEL + body)
    r = verify(path, use_cache=False, settings=Settings(families=("one_row",), determinism_families=()))
    assert r.verdict == "fail" and code in r.codes(), r.reasons
