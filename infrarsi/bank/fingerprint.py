"""Hardware fingerprint: what a trial ran on, as the bank records it and compares it.

Two ways to get one:

- ``fingerprint_local()`` reads the machine this process runs on: ``torch.cuda`` for GPUs (model,
  count, memory per device, CUDA and driver versions, peer access), ``/proc/cpuinfo`` and
  ``os.sched_getaffinity`` for a CPU run.
- ``fingerprint_from(hardware)`` builds one from declared hardware: a contract's ``[hardware]``
  table, a simulated cluster's description, or any mapping with a kind, a device count and a memory
  size. Keys it does not know are kept in ``extra`` (numbers and strings only), never dropped.

``family`` is the normalised device generation ("H100", "A100", "cpu"): the unit the seeding
similarity compares (same family = same kernels, same compute/bandwidth ratio).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..knobs.hardware import gpu_family  # the one table of device generations (knobs/hardware.py)

GiB = 2**30


class HardwareFingerprint(BaseModel):
    """One device kind x count: what the bank keys hardware on. Memory in bytes per device."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    """The name the run used ("H100-80GB", "cpu", "A100"): shown to people."""
    family: str
    """Device generation ("H100", "A100", "cpu"): what similarity compares."""
    devices: int = Field(1, ge=1)
    """Devices one trial uses (GPUs, or CPU processes)."""
    memory_bytes: int = Field(0, ge=0)
    """Per-device memory capacity in bytes (0 = unknown). CPU: the per-process cap the run used."""
    nodes: int = Field(1, ge=1)
    interconnect: str = "unknown"
    """"nvlink", "pcie", "p2p" (peer access, link type unknown), "none" (one device) or "unknown"."""
    gpu_model: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    extra: dict[str, float | int | str | bool] = {}
    """Declared facts the bank does not interpret (peak FLOP/s, bandwidths), kept for the record."""

    def key(self) -> str:
        """A stable 16-hex identity: sha256 of the canonical JSON of every field."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB


# Aliases accepted by fingerprint_from, first match wins. Memory keys carry their unit.
_KIND_KEYS = ("kind", "name", "gpu", "gpu_kind", "device", "hardware")
_DEVICE_KEYS = ("devices", "count", "gpus", "num_gpus", "world_size", "n_devices")
_MEM_KEYS = (("memory_bytes", 1), ("memory_capacity_bytes", 1), ("memory_capacity_gib", GiB),
             ("memory_gib", GiB), ("hbm_gib", GiB), ("mem_gib", GiB), ("memory_gb", 10**9))
_PLAIN = ("nodes", "interconnect", "gpu_model", "driver", "cuda", "torch", "cpu_model", "cpu_cores", "family")


def fingerprint_from(hardware: Any) -> HardwareFingerprint:
    """A fingerprint from declared hardware: a mapping, a pydantic model (contract ``Hardware``) or any
    object with attributes. Needs a kind (``kind``/``name``/``gpu``); devices default to 1, memory to
    unknown (0). Raises ValueError naming the missing field."""
    if isinstance(hardware, HardwareFingerprint):
        return hardware
    d = _as_dict(hardware)
    kind = next((str(d[k]) for k in _KIND_KEYS if d.get(k) not in (None, "")), None)
    if kind is None:
        raise ValueError(f"hardware {d!r}: no device kind; give 'kind' (e.g. kind='H100-80GB' or 'cpu')")
    devices = next((d[k] for k in _DEVICE_KEYS if d.get(k) is not None), 1)
    mem = 0
    for key, unit in _MEM_KEYS:
        if d.get(key) is not None:
            mem = int(round(float(d[key]) * unit))
            break
    fields: dict[str, Any] = {k: d[k] for k in _PLAIN if d.get(k) is not None}
    fields.setdefault("family", gpu_family(kind))
    if "interconnect" not in fields and int(devices) == 1:
        fields["interconnect"] = "none"
    used = set(_KIND_KEYS) | set(_DEVICE_KEYS) | {k for k, _ in _MEM_KEYS} | set(_PLAIN)
    extra = {k: v for k, v in d.items()
             if k not in used and isinstance(v, (int, float, str, bool)) and not k.startswith("_")}
    try:
        return HardwareFingerprint(kind=kind, devices=int(devices), memory_bytes=mem, extra=extra, **fields)
    except Exception as e:
        raise ValueError(f"hardware {d!r}: {e}") from None


