"""Load kernel candidates and references by file path.

A candidate is one self-contained file ``kernels/<op>/<name>.py`` defining ``forward(...)`` with the
same signature as ``kernels/<op>/reference.py``. It is imported by path (not as a package), so the
workload, the verifier and the benchmark load exactly the bytes whose hash they record.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

OPS = ("rmsnorm", "swiglu", "rope", "cross_entropy", "add_rmsnorm")
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


def sha256_of(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def op_of(path: str | Path) -> str:
    """The op a candidate implements: the name of its folder (kernels/<op>/file.py, or
    kernels/<op>/generated/file.py for a generated one)."""
    folder = Path(path).resolve().parent
    op = folder.parent.name if folder.name == GENERATED else folder.name
    if op not in OPS:
        raise ValueError(f"cannot tell the op of {path}: its folder {op!r} is not one of {list(OPS)}; pass --op NAME")
    return op


def _load(path: Path, prefix: str) -> ModuleType:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    # a unique module name per content: two versions of one file never share a module
    name = f"{prefix}_{path.parent.name}_{path.stem}_{sha256_of(path)[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's @jit reads the source through the module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_candidate(path: str | Path) -> ModuleType:
    """Import a candidate file by path (TRITON_INTERPRET is set first when there is no GPU)."""
    ensure_interpreter()
    module = _load(Path(path).resolve(), "infrarsi_candidate")
    if not callable(getattr(module, "forward", None)):
        raise AttributeError(f"{path}: defines no forward(...); a candidate must define forward with the "
                             "reference's signature")
    return module


def reference_path(op: str, root: str | Path | None = None) -> Path:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {list(OPS)}")
    return Path(root or kernels_root()) / op / "reference.py"


def load_reference(op: str, root: str | Path | None = None) -> ModuleType:
    return _load(reference_path(op, root).resolve(), "infrarsi_reference")


def list_candidates(op: str, root: str | Path | None = None) -> list[Path]:
    """Candidate files for op, sorted: every .py in kernels/<op>/ except reference.py and _private files."""
    folder = reference_path(op, root).parent
    return sorted(p for p in folder.glob("*.py") if p.name != "reference.py" and not p.name.startswith("_"))
