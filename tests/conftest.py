"""Session-wide test set-up. TRITON_INTERPRET must be set before triton is first imported, and some test modules
import frameworks (megatron-core, torchtitan) that import triton at collection, before tests/kernels/conftest.py
is reached: so it is set here, first, when there is no GPU."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
