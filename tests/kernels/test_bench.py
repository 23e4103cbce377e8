"""The benchmark: traffic floor, what it rejects, and its whole timing path on the CPU interpreter (small
shapes; GPU timings come from scripts/gpu_check.sh)."""

from __future__ import annotations

import pytest
import torch

from infrarsi.kernels import bench
from infrarsi.kernels.loader import KERNELS_ROOT

from .conftest import ADVERSARIAL


def test_bytes_moved_counts_each_tensor_once():
    x = torch.empty(1024, 4096, dtype=torch.bfloat16)
    w = torch.empty(4096, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    assert bench.bytes_moved([x, w, 1e-6], [y]) == 2 * (1024 * 4096 * 2) + 4096 * 2


@pytest.mark.parametrize("speedup, fraction, mismatches, rejected, suspect", [
    (1.8, 0.85, [], [], []),
    (12.0, 0.5, [], [], ["speedup"]),
    (2.0, 1.3, [], ["roofline"], []),
    (1.5, 0.5, ["forward, repetition 4: tensor 0: 3 of 8 elements"], ["off the reference"], []),
    (40.0, 4.0, [], ["roofline"], ["speedup"]),
])
def test_judge_rejects_the_impossible_and_flags_the_unlikely(speedup, fraction, mismatches, rejected, suspect):
    rej, sus = bench.judge(speedup_vs_reference=speedup, fraction_of_peak=fraction, mismatches=mismatches)
    assert len(rej) == len(rejected) and len(sus) == len(suspect)
    for word, line in zip(rejected + suspect, rej + sus):
        assert word in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_bench_refuses_production_shapes_without_gpu():
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        bench.bench("kernels/rmsnorm/triton_rows.py@rows4", device="cuda")
    with pytest.raises(RuntimeError, match="small=True"):
        bench.bench("kernels/rmsnorm/triton_rows.py@rows4", device="cpu")


def test_an_honest_candidate_is_accepted_on_fresh_inputs():
    r = bench.bench(f"{KERNELS_ROOT / 'rmsnorm' / 'triton_rows.py'}@rows16", device="cpu", small=True, reps=3, warmup=1)
    assert r.accepted and not r.mismatches, r.rejected
    assert r.candidate_ms > 0 and r.reference_ms > 0 and r.peak_gbps > 0 and r.fraction_of_peak < 1.0


def test_an_input_keyed_cache_is_rejected():
    """input_cache.py never hits in verification (fresh tensors) and always would in a loop over the same
    tensors; refilled in place before every timed call, its stale answers are caught."""
    r = bench.bench(ADVERSARIAL / "input_cache.py", "rmsnorm", device="cpu", small=True, reps=3, warmup=1)
    assert not r.accepted and r.mismatches
    assert "off the reference" in r.rejected[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bench_on_gpu_is_plausible():
    r = bench.bench(f"{KERNELS_ROOT / 'rmsnorm' / 'triton_rows.py'}@rows16", reps=10)
    assert r.accepted and r.candidate_ms > 0 and 0 < r.fraction_of_peak <= 1.0 and r.peak_gbps > 100


@pytest.mark.slow
def test_gpu_check_dry_run_writes_its_table(tmp_path):
    """scripts/gpu_check.sh --dry, its kernels part: every step of the kernel check (verify, bench, table) on the CPU."""
    import os
    import subprocess

    out = subprocess.run(["scripts/gpu_check.sh", "--dry", "--ops", "swiglu", "--jobs", "1"], cwd=KERNELS_ROOT.parent,
                         env={**os.environ, "OUT": str(tmp_path), "GPU_CHECK_PARTS": "kernels"}, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "gpu_check.md").read_text()
    assert table.count("| swiglu |") == 2 and "not judged (dry run)" in table
    assert "gpu_check.json" in os.listdir(tmp_path)
