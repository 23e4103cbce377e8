"""A kernel candidate value, ``PATH`` or ``PATH@VARIANT``, read without running its file.

A file may declare named settings of its own module constants as plain data (one kernel, several tile
shapes), e.g. ``VARIANTS = {"rows4": {"ROWS_PER_PROGRAM": 4}, "rows16": {"ROWS_PER_PROGRAM": 16}}``. A
candidate value is then ``PATH`` (the file with its constants as written) or ``PATH@VARIANT``
(``kernels/rmsnorm/triton_rows.py@rows16``). This module splits such a value and checks its variant against
the file's source (:func:`parse_candidate`); it imports nothing else of the project's, so that the contract's
scope check (contract/scope.py) and the kernels (kernels/loader.py, which loads and runs them) share it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VARIANTS = "VARIANTS"  # the module-level dict of a file's named settings
_VARIANT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONSTANT_TYPES = (bool, int, float, str)  # what a setting may set: a literal module constant of one of these


class CandidateError(ValueError):
    """A candidate value that cannot be loaded as written (one line: the value, what is wrong, the fix)."""


@dataclass(frozen=True)
class Candidate:
    """A kernel candidate: a file and, for a file that declares VARIANTS, one of its named settings."""

    path: Path  # the file: what the lint reads and the pin hashes, whatever the variant
    variant: str | None = None  # a key of the file's VARIANTS; None: its constants as written
    settings: tuple[tuple[str, Any], ...] = ()  # (constant, value) the variant sets, in the file's order

    @property
    def spec(self) -> str:
        """The candidate as a knob value, a ``--kernel`` argument and a verdict's key: ``PATH[@VARIANT]``."""
        return f"{self.path}@{self.variant}" if self.variant else str(self.path)

    @property
    def name(self) -> str:
        """Short name for tables and plots: ``triton_rows.py@rows16``."""
        return f"{self.path.name}@{self.variant}" if self.variant else self.path.name

    def resolved(self) -> Candidate:
        return Candidate(self.path.resolve(), self.variant, self.settings)

    def __str__(self) -> str:
        return self.spec


def split_spec(value: str | Path) -> tuple[str, str | None]:
    """``"dir/f.py@rows16"`` -> ``("dir/f.py", "rows16")``; ``"dir/f.py"`` -> ``("dir/f.py", None)``. Text only
    (reads no file): what scope checks and apply use for the file a value names. A value ending in ``.py`` is a
    path even with an ``@`` in it; otherwise the text after the last ``@`` is the variant."""
    text = str(value)
    if text.endswith(".py") or "@" not in text:
        return text, None
    path, _, variant = text.rpartition("@")
    if "/" in variant or not path.endswith(".py"):
        return text, None  # an "@" in a folder name, not a variant
    return path, variant


def spec_key(value: str | Path) -> str:
    """The key a value's verdict and pin are recorded under: its file resolved, plus ``@VARIANT``."""
    path, variant = split_spec(value)
    key = str(Path(path).resolve())
    return f"{key}@{variant}" if variant is not None else key


def candidate_path(value: str | Path | Candidate) -> Path:
    """The file a candidate value names (text only: the file need not exist)."""
    return value.path if isinstance(value, Candidate) else Path(split_spec(value)[0])


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _a(value: Any) -> str:
    """'an int', 'a str': the type of value with its article."""
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _module_constants(tree: ast.Module) -> tuple[dict[str, Any], Any]:
    """(upper-case module-level constants with a literal value, the VARIANTS node's literal or None)."""
    constants: dict[str, Any] = {}
    variants: Any = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        if target.id == VARIANTS:
            variants = _literal(value)
        elif target.id.isupper():
            v = _literal(value)
            if isinstance(v, _CONSTANT_TYPES):
                constants[target.id] = v
    return constants, variants


