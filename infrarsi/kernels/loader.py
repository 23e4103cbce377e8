"""Load kernel candidates and references by file path.

A candidate is one self-contained file ``kernels/<op>/<name>.py`` defining ``forward(...)`` with the
same signature as ``kernels/<op>/reference.py``. It is imported by path (not as a package), so the
workload, the verifier and the benchmark load exactly the bytes whose hash they record.

A file may declare named settings of its own module constants as plain data (``VARIANTS``); a candidate value
is then ``PATH`` or ``PATH@VARIANT``: infrarsi/candidate.py reads and checks it without running the file (its
names are imported here too), and :func:`load_candidate` returns a fresh module with the variant's constants set. The file's bytes
(its lint, its sha256) are shared by its variants; verdicts and pins are per candidate value.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from ..candidate import (VARIANTS, Candidate, CandidateError, candidate_path, parse_candidate, spec_key,  # noqa: F401
                         split_spec, variants_of)
from .ops import OPS  # noqa: F401  (the op table: kernels/ops.py)

# kernels/ at the repository root, beside the infrarsi package; INFRARSI_KERNELS overrides it.
KERNELS_ROOT = Path(__file__).resolve().parents[2] / "kernels"
GENERATED = "generated"  # kernels/<op>/generated/<name>.py: candidates an LLM wrote (generate.py)


def generated_folder(op: str) -> str:
    """Where the run stage writes generated candidates of op, relative to the repository (posix)."""
    return f"kernels/{op}/{GENERATED}"


def kernels_root() -> Path:
    return Path(os.environ.get("INFRARSI_KERNELS", KERNELS_ROOT))


def interpreter_ready() -> bool:
    """Whether candidates can run in this process: a CUDA device, or triton (not yet) imported in
    interpreter mode. triton.language's own helpers (tl.sum, tl.zeros) are @jit functions made
    when triton is first imported, so TRITON_INTERPRET set after that comes too late."""
    import torch

    if torch.cuda.is_available():
        return True
    tl = sys.modules.get("triton.language")
    if tl is None:
        return True
    return type(tl.zeros).__name__ == "InterpretedFunction"


def ensure_interpreter() -> bool:
    """Set TRITON_INTERPRET=1 when no CUDA device is present; True when interpreting.

    Must run before triton is first imported (see interpreter_ready); raises if it is too late.
    """
    import torch

    if not torch.cuda.is_available():
        if not interpreter_ready():
            raise RuntimeError("triton was imported before TRITON_INTERPRET=1 was set, and there is no GPU: "
                               "set TRITON_INTERPRET=1 in the environment, or import infrarsi.kernels first")
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET") == "1"


def sha256_of(path: str | Path | Candidate) -> str:
    """The sha256 of a candidate's file (its variants share it) or of any file."""
    return hashlib.sha256(candidate_path(path).read_bytes()).hexdigest()


def op_of(path: str | Path | Candidate) -> str:
    """The op a candidate implements: the name of its file's folder (kernels/<op>/file.py, or
    kernels/<op>/generated/file.py for a generated one)."""
    folder = candidate_path(path).resolve().parent
    op = folder.parent.name if folder.name == GENERATED else folder.name
    if op not in OPS:
        raise ValueError(f"cannot tell the op of {path}: its folder {op!r} is not one of {list(OPS)}; pass --op NAME")
    return op


def _load(path: Path, prefix: str, variant: str | None = None) -> ModuleType:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    # a unique module name per content and variant: two versions, or two variants, of one file never share one
    name = f"{prefix}_{path.parent.name}_{path.stem}_{sha256_of(path)[:12]}_{variant or 'asis'}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's @jit reads the source through the module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_candidate(value: str | Path | Candidate) -> ModuleType:
    """Import a candidate by its value, ``PATH`` or ``PATH@VARIANT`` (TRITON_INTERPRET is set first when there
    is no GPU): a module of its own each call, with the variant's constants set on it (the host code reads
    them when it launches). Raises CandidateError for a bad variant, FileNotFoundError for a missing file."""
    cand = parse_candidate(value)
    ensure_interpreter()
    module = _load(cand.path.resolve(), "infrarsi_candidate", cand.variant)
    if not callable(getattr(module, "forward", None)):
        raise AttributeError(f"{cand.path}: defines no forward(...); a candidate must define forward with the "
                             "reference's signature")
    for key, val in cand.settings:
        setattr(module, key, val)
    return module


def reference_path(op: str, root: str | Path | None = None) -> Path:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {list(OPS)}")
    return Path(root or kernels_root()) / op / "reference.py"


def load_reference(op: str, root: str | Path | None = None) -> ModuleType:
    return _load(reference_path(op, root).resolve(), "infrarsi_reference")


def list_candidates(op: str, root: str | Path | None = None) -> list[Candidate]:
    """The shipped candidates of op, sorted by file: every .py in kernels/<op>/ except reference.py and _private
    files, one Candidate per variant of a file that declares VARIANTS (in its order), else the file alone."""
    folder = reference_path(op, root).parent
    out: list[Candidate] = []
    for p in sorted(p for p in folder.glob("*.py") if p.name != "reference.py" and not p.name.startswith("_")):
        variants = variants_of(p)
        out += [Candidate(p, name, tuple(s.items())) for name, s in variants.items()] if variants else [Candidate(p)]
    return out
