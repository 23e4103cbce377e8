"""This process's memory as the Linux kernel counts it: fields of ``/proc/self/status``, the peak data segment
(what RLIMIT_DATA, the memory cap of a CPU trial, limits), the peak resident set and the capacity.

Standard library only, so ``launchers/torchtitan_cpu.py`` can import it before torch or torchtitan load.
"""

from __future__ import annotations

import resource


def status_kib(*keys: str) -> dict[str, int]:
    """``/proc/self/status`` fields (VmPeak, VmSize, VmData, VmRSS, ...) in KiB."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0])
    return out


def peak_data_bytes() -> int:
    """Peak data segment: VmPeak minus the mappings that are not data (VmSize - VmData), fixed after start-up."""
    s = status_kib("VmPeak", "VmSize", "VmData")
    return (s["VmPeak"] - (s["VmSize"] - s["VmData"])) * 1024


def peak_rss_bytes() -> int:
    """Peak resident set."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ru_maxrss is KiB on Linux


def capacity_bytes() -> int:
    """The RLIMIT_DATA limit when one is set, else MemTotal."""
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    if soft != resource.RLIM_INFINITY:
        return int(soft)
    return _meminfo_total()


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0
