"""What the contract's device can run: CUDA compute capability by GPU generation, and the fp8 recipes it allows.

The contract names the device (``hardware.kind = "H100-80GB"``). A knob value the device cannot run is
left out of the knob space, so the tuner never proposes it: ``mxfp8`` needs Blackwell (SM100), the other
fp8 recipes need Ada or Hopper (SM89+). The figures are the frameworks' own checks:

- torchtitan: "float8 is only supported on SM89 or later"; "MXFP8 is only supported on CUDA SM100 or later"
- Transformer Engine (Megatron): fp8 GEMMs need SM89+; MXFP8 block scaling needs SM100+; fp8 block-wise
  scaling needs SM90+.

A device the table does not know (or ``cpu``, which names no GPU) narrows nothing: the rule can only be
checked against a GPU generation it knows.
"""

from __future__ import annotations

import re

# Known device generations, most specific first ("H200" before "H20", "A100" before "A10").
_FAMILIES = ("GB200", "GH200", "B200", "B100", "H200", "H100", "H800", "H20", "A100", "A800", "A10G", "A10",
             "L40S", "L40", "L4", "V100", "T4", "MI355X", "MI325X", "MI300X", "MI250X", "TPU")


def gpu_family(name: str) -> str:
    """Normalise a device name to its generation: "NVIDIA H100 80GB HBM3" -> "H100", "cpu" -> "cpu".
    An unknown name is returned upper-cased without spaces (it still compares equal to itself)."""
    low = name.strip().lower()
    if low in ("", "cpu") or low.startswith("cpu"):
        return "cpu"
    up = name.upper()
    for fam in _FAMILIES:
        if re.search(rf"(?<![A-Z0-9]){fam}(?![0-9])", up):
            return fam
    return re.sub(r"\s+", "", up)


# Compute capability (major, minor) per generation (the names gpu_family returns).
CAPABILITY: dict[str, tuple[int, int]] = {
    "V100": (7, 0), "T4": (7, 5), "A100": (8, 0), "A800": (8, 0), "A10": (8, 6), "A10G": (8, 6),
    "L4": (8, 9), "L40": (8, 9), "L40S": (8, 9), "H100": (9, 0), "H800": (9, 0), "H20": (9, 0), "H200": (9, 0),
    "GH200": (9, 0), "B100": (10, 0), "B200": (10, 0), "GB200": (10, 0),
}

# Least compute capability for each fp8 recipe ("none" needs nothing).
FP8_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "delayed": (8, 9), "tensorwise": (8, 9), "rowwise": (8, 9), "blockwise": (9, 0), "mxfp8": (10, 0),
}


def compute_capability(kind: str | None) -> tuple[int, int] | None:
    """(major, minor) for a device name ("H100-80GB", "NVIDIA B200"); None for cpu or an unknown name."""
    if not kind:
        return None
    return CAPABILITY.get(gpu_family(kind))


def fp8_unsupported(recipe: str, kind: str | None) -> str | None:
    """Why ``recipe`` cannot run on ``kind`` (a message with the numbers), or None when it can or we cannot tell."""
    cc = compute_capability(kind)
    need = FP8_MIN_CAPABILITY.get(recipe)
    if cc is None or need is None or cc >= need:
        return None
    return (f"fp8_recipe {recipe!r} needs a GPU of compute capability SM{need[0]}{need[1]} or later; "
            f"the contract's {kind} is SM{cc[0]}{cc[1]}")
