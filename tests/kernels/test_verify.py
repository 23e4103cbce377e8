"""The verifier: every shipped candidate passes; every adversary is rejected for its own reason."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time

import pytest
import torch

from infrarsi.kernels.dynamic import _Snapshot, expected_cases
from infrarsi.kernels.loader import OPS, list_candidates, load_candidate, load_reference, op_of
from infrarsi.kernels.verify import VerifySettings, _dynamic_in_subprocess, verify

from .conftest import ADVERSARIAL, HONEST

SHIPPED = [c for op in OPS for c in list_candidates(op)]  # every variant of every shipped file
# one candidate per op in the default run (the ones the workload test trains with); the rest under -m slow
IN_WORKLOAD = {"rmsnorm": "triton_rows.py@rows16", "swiglu": "triton_tiles.py@b1024", "rope": "triton_rows.py@rows16",
               "cross_entropy": "triton_vocab.py@v4096", "add_rmsnorm": "triton_rows.py@rows16"}
SHIPPED_PARAMS = [c if IN_WORKLOAD[op_of(c)] == c.name else pytest.param(c, marks=pytest.mark.slow) for c in SHIPPED]


def _shipped(op: str, name: str):
    return next(c for c in SHIPPED if c.name == name and op_of(c) == op)


@pytest.mark.parametrize("path", SHIPPED_PARAMS, ids=lambda c: f"{op_of(c)}/{c.name}")
def test_shipped_candidate_passes(path):
    result = verify(path)
    assert result.verdict == "pass", result.reasons
    assert result.reasons == []
    ref = load_reference(op_of(path))
    covered = {(c.family, c.dtype) for c in result.cases}
    assert covered == expected_cases(ref, VerifySettings())
    assert {f for f, _ in covered} == set(ref.FAMILIES)
    assert {"float16", "bfloat16", "float32"} <= {c.dtype for c in result.cases}
    assert set(ref.PRODUCTION) <= {c.family for c in result.cases}  # production widths, compared too
    assert len({c.seed for c in result.cases}) >= 5  # fresh seeds, never one fixed input
    for case in result.cases:  # every output and every gradient was compared, within tolerance
        assert case.ok and case.errors
        assert any(k.startswith("grad.") for k in case.errors) and any(k.startswith("out") for k in case.errors)
        for e in case.errors.values():
            assert e["max_abs"] <= e["atol"] + e["rtol"] * 1e6  # finite and recorded
    assert verify(path).cached  # the second ask is answered from the cache


# adversary -> (op, codes that must be among the reasons, codes that must not be)
ADVERSARIES = {
    "cached_output.py": ("rmsnorm", {"alias", "stale"}, {"mismatch-forward", "mismatch-backward", "host-op"}),
    "special_cased_inputs.py": ("rmsnorm", {"mismatch-forward"}, {"host-op", "alias"}),
    "zeroing_inputs.py": ("rmsnorm", {"mutated-input"}, {"host-op"}),
    "wrong_odd_shapes.py": ("rmsnorm", {"mismatch-forward"}, {"host-op", "alias", "nondeterministic"}),
    "wrong_backward.py": ("rmsnorm", {"mismatch-backward"}, {"mismatch-forward", "host-op"}),
    "unwritten_tail.py": ("rmsnorm", {"non-finite"}, {"host-op"}),
    "racy.py": ("rmsnorm", {"nondeterministic"}, {"mismatch-forward", "mismatch-backward", "host-op"}),
    "fallback_host_math.py": ("rmsnorm", {"host-op"}, {"mismatch-forward", "mismatch-backward"}),
    "fallback_try_except.py": ("rmsnorm", {"static-try"}, set()),
    "fallback_torch.py": ("rmsnorm", {"static-fallback", "static-import"}, set()),
    "fallback_reference.py": ("rmsnorm", {"static-fallback", "static-import"}, set()),
    "timer_patch.py": ("rmsnorm", {"static-patch"}, set()),
    # the gaps of the denylist verifier, one adversary each
    "wide_rows_skip.py": ("rmsnorm", {"mismatch-forward"}, {"host-op", "alias", "static-import"}),
    "stack_peek.py": ("rmsnorm", {"static-import"}, set()),
    "cache_rewrite.py": ("rmsnorm", {"static-import"}, set()),
    "forged_verdict.py": ("rmsnorm", {"static-builtin"}, set()),
    "fp16_unsafe.py": ("rmsnorm", {"mismatch-forward"}, {"host-op", "alias"}),  # float16 cases only (below)
    "input_cache.py": ("rmsnorm", {"input-cache"}, {"host-op"}),
    "ce_host_scale.py": ("cross_entropy", {"host-op"}, {"mismatch-forward", "mismatch-backward"}),
    # what a held-out corpus got through: the checker's state read from the candidate's process, Triton only on
    # the verifier's leaf inputs, a constant bias inside the element-wise tolerance
    "forged_checker_state.py": ("rmsnorm", {"static-import"}, set()),
    "training_switch.py": ("rmsnorm", {"mismatch-forward", "host-op"}, {"alias", "static-import"}),
    "constant_bias.py": ("rmsnorm", {"bias"}, {"mismatch-forward", "mismatch-backward", "host-op"}),
    # the kernel keyring reached through ctypes: the lint names it, and past the lint the seccomp filter refuses it
    "keyring_probe.py": ("rmsnorm", {"static-import"}, set()),
}


def test_corpus_is_complete():
    assert {p.name for p in ADVERSARIAL.glob("*.py")} == set(ADVERSARIES)


@pytest.fixture(scope="module")
def adversary_results():
    return {}


# The families an adversary is caught on whatever the seed (the rest run every family): keeps the
# default test run short; each is a subset of what `infrarsi kernels verify` runs.
FAMILIES_NEEDED = {
    "cached_output.py": ("one_row", "batch"), "special_cased_inputs.py": ("odd",), "zeroing_inputs.py": ("one_row",),
    "wrong_backward.py": ("one_row",), "unwritten_tail.py": ("odd",), "racy.py": ("batch",),
    "fallback_host_math.py": ("one_row",), "input_cache.py": ("one_row",), "ce_host_scale.py": ("odd",),
    "fp16_unsafe.py": ("odd", "one_row"), "wide_rows_skip.py": ("one_row", "hidden4096", "hidden8192"),
    "wrong_odd_shapes.py": ("odd", "one_row", "long_row", "noncontig", "batch"),
    "training_switch.py": ("one_row", "batch"), "constant_bias.py": ("one_row",),
}


def _verdict(name, memo):
    if name not in memo:
        op = ADVERSARIES[name][0]
        fams = FAMILIES_NEEDED.get(name)
        memo[name] = verify(ADVERSARIAL / name, op=op, use_cache=False,
                            settings=VerifySettings(families=fams) if fams else VerifySettings())
    return memo[name]


@pytest.mark.parametrize("name", sorted(ADVERSARIES))
def test_adversary_rejected_for_the_right_reason(name, adversary_results):
    _, must, must_not = ADVERSARIES[name]
    result = _verdict(name, adversary_results)
    assert result.verdict == "fail"
    assert must <= result.codes(), result.reasons
    assert not (must_not & result.codes()), result.reasons


def test_production_widths_catch_the_wide_row_skip(adversary_results):
    result = _verdict("wide_rows_skip.py", adversary_results)
    assert {c.family for c in result.cases if not c.ok} == {"hidden4096", "hidden8192"}
    assert {c.dtype for c in result.cases if c.family == "hidden8192"} == {"bfloat16", "float16"}
    worst = max(e["max_abs"] for c in result.cases if not c.ok for k, e in c.errors.items() if k == "out")
    assert worst > 0.05


def test_fp16_cases_catch_the_fp16_bug(adversary_results):
    result = _verdict("fp16_unsafe.py", adversary_results)
    assert {c.dtype for c in result.cases if not c.ok} == {"float16"}


def test_honest_host_bookkeeping_passes():
    """Counting valid targets and dividing the summed per-row loss on the host is O(rows): allowed."""
    result = verify(HONEST / "ce_host_count.py", op="cross_entropy", use_cache=False,
                    settings=VerifySettings(families=("odd", "batch", "vocab32k")))  # small, many-program, production
    assert result.passed, result.reasons


def test_past_the_static_check_the_stack_tells_nothing():
    """Run past the static check, the stack-peeking candidate sees no check on the stack and cheats."""
    reasons, cases = _dynamic_in_subprocess((ADVERSARIAL / "stack_peek.py").resolve(), "rmsnorm",
                                            VerifySettings(families=("one_row",), determinism_families=()))
    assert any(r.startswith("mismatch-forward") for r in reasons), reasons


def test_past_the_static_check_a_forged_answer_is_refused():
    reasons, cases = _dynamic_in_subprocess((ADVERSARIAL / "forged_verdict.py").resolve(), "rmsnorm",
                                            VerifySettings(families=("one_row",), determinism_families=()))
    assert cases == [] and len(reasons) == 1 and "sent no readable answer" in reasons[0], reasons


def test_past_the_static_check_the_checkers_state_is_out_of_reach():
    """The candidate looks for the checks' job and nonce in the frames of its own process, to print the verdict the
    parent expects: the checker is another process, and nothing the candidate prints is read."""
    reasons, cases = _dynamic_in_subprocess((ADVERSARIAL / "forged_checker_state.py").resolve(), "rmsnorm",
                                            VerifySettings(families=("one_row",), determinism_families=()))
    assert reasons and any(r.startswith("mismatch-forward") for r in reasons), reasons


def test_the_kernel_keyring_is_refused_to_a_candidate_under_verification(monkeypatch):
    """The candidate's process runs under the trial's seccomp filter: its add_key is refused, so it computes
    honestly and passes; with the filter left out the same call goes through and the candidate ends its process."""
    from infrarsi.execute import isolation

    if isolation.problem() is not None or isolation.seccomp_problem() is not None:
        pytest.skip(isolation.problem() or isolation.seccomp_problem())
    one = VerifySettings(families=("one_row",), determinism_families=())
    reasons, cases = _dynamic_in_subprocess((ADVERSARIAL / "keyring_probe.py").resolve(), "rmsnorm", one)
    assert reasons == [] and cases, reasons
    monkeypatch.setattr(isolation, "seccomp_fd", lambda: None)
    reasons, _ = _dynamic_in_subprocess((ADVERSARIAL / "keyring_probe.py").resolve(), "rmsnorm", one)
    assert any("exited with 5" in r for r in reasons), reasons


def test_training_like_inputs_reach_the_candidate():
    """The candidate's process calls forward on a non-leaf activation and an nn.Parameter weight, with the strides
    the checker sent (a strided view stays a view)."""
    from infrarsi.kernels.dynamic import training_like

    base = torch.randn(4, 10)
    x = training_like(base[:, 2:8], True, "cpu")
    w = training_like(torch.randn(6), True, "cpu")
    t = training_like(torch.arange(4), False, "cpu")
    assert not x.is_leaf and x.requires_grad and x.stride() == (10, 1) and torch.equal(x.detach(), base[:, 2:8])
    assert isinstance(w, torch.nn.Parameter) and t.is_leaf and not t.requires_grad


def test_odd_shape_bug_is_pinned_to_the_odd_families(adversary_results):
    result = _verdict("wrong_odd_shapes.py", adversary_results)
    failing = {c.family for c in result.cases if not c.ok}
    assert failing == {"odd", "long_row", "noncontig"}  # rows of 77, 3001, 96: no power of two
    assert all(c.ok for c in result.cases if c.family in ("one_row", "batch"))


def test_static_fallbacks_name_the_fallback(adversary_results):
    r = _verdict("fallback_torch.py", adversary_results)
    assert any("torch.nn.functional.rms_norm" in x for x in r.reasons)
    r = _verdict("fallback_reference.py", adversary_results)
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
    ("stack_peek.py", {}),
    ("input_cache.py", {}),
])
def test_adversary_fools_a_naive_check(name, kwargs):
    """Each rejected adversary passes the usual weak test, so the verifier is what stops it."""
    assert _naive(load_candidate(ADVERSARIAL / name), **kwargs)


def test_naive_check_can_fail():
    """The weak check is not vacuous: the special-cased kernel fails it off its memorised seed."""
    assert not _naive(load_candidate(ADVERSARIAL / "special_cased_inputs.py"), seed=1)


# --------------------------------------------------------------------- machinery
def test_reference_submitted_as_candidate_is_rejected():
    r = verify(SHIPPED[0].path.parent / "reference.py", use_cache=False)
    assert r.verdict == "fail" and "static-no-kernel" in r.codes()


def test_cache_is_keyed_by_content(tmp_path):
    src = _shipped("rmsnorm", "triton_rows.py@rows16")
    copy = tmp_path / "rmsnorm" / "copy.py"
    copy.parent.mkdir()
    shutil.copy(src.path, copy)
    first = verify(f"{copy}@rows16")  # same bytes and variant as a shipped candidate: same key
    assert first.passed and first.sha256 == verify(src).sha256
    copy.write_text(src.path.read_text() + "\n# one more line\n")
    again = verify(f"{copy}@rows16", settings=VerifySettings(families=("one_row",)))  # new content: verified afresh
    assert not again.cached and again.passed and again.sha256 != first.sha256
    assert again.sha256 == hashlib.sha256(copy.read_bytes()).hexdigest()
    assert {c.family for c in again.cases} == {"one_row"}


QUICK = VerifySettings(families=("one_row",), determinism_families=())


def test_a_tampered_cache_entry_is_verified_afresh(tmp_path):
    from infrarsi.kernels.verify import cache_dir, cache_key

    bad = tmp_path / "rmsnorm" / "bad.py"
    bad.parent.mkdir()
    shutil.copy(ADVERSARIAL / "wrong_backward.py", bad)
    first = verify(bad, settings=QUICK)
    assert first.verdict == "fail"
    entry = cache_dir() / f"{cache_key(bad, 'rmsnorm', QUICK)}.json"
    d = __import__("json").loads(entry.read_text())
    d["body"]["result"].update(verdict="pass", reasons=[])  # what a candidate with file access would do
    entry.write_text(__import__("json").dumps(d))
    again = verify(bad, settings=QUICK)
    assert not again.cached and again.verdict == "fail"  # the MAC did not match: checked again


def test_a_verdict_is_per_variant(tmp_path):
    """One file, three settings: its variants are verified as the workload loads them (their constants set), each
    with a verdict of its own; the file's sha256 and its lint are shared."""
    from infrarsi.kernels import verify as verify_mod
    from infrarsi.kernels.loader import CandidateError

    src = _shipped("rmsnorm", "triton_rows.py@rows16").path.read_text()
    line = next(ln for ln in src.splitlines() if ln.startswith("VARIANTS = "))
    fam = tmp_path / "rmsnorm" / "fam.py"
    fam.parent.mkdir()
    # "narrow": a one-tile limit of 16 columns, under every family's row length: it must fail, and only it
    fam.write_text(src.replace(line, line[:-1] + ', "narrow": {"MAX_BLOCK_N": 16}}'))
    good = verify(f"{fam}@rows16", settings=QUICK)
    bad = verify(f"{fam}@narrow", settings=QUICK)
    assert good.passed, good.reasons
    assert bad.verdict == "fail" and "error" in bad.codes() and "one-tile limit 16" in " ".join(bad.reasons)
    assert good.sha256 == bad.sha256 == hashlib.sha256(fam.read_bytes()).hexdigest()
    assert (good.path, bad.path) == (f"{fam.resolve()}@rows16", f"{fam.resolve()}@narrow")
    keys = {verify_mod.cache_key(v, "rmsnorm", QUICK) for v in (fam, f"{fam}@rows4", f"{fam}@rows16", f"{fam}@narrow")}
    assert len(keys) == 4  # a cached verdict of one variant never answers for another
    assert verify(f"{fam}@rows16", settings=QUICK).cached and not verify(f"{fam}@rows4", settings=QUICK).cached
    with pytest.raises(CandidateError, match="has no variant 'wide'"):
        verify(f"{fam}@wide", settings=QUICK)


