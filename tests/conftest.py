"""Test-session set-up shared by every folder.

Without a GPU, Triton kernels run in Triton's interpreter, which must be chosen before triton is first
imported (its language helpers are @jit functions made at import). Test modules collected before
tests/kernels/ (megatron-core, torchtitan) import triton, so the choice is made here, first.
"""

from __future__ import annotations

import os
import shutil

if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
