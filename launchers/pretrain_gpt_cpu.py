"""Megatron-LM's ``pretrain_gpt.py`` for megatron-core 0.16 on a machine without a GPU as well as with one.

Usage (Megatron-LM's flags; see infrarsi/adapters/megatron/cpu/gpt.py for what it trains)::

    torchrun --nproc-per-node 2 launchers/pretrain_gpt_cpu.py --num-layers 4 --hidden-size 256 ... \\
        --tensor-model-parallel-size 2

Its name matches ``pretrain_*.py`` so that the Megatron adapter and ``infrarsi-launch`` read a launch of it as
they read Megatron-LM's. The training loop is :mod:`infrarsi.adapters.megatron.cpu.gpt` over megatron-core's own
``GPTModel``, ``DistributedDataParallel``, optimizer and pipeline schedules (megatron-core's local layer spec:
Transformer Engine does not install without CUDA).

On a machine with a GPU this only runs the loop: nothing is installed. Without one, megatron-core cannot run a
step, and eight shims are installed first (:mod:`infrarsi.adapters.megatron.cpu.shims` explains each); none changes
what is computed:

1. "cuda" is the CPU: CUDA device arguments of torch calls go to the CPU, ``Tensor.cuda()`` is the tensor,
   no pinned memory;
2. ``torch.cuda.current_device()`` is 0, ``device_count()`` 1;
3. megatron-core's CUDA RNG tracker swaps its named states in and out of the CPU generator;
4. ``Tensor.type()`` names report CUDA (megatron-core's optimizers group parameters by these names);
5. CUDA streams, events and ``synchronize`` are in-order no-ops;
6. ``barrier(device_ids=...)`` drops the CUDA ids gloo refuses;
7. the MoE all-to-all split sizes become host (numpy) lists as after a device-to-host copy;
8. megatron-core's ``torch.compile``'d fusions run eagerly.

One setting of the CPU runtime, made before torch loads: oneDNN's cache of JIT-compiled kernels (one per matmul
shape, 1024 by default) is bounded at 64 entries (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, unless set). A dropless
MoE's experts see new token counts every step, so each step compiles new kernels; with the default the cache kept
growing for hundreds of steps (a rank's data segment 2.3 -> 4.0 GiB over 6 iterations of contracts/
megatron-cpu-moe.toml, measured; live tensors constant at 334 MiB). At 64 it fills in the first iteration and stays
(2.0 GiB); a dense model uses fewer shapes than that (1.9 s per iteration either way, measured).

Kernel patches are not wired for this launcher (``INFRARSI_PATCHES`` is refused with a one-line error).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's infrarsi, when run as a script


def main(extra_args_provider=None) -> int:
    """Train (see the module doc); a fork's ``pretrain_gpt.py`` may call this with its ``extra_args_provider``, as
    it calls Megatron-LM's ``pretrain``: its flags are then parsed strictly with the rest."""
    if os.environ.get("INFRARSI_PATCHES"):
        print("pretrain_gpt_cpu.py: error: kernel patches (INFRARSI_PATCHES) are not wired for megatron-core",
              file=sys.stderr)
        return 2
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")  # before torch loads (see above)
    import warnings

    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex) (and Apex are|is) not installed.*")
    from infrarsi.adapters.megatron.cpu.shims import install_cpu_fixes, needs_cpu_fixes

    if needs_cpu_fixes():
        install_cpu_fixes()
    from infrarsi.adapters.megatron.cpu.gpt import main as train

    return train(extra_args_provider=extra_args_provider)


if __name__ == "__main__":
    sys.exit(main())