def test_the_cache_key_covers_verifier_versions_and_device(monkeypatch, tmp_path):
    from infrarsi.kernels import verify as verify_mod

    src = next(p for p in SHIPPED if op_of(p) == "rmsnorm")
    parts = verify_mod.key_parts(src, "rmsnorm")
    assert set(parts) >= {"candidate", "reference", "verifier", "torch", "triton", "device"}
    assert parts["torch"] == torch.__version__.split("+")[0] or parts["torch"] == torch.__version__
    before = verify_mod.cache_key(src, "rmsnorm")
    monkeypatch.setattr(verify_mod, "_version", lambda dist: "0.0-other")
    assert verify_mod.cache_key(src, "rmsnorm") != before  # another torch/triton: verified again
    monkeypatch.undo()
    monkeypatch.setattr(verify_mod, "VERIFIER_SOURCES", verify_mod.VERIFIER_SOURCES[:-1])
    assert verify_mod.cache_key(src, "rmsnorm") != before  # the verifier's own source is in the key
    monkeypatch.undo()
    monkeypatch.setattr(verify_mod, "device_kind", lambda: "cuda:NVIDIA H200:sm90")
    assert verify_mod.cache_key(src, "rmsnorm") != before


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
    src = _shipped("rmsnorm", "triton_rows.py@rows16")
    code = (
        "import os; os.environ.pop('TRITON_INTERPRET', None)\n"
        "import triton.language\n"
        "from infrarsi.kernels.verify import verify, VerifySettings\n"
        "from infrarsi.kernels.loader import interpreter_ready\n"
        "assert not interpreter_ready()\n"
        f"r = verify({str(src)!r}, use_cache=False, settings=VerifySettings(families=('one_row',)))\n"
        "print(r.verdict, len(r.cases))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["pass", "6"]  # one family x 3 dtypes x 2 seeds


def test_hanging_candidate_times_out(tmp_path):
    src = _shipped("rmsnorm", "triton_rows.py@rows16").path.read_text()
    hang = tmp_path / "rmsnorm" / "hang.py"
    hang.parent.mkdir()
    # a host loop that never ends once the kernel has run (static checks cannot see it)
    hang.write_text(src.replace("        return y.view(x.shape)\n",
                                "        while n_rows > 0:\n            n_rows = n_rows + 0\n"
                                "        return y.view(x.shape)\n"))
    t0 = time.perf_counter()
    r = verify(hang, use_cache=False, settings=VerifySettings(families=("one_row",), timeout_s=3.0))
    assert r.verdict == "fail" and "timeout" in r.codes(), r.reasons
    assert time.perf_counter() - t0 < 60


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
    r = verify(path, use_cache=False, settings=VerifySettings(families=("one_row",), determinism_families=()))
    assert r.verdict == "fail" and code in r.codes(), r.reasons


def test_the_contracts_model_is_one_more_family():
    src = _shipped("rmsnorm", "triton_rows.py@rows16")
    dims = (("hidden", 1536), ("ffn_hidden", 4096), ("heads", 12), ("vocab", 50304), ("seq", 1024))
    r = verify(src, use_cache=False, settings=VerifySettings(families=("one_row",), model=dims, determinism_families=()))
    assert r.passed, r.reasons
    assert {(c.family, c.dtype) for c in r.cases} >= {("model", "float16"), ("model", "float32")}
