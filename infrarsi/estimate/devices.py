"""Datasheet peaks for the roofline step time (dense bf16 tensor-core FLOP/s, HBM bytes/s).

A contract's ``hardware.peak_flops`` wins over the table's FLOP/s when given. The CPU has no entry: a roofline
of a CPU's caches and vector units says little, so the estimate gives no step time there."""

from __future__ import annotations

import re
from typing import Any

from ..fakestep.track import Device

# (pattern on hardware.kind, name, bf16 dense FLOP/s, memory bytes/s): NVIDIA datasheets (SXM parts).
DATASHEET = (
    (r"B200", "B200", 2.25e15, 8.0e12),
    (r"H200", "H200", 989e12, 4.8e12),
    (r"H100|H800", "H100", 989e12, 3.35e12),
    (r"A100|A800", "A100", 312e12, 2.039e12),
)


def device_for(hardware: Any) -> Device | None:
    kind = str(getattr(hardware, "kind", "") or "").upper()
    for pat, name, flops, bw in DATASHEET:
        if re.search(pat, kind):
            return Device(name=name, flops=float(getattr(hardware, "peak_flops", None) or flops), bandwidth=bw)
    return None
