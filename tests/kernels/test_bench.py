"""Benchmark bookkeeping: traffic floor and the too-good-to-be-true flags (GPU timing: tested on GPU)."""

from __future__ import annotations

import pytest
import torch

from infrarsi.kernels import bench


def test_bytes_moved_counts_each_tensor_once():
    x = torch.empty(1024, 4096, dtype=torch.bfloat16)
    w = torch.empty(4096, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    assert bench.bytes_moved([x, w, 1e-6], [y]) == 2 * (1024 * 4096 * 2) + 4096 * 2


@pytest.mark.parametrize("speedup, fraction, flagged", [
    (1.8, 0.85, []),
    (12.0, 0.5, ["speedup"]),
    (2.0, 1.3, ["roofline"]),
    (40.0, 4.0, ["speedup", "roofline"]),
])
def test_judge(speedup, fraction, flagged):
    out = bench.judge(speedup_vs_reference=speedup, fraction_of_peak=fraction)
    assert len(out) == len(flagged)
    for word, line in zip(flagged, out):
        assert word in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_bench_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        bench.bench("kernels/rmsnorm/triton_rows4.py")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bench_on_gpu_is_plausible():
    from infrarsi.kernels.loader import list_candidates

    r = bench.bench(list_candidates("rmsnorm")[0], rep_ms=20)
    assert r.candidate_ms > 0 and 0 < r.fraction_of_peak and r.peak_gbps > 100
