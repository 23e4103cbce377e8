"""Run ``torchtitan.train`` (0.2.2), on a machine without a GPU as well as with one.

Usage (the same arguments as ``-m torchtitan.train``)::

    torchrun --nproc-per-node 2 launchers/torchtitan_cpu.py --job.config_file JOB.toml [--section.field V ...]

On a machine with an accelerator this only calls torchtitan's own ``main(Trainer)``: the launch runs
torchtitan unchanged. Without one, torchtitan cannot start (``tools/utils.py`` falls back to
``device_type = "cuda"``, and ``train.py`` then calls ``torch.cuda.set_device``; there is no
``--training.device`` flag), so four fixes are installed first. None changes what is computed:

1. The available device type is "cpu". torchtitan reads ``torch._utils._get_available_device_type()`` once,
   at import; with "cpu" it uses ``torch.cpu`` as its device module and the gloo backend.
2. ``torch.cpu.current_device()`` returns 0 (it returns the string "cpu"): torchtitan's
   ``distributed/utils.py`` calls ``barrier(device_ids=[device_module.current_device()])``, and a string
   device id is a TypeError in ``barrier``.
3. ``torch.cpu`` gains the memory calls torchtitan's ``DeviceMemoryMonitor`` makes (``get_device_name``,
   ``get_device_properties().total_memory``, ``memory_stats``, ``reset_peak_memory_stats``,
   ``empty_cache``), backed by this process's own peaks, so the ``memory:`` field of its step line is a
   real peak: "reserved" is the peak data segment (what RLIMIT_DATA, the memory cap on the CPU, limits),
   "active" the peak resident set. Capacity is the RLIMIT_DATA limit when one is set, else MemTotal.
   Both peaks are process-lifetime peaks (the kernel keeps no resettable peak of the data segment), so
   resetting is a no-op and each step line reports the peak so far.
4. FSDP2 reduces gradients with sum-only collectives. torchtitan sets each FSDP module's gradient divide
   factor to 1.0 (it scales the loss by the global token count itself), which FSDP turns into
   ``ReduceOp.PREMUL_SUM(1.0)``; gloo has no PREMUL_SUM. With sum-only reduction FSDP reduces with SUM and
   multiplies by 1/1.0 afterwards: the same numbers.

Kernel patches (``INFRARSI_PATCHES``, a JSON object op -> candidate file) are installed by
:mod:`torchtitan_patches` (next to this file) before torchtitan's modules are imported, on any device.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from infrarsi.procmem import capacity_bytes, peak_data_bytes, peak_rss_bytes  # standard library only


class _CPUProperties:
    """What ``get_device_properties`` returns, the fields torchtitan reads."""

    def __init__(self) -> None:
        self.total_memory = capacity_bytes()
        self.name = "cpu"


def _memory_stats(device: object = None) -> dict[str, int]:
    return {"active_bytes.all.peak": peak_rss_bytes(), "reserved_bytes.all.peak": peak_data_bytes(),
            "num_alloc_retries": 0, "num_ooms": 0}


def install_cpu_fixes() -> None:
    """The four fixes above. Call before anything imports torchtitan."""
    import torch
    import torch._utils
    from torch.distributed.fsdp import FSDPModule

    # 1. device type "cpu" (torchtitan's tools/utils.py: `_get_available_device_type() or "cuda"`)
    torch._utils._get_available_device_type = lambda: "cpu"
    # 2. an integer current device, for barrier(device_ids=[...])
    torch.cpu.current_device = lambda: 0
    # 3. memory calls, backed by this process's peaks
    torch.cpu.get_device_name = lambda device=None: "cpu"
    torch.cpu.get_device_properties = lambda device=None: _CPUProperties()
    torch.cpu.memory_stats = _memory_stats
    torch.cpu.reset_peak_memory_stats = lambda device=None: None
    torch.cpu.empty_cache = lambda: None
    # 4. sum-only gradient reduction wherever torchtitan sets a divide factor (gloo has no PREMUL_SUM)
    set_factor = FSDPModule.set_gradient_divide_factor

    def set_gradient_divide_factor(self: FSDPModule, factor: float) -> None:
        set_factor(self, factor)
        self.set_force_sum_reduction_for_comms(True)

    FSDPModule.set_gradient_divide_factor = set_gradient_divide_factor


def needs_cpu_fixes() -> bool:
    """True where torch finds no accelerator (CUDA, ROCm, XPU, ...): torchtitan would assume CUDA."""
    import torch._utils

    return torch._utils._get_available_device_type() is None


def main() -> None:
    if needs_cpu_fixes():
        install_cpu_fixes()
    if os.environ.get("INFRARSI_PATCHES"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import torchtitan_patches

        torchtitan_patches.install_from_env()
    from torchtitan.train import Trainer
    from torchtitan.train import main as train_main

    train_main(Trainer)


if __name__ == "__main__":
    main()