def fingerprint_local(*, devices: int | None = None, memory_bytes: int | None = None) -> HardwareFingerprint:
    """The machine this process runs on. With CUDA: every visible GPU (or ``devices`` of them), their
    model and memory, CUDA/driver/torch versions and whether GPU 0 can reach GPU 1 directly. Without:
    the CPU model and the cores this process may use; ``memory_bytes`` is the per-process memory cap
    the run applies (default: physical memory)."""
    cpu_model, cores = _cpu_info()
    torch_version = cuda = None
    try:
        import torch

        torch_version = str(torch.__version__)
        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            props = torch.cuda.get_device_properties(0)
            interconnect = "none"
            if n > 1:
                interconnect = "p2p" if torch.cuda.can_device_access_peer(0, 1) else "pcie"
                interconnect = _nvlink() or interconnect
            return HardwareFingerprint(
                kind=props.name, family=gpu_family(props.name), devices=devices or n,
                memory_bytes=memory_bytes or int(props.total_memory), interconnect=interconnect,
                gpu_model=props.name, driver=_nvidia_driver(), cuda=torch.version.cuda,
                torch=torch_version, cpu_model=cpu_model, cpu_cores=cores,
            )
    except ImportError:
        pass
    return HardwareFingerprint(
        kind="cpu", family="cpu", devices=devices or 1, memory_bytes=memory_bytes or _mem_total(),
        interconnect="none" if (devices or 1) == 1 else "shared-memory", cuda=cuda, torch=torch_version,
        cpu_model=cpu_model, cpu_cores=cores,
        extra={"machine": platform.machine()},
    )


def hardware_distance(a: HardwareFingerprint, b: HardwareFingerprint) -> float:
    """How far apart two fingerprints are for transfer, >= 0 (0 = same kind, count and memory).

    - 1.0 when the families differ (different kernels, compute/bandwidth ratio); 2.0 between a CPU
      and a GPU (little but the memory arithmetic carries over);
    - + |ln(memory_a / memory_b)| (what fits changes with capacity); skipped when either is unknown;
    - + 0.5 * |ln(devices_a / devices_b)| (the parallel layouts on offer change with the count);
    - + 0.25 when the interconnects are both known and differ (communication costs move).
    """
    import math

    d = 0.0
    if a.family != b.family:
        d += 2.0 if "cpu" in (a.family, b.family) else 1.0
    if a.memory_bytes and b.memory_bytes:
        d += abs(math.log(a.memory_bytes / b.memory_bytes))
    d += 0.5 * abs(math.log(a.devices / b.devices))
    known = {"unknown"}
    if a.interconnect not in known and b.interconnect not in known and a.interconnect != b.interconnect:
        d += 0.25
    return d


# ------------------------------------------------------------------ helpers
def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, BaseModel):
        out = obj.model_dump()
        if hasattr(obj, "memory_capacity_bytes") and "memory_capacity_gib" not in out:
            out["memory_capacity_bytes"] = obj.memory_capacity_bytes
        return out
    if hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        names = getattr(obj, "__dataclass_fields__", None) or vars(obj)
        return {k: getattr(obj, k) for k in names if not k.startswith("_")}
    raise ValueError(f"hardware {obj!r}: expected a mapping or an object with kind/devices/memory attributes")


def _cpu_info() -> tuple[str | None, int]:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return model, cores


def _mem_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # the file says kB
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _nvidia_driver() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else None


def _nvlink() -> str | None:
    """"nvlink" when ``nvidia-smi nvlink -s`` reports an active link on GPU 0, else None."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "nvlink", "-s", "-i", "0"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return "nvlink" if re.search(r"Link \d+: .*GB/s", out) else None
