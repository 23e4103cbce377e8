"""The simulated GPU kinds: peak FLOPs, memory and the bandwidths NCCL reaches (``GPUSpec``, ``HARDWARE``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

GiB = 2**30
MiB = 2**20


class GPUSpec(BaseModel):
    """One GPU kind in an 8-GPU NVLink node, nodes joined by InfiniBand (one NIC per GPU).

    Bandwidths are what NCCL reaches (bus bandwidth), not the marketing figure: NVLink 4 is 450 GB/s
    per direction, ring collectives reach ~360 GB/s; a 400 Gb/s NDR NIC is 50 GB/s, ~45 GB/s reached.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    peak_bf16_flops: float  # dense, per GPU
    peak_fp8_flops: float | None  # None: no fp8 tensor cores
    memory_bytes: int  # what torch sees as total capacity
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # achieved collective bus bandwidth inside a node
    ib_bytes_per_s: float  # achieved per-GPU inter-node bandwidth (one NIC per GPU)
    gpus_per_node: int = 8
    gemm_eff: float  # large bf16 GEMM efficiency (achieved / peak)
    attn_eff_fwd: float  # flash attention forward, fraction of peak
    attn_eff_bwd: float
    fp8_recipes: tuple[str, ...] = ()
    launch_bound_s: float = 0.0  # CPU time to launch one layer's forward+backward kernels
    collective_latency: Literal["fixed", "nccl"] = "fixed"
    """Latency of a collective: "fixed" (one constant per collective, what the benchmark landscapes were built
    with) or "nccl" (NCCL's own ring/Simple model, per ring step: step_time.NCCL_RING_*)."""
    sm_count: int = 0  # streaming multiprocessors (the small-work terms' wave quantisation)
    small_work_terms: bool = False
    """Price the fixed costs small work per GPU exposes (:mod:`.small_work`): per-kernel gaps, NCCL's collective
    latency, GEMM tile/wave quantisation and memory bound. Off for the benchmark landscapes (built without them);
    `infrarsi estimate` turns it on for real launches."""


HARDWARE: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        # SM counts: NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs); NVIDIA H100 Tensor Core GPU
        # Architecture whitepaper (H100 SXM5: 132 SMs; H200 is the same die); NVIDIA Blackwell datasheet (B200: 148).
        # A100 SXM 80GB: 312 TF bf16, no fp8, 2.04 TB/s, NVLink 3 (300 GB/s/dir), HDR 200 Gb/s per GPU.
        GPUSpec(name="A100", peak_bf16_flops=312e12, peak_fp8_flops=None, memory_bytes=80 * GiB,
                hbm_bytes_per_s=2.04e12, nvlink_bytes_per_s=230e9, ib_bytes_per_s=22e9, gemm_eff=0.80,
                attn_eff_fwd=0.60, attn_eff_bwd=0.48, fp8_recipes=(), launch_bound_s=240e-6, sm_count=108),
        # H100 SXM 80GB: 989 TF bf16 / 1979 fp8, 3.35 TB/s, NVLink 4 (450 GB/s/dir), NDR 400 Gb/s per GPU.
        GPUSpec(name="H100", peak_bf16_flops=989e12, peak_fp8_flops=1979e12, memory_bytes=int(79.6 * GiB),
                hbm_bytes_per_s=3.35e12, nvlink_bytes_per_s=360e9, ib_bytes_per_s=45e9, gemm_eff=0.74,
                attn_eff_fwd=0.55, attn_eff_bwd=0.42, fp8_recipes=("delayed", "tensorwise", "blockwise"),
                launch_bound_s=200e-6, sm_count=132),
        # H200 141GB: H100 compute (same GEMM efficiency) with HBM3e (4.8 TB/s); same NVLink and NIC.
        GPUSpec(name="H200", peak_bf16_flops=989e12, peak_fp8_flops=1979e12, memory_bytes=int(140.4 * GiB),
                hbm_bytes_per_s=4.8e12, nvlink_bytes_per_s=360e9, ib_bytes_per_s=45e9, gemm_eff=0.74,
                attn_eff_fwd=0.55, attn_eff_bwd=0.42, fp8_recipes=("delayed", "tensorwise", "blockwise"),
                launch_bound_s=200e-6, sm_count=132),
        # B200 180GB: 2.25 PF bf16 / 4.5 PF fp8 dense, 8 TB/s, NVLink 5 (900 GB/s/dir), 400 Gb/s per GPU.
        GPUSpec(name="B200", peak_bf16_flops=2250e12, peak_fp8_flops=4500e12, memory_bytes=int(179 * GiB),
                hbm_bytes_per_s=8.0e12, nvlink_bytes_per_s=720e9, ib_bytes_per_s=45e9, gemm_eff=0.70,
                attn_eff_fwd=0.50, attn_eff_bwd=0.40,
                fp8_recipes=("delayed", "tensorwise", "blockwise", "mxfp8"), launch_bound_s=180e-6, sm_count=148),
    )
}
_GPU_ALIASES = {"A100-80GB": "A100", "H100-80GB": "H100", "H100-SXM": "H100", "H200-141GB": "H200", "B200-180GB": "B200"}


def gpu(kind: str) -> GPUSpec:
    """The GPU spec for ``kind`` (A100, H100, H200, B200 or an alias like H100-80GB)."""
    name = _GPU_ALIASES.get(kind, kind)
    if name not in HARDWARE:  # "NVIDIA H100 80GB HBM3", "H200-140GB": the generation named inside
        name = next((k for k in HARDWARE if k in kind.upper()), name)
    if name not in HARDWARE:
        raise ValueError(f"gpu {kind!r} is not in the hardware table; use one of {', '.join(HARDWARE)}")
    return HARDWARE[name]
