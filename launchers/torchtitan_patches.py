"""Kernel patches for torchtitan 0.2.2: replace an op of its llama3 model by a kernel candidate file.

``INFRARSI_PATCHES`` is a JSON object ``{"rmsnorm": "kernels/rmsnorm/triton_rows.py@rows4"}``: per op, a candidate
file, or ``FILE@VARIANT`` for one of the file's named settings (infrarsi/kernels/loader.py). For each op,
:func:`install_from_env` loads the candidate through infrarsi's kernel loader (the exact bytes whose sha256 it
prints, its variant's constants set) and makes torchtitan's llama3 model use it, before the model is built:

- ``rmsnorm``: ``torchtitan/models/llama3/model/model.py`` builds its norms as ``nn.RMSNorm(dim,
  eps=norm_eps)`` (attention_norm and ffn_norm per layer, and the final norm). The module's ``nn`` name is
  pointed at a namespace where ``RMSNorm`` is :class:`PatchedRMSNorm`, a subclass with the same parameter
  (``weight``, same init) whose forward is the candidate's ``forward(x, weight, eps)``. Everything else in
  that namespace is ``torch.nn``; no other module changes.

The candidate's forward is spot-checked as minigpt's is (``infrarsi.kernels.insitu.spot_checked``): one of
the first 8 calls (drawn after each call), then 1 in ``INFRARSI_SPOT_EVERY`` (default 50), is recomputed by ``kernels/<op>/reference.py``
in fp64 on the same tensors, output and gradients; a mismatch beyond the reference's per-dtype tolerance
prints ``infrarsi kernel spot check failed: rmsnorm=PATH ...`` and ends the rank with status 3, which the
log classifier turns into ``numerics_drift`` (and the run stage disqualifies the candidate).

Proof that the patch ran, not just that it was installed: every patched forward counts its calls, and at
exit each rank prints one line to stderr::

    [infrarsi-patch] rmsnorm kernels/rmsnorm/triton_rows.py@rows4 sha256=<64 hex of the file> calls=<n>

On a machine without CUDA, Triton candidates run in Triton's interpreter: ``TRITON_INTERPRET=1`` is set
before the candidate (and so triton) is imported.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import types

PATCH_ENV = "INFRARSI_PATCHES"
OPS = ("rmsnorm",)
CALLS: dict[str, int] = {}


class PatchError(RuntimeError):
    """A patch that cannot be installed; names the op, the file and the fix."""


def load_candidate(op: str, path: str) -> tuple[types.ModuleType, str]:
    """The candidate module (``path``: FILE or FILE@VARIANT, loaded by infrarsi's kernel loader) and the sha256 of
    its file's bytes."""
    from infrarsi.kernels import loader
    from infrarsi.kernels.verdicts import REFUSED, refusal

    p = loader.candidate_path(path)
    if not p.is_file():
        raise PatchError(f"{PATCH_ENV}: {op} candidate {p} does not exist (paths are relative to the working "
                         "directory; run from the repository root)")
    try:
        loader.parse_candidate(path)
    except loader.CandidateError as e:
        raise PatchError(f"{PATCH_ENV}: {e}") from None
    why = refusal(op, path)  # bytes not the ones verified at run start (INFRARSI_KERNEL_VERDICTS)
    if why is not None:
        raise PatchError(f"{REFUSED}: {why}")
    data = p.read_bytes()
    try:
        mod = loader.load_candidate(path)
    except AttributeError:
        raise PatchError(f"{PATCH_ENV}: {p} defines no forward(...); a candidate has reference.py's signature") from None
    return mod, hashlib.sha256(data).hexdigest()


def _patch_rmsnorm(forward) -> None:
    import torch
    from torch import nn

    import torchtitan.models.llama3.model.model as llama3_model

    class PatchedRMSNorm(nn.RMSNorm):
        """nn.RMSNorm whose forward is a kernel candidate: y = x / sqrt(mean(x^2) + eps) * weight."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            CALLS["rmsnorm"] = CALLS.get("rmsnorm", 0) + 1
            eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
            return forward(x, self.weight, eps)

    ns = types.ModuleType("torch.nn (infrarsi-patched)")
    ns.__dict__.update({k: getattr(nn, k) for k in dir(nn) if not k.startswith("__")})
    ns.RMSNorm = PatchedRMSNorm
    llama3_model.nn = ns


def install(patches: dict[str, str]) -> list[str]:
    """Install each op's candidate; returns the ops patched. Unknown ops are an error naming the known ones."""
    unknown = sorted(set(patches) - set(OPS))
    if unknown:
        raise PatchError(f"{PATCH_ENV}: torchtitan has no patch hook for {unknown}; known: {', '.join(OPS)}")
    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"  # before the candidate imports triton
    done = []
    from infrarsi.kernels.insitu import spot_checked

    for op, path in sorted(patches.items()):
        mod, sha = load_candidate(op, path)
        if op == "rmsnorm":
            _patch_rmsnorm(spot_checked(op, path, mod).forward)
        CALLS.setdefault(op, 0)
        atexit.register(_report, op, path, sha)
        done.append(op)
    return done


def _report(op: str, path: str, sha: str) -> None:
    print(f"[infrarsi-patch] {op} {path} sha256={sha} calls={CALLS.get(op, 0)}", file=sys.stderr, flush=True)


def install_from_env() -> list[str]:
    raw = os.environ.get(PATCH_ENV, "")
    if not raw:
        return []
    try:
        patches = json.loads(raw)
    except json.JSONDecodeError as e:
        raise PatchError(f"{PATCH_ENV} is not JSON ({e}); expected {{\"rmsnorm\": \"kernels/rmsnorm/FILE.py[@VARIANT]\"}}") from None
    if not isinstance(patches, dict) or not all(isinstance(v, str) for v in patches.values()):
        raise PatchError(f"{PATCH_ENV} must be a JSON object op -> candidate (FILE or FILE@VARIANT), got {raw[:80]!r}")
    return install(patches)
