"""PROBE: at import the candidate puts a key in its session keyring (add_key), the kernel state that would carry
data from one verification, or one trial, to the next. Where the call goes through it ends its process (exit 5);
where it is refused it computes honestly, with the shipped Triton RMSNorm.
Expected: refused (EPERM) by the verifier's seccomp filter, so the candidate passes; the test also runs it with the
filter left out, where it must fail.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform

from infrarsi.kernels.loader import kernels_root

_libc = ctypes.CDLL(None, use_errno=True)
_ADD_KEY = {"x86_64": 248, "aarch64": 217}[platform.machine()]
if _libc.syscall(_ADD_KEY, b"user", b"infrarsi-probe", b"from verification A", 19, -3) >= 0:  # -3: the session's
    os._exit(5)

_spec = importlib.util.spec_from_file_location("_shipped_rmsnorm", kernels_root() / "rmsnorm" / "triton_rows.py")
_shipped = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shipped)
globals().update({k: v for k, v in vars(_shipped).items() if not k.startswith("__")})
