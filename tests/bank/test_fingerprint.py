"""Hardware fingerprints: read from this machine, built from declared hardware, compared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infrarsi.bank import HardwareFingerprint, fingerprint_from, fingerprint_local, gpu_family, hardware_distance
from infrarsi.contract.model import Hardware

from .conftest import A100, H100, GiB


@pytest.mark.parametrize("name, family", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("H100-80GB", "H100"), ("NVIDIA H200", "H200"), ("GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"), ("B200", "B200"),
    ("cpu", "cpu"), ("AMD Instinct MI300X", "MI300X"), ("Mystery Accel 9", "MYSTERYACCEL9"),
])
def test_gpu_family_normalises_device_names(name, family):
    assert gpu_family(name) == family


def test_fingerprint_from_a_contract_hardware_table():
    fp = fingerprint_from(Hardware(kind="H100-80GB", devices=8, memory_capacity_gib=80, peak_flops=989e12))
    assert (fp.kind, fp.family, fp.devices, fp.memory_bytes) == ("H100-80GB", "H100", 8, 80 * GiB)
    assert fp.extra == {"peak_flops": 989e12}  # kept, not interpreted


def test_fingerprint_from_aliases_and_units():
    a = fingerprint_from({"name": "A100", "gpus": 4, "hbm_gib": 40, "nodes": 2, "nvlink_gbps": 600})
    assert (a.family, a.devices, a.memory_bytes, a.nodes, a.extra) == ("A100", 4, 40 * GiB, 2, {"nvlink_gbps": 600})
    one = fingerprint_from({"kind": "cpu", "memory_bytes": 2 * GiB})
    assert (one.family, one.interconnect, one.memory_bytes) == ("cpu", "none", 2 * GiB)
    with pytest.raises(ValueError, match="no device kind.*kind="):
        fingerprint_from({"devices": 8})
    with pytest.raises(ValueError, match="devices"):
        fingerprint_from({"kind": "H100", "devices": 0})


def test_fingerprint_local_reads_this_machine():
    fp = fingerprint_local()
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    assert fp.cpu_cores == len(os.sched_getaffinity(0))
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "model name" in info:
        assert fp.cpu_model and fp.cpu_model in info
    if has_cuda:
        assert fp.family != "cpu" and fp.memory_bytes == torch.cuda.get_device_properties(0).total_memory
    else:
        assert (fp.kind, fp.family) == ("cpu", "cpu") and fp.memory_bytes > 0
    assert fingerprint_local(devices=2, memory_bytes=GiB).memory_bytes == GiB


def test_key_is_stable_and_distinguishes_hardware():
    a, b = fingerprint_from(A100), fingerprint_from(A100)
    assert a.key() == b.key() and len(a.key()) == 16
    assert a.key() != fingerprint_from(H100).key()
    assert HardwareFingerprint.model_validate_json(a.model_dump_json()) == a


def test_hardware_distance_orders_what_transfers():
    a100, h100 = fingerprint_from(A100), fingerprint_from(H100)
    a100_40 = fingerprint_from({**A100, "memory_capacity_gib": 40})
    cpu = fingerprint_from({"kind": "cpu", "devices": 8, "memory_capacity_gib": 80, "interconnect": "nvlink"})
    assert hardware_distance(h100, h100) == 0
    assert hardware_distance(a100, h100) == pytest.approx(1.0)  # other generation, same memory and count
    assert hardware_distance(a100, a100_40) == pytest.approx(0.6931, abs=1e-3)  # ln 2 of memory
    assert hardware_distance(cpu, h100) == pytest.approx(2.0)
    assert hardware_distance(a100, h100) == hardware_distance(h100, a100)