def variants_of(path: str | Path) -> dict[str, dict[str, Any]]:
    """The file's ``VARIANTS`` ({} when it declares none), read from its source without running it, each
    setting checked against the module's constants: it must set an upper-case module-level constant with a
    literal default, to a value of the default's type. Raises CandidateError (one line) otherwise."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        raise CandidateError(f"{path}: not valid Python ({e.msg}, line {e.lineno}); fix the file") from None
    constants, variants = _module_constants(tree)
    if variants is None:
        return {}
    where = f"{path}: {VARIANTS}"
    if variants is _NOT_LITERAL or not isinstance(variants, dict) or not variants:
        raise CandidateError(f"{where} must be a non-empty literal dict {{name: {{CONSTANT: value}}}}, e.g. "
                             f"{{\"rows4\": {{\"ROWS_PER_PROGRAM\": 4}}}}; write it as plain data")
    out: dict[str, dict[str, Any]] = {}
    for name, setting in variants.items():
        if not isinstance(name, str) or not _VARIANT_NAME.fullmatch(name):
            raise CandidateError(f"{where} has the variant name {name!r}; a variant name is a word of letters, "
                                 f"digits and _ (e.g. \"rows16\")")
        if not isinstance(setting, dict) or not setting:
            raise CandidateError(f"{where}[{name!r}] is {setting!r}; a variant is a non-empty dict "
                                 f"{{CONSTANT: value}} of the module's constants")
        for key, value in setting.items():
            if key not in constants:
                known = ", ".join(sorted(constants)) or "none"
                raise CandidateError(f"{where}[{name!r}] sets {key!r}, which is not one of the module's constants "
                                     f"({known}); set a module-level constant, or add `{key} = <default>` to the file")
            default = constants[key]
            if type(value) is not type(default):
                raise CandidateError(f"{where}[{name!r}][{key!r}] = {value!r} is {_a(value)}, but {key}'s default "
                                     f"{default!r} is {_a(default)}; write {_a(default)}")
        out[name] = dict(setting)
    return out


def parse_candidate(value: str | Path | Candidate, *, root: str | Path | None = None) -> Candidate:
    """A candidate value (``PATH`` or ``PATH@VARIANT``) checked against its file's VARIANTS. Raises
    CandidateError naming the value and the fix: an unknown variant, a variant of a file that declares no
    VARIANTS (or has none by that name), a setting of something that is not one of the module's constants or
    of another type than its default, a variant of a file that does not exist. A ``PATH`` alone is not read.
    ``root``: where a relative path is read (default: the working directory); the Candidate keeps it as written."""
    if isinstance(value, Candidate):
        value = value.spec
    path_text, variant = split_spec(value)
    path = Path(path_text)
    if variant is None:
        return Candidate(path)
    if not _VARIANT_NAME.fullmatch(variant):
        raise CandidateError(f"kernel candidate {str(value)!r}: {variant!r} is not a variant name (letters, digits, "
                             f"_); write PATH@VARIANT, e.g. kernels/rmsnorm/triton_rows.py@rows16")
    file = Path(root) / path if root is not None else path
    if not file.is_file():
        raise CandidateError(f"kernel candidate {str(value)!r}: no such file {path_text}; fix the path (relative to "
                             f"the repository root)")
    try:
        variants = variants_of(file)
    except CandidateError as e:
        raise CandidateError(f"kernel candidate {str(value)!r}: {e}") from None
    if not variants:
        raise CandidateError(f"kernel candidate {str(value)!r}: {path_text} declares no {VARIANTS}; name the file "
                             f"alone ({path_text}) for its constants as written, or add {VARIANTS} = "
                             f"{{{variant!r}: {{...}}}} to it")
    if variant not in variants:
        raise CandidateError(f"kernel candidate {str(value)!r}: {path_text} has no variant {variant!r}; use one of "
                             f"{', '.join(variants)} (or {path_text} alone for its constants as written)")
    return Candidate(path, variant, tuple(variants[variant].items()))
