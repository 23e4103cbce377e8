"""Triton kernel machinery: load candidates by path, verify them against the reference, benchmark them.

    from infrarsi.kernels.verify import verify
    result = verify("kernels/rmsnorm/triton_rows4.py")   # VerifyResult(verdict, reasons, cases, sha256)
    from infrarsi.kernels import load_candidate, list_candidates, op_of

The kernels themselves live in kernels/<op>/ at the repository root. Importing this package does
not import triton (TRITON_INTERPRET must be set before that happens on a machine without a GPU).
The verify() function is not re-exported here, so `infrarsi.kernels.verify` stays the module.
"""

from .loader import OPS, list_candidates, load_candidate, load_reference, op_of

__all__ = ["OPS", "list_candidates", "load_candidate", "load_reference", "op_of"]
