"""Triton kernel machinery: load candidates by path, verify them against the reference, benchmark them.

    from infrarsi.kernels.verify import verify
    result = verify("kernels/rmsnorm/triton_rows.py@rows16")  # VerifyResult(verdict, reasons, cases, sha256)
    from infrarsi.kernels import load_candidate, list_candidates, op_of, parse_candidate   # PATH[@VARIANT]

The kernels themselves live in kernels/<op>/ at the repository root. Importing this package does
not import triton (TRITON_INTERPRET must be set before that happens on a machine without a GPU).
The verify() function is not re-exported here, so `infrarsi.kernels.verify` stays the module.
"""

from .loader import OPS, Candidate, CandidateError, list_candidates, load_candidate, load_reference, op_of, parse_candidate

__all__ = ["OPS", "Candidate", "CandidateError", "list_candidates", "load_candidate", "load_reference", "op_of",
           "parse_candidate"]
