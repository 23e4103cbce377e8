"""A framework is named only in its own place: ``infrarsi/adapters/<framework>/`` (or the single module
``infrarsi/adapters/<framework>.py``) and its one line in the registry (``adapters/registry.py``'s ``SPECS``).

The rule, read from the source with ``ast`` (comments are not in it):
* the names checked are the folders of the frameworks that have one, ``megatron`` and ``torchtitan``, matched
  case-insensitively as a substring (``Megatron-LM``, ``MegatronLaunch``, ``overhead_megatron`` all count);
* a module names a framework when its path does, or when one appears in a string constant that is not a docstring (f-string parts
  included), in an identifier (a variable, attribute, function, class, parameter or keyword name) or in an imported
  module's path or name;
* docstrings (a string that is a statement of its own: a module's, class's, function's or attribute's) are prose
  and may name them.
There is no list of modules let off.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "infrarsi"
FRAMEWORKS = ("megatron", "torchtitan")
_NAMES = re.compile("|".join(FRAMEWORKS), re.IGNORECASE)


def _registered() -> list[str]:
    from infrarsi.adapters.registry import SPECS

    return list(SPECS)


def _own_place(rel: str, registered: list[str]) -> bool:
    return any(rel.startswith(f"infrarsi/adapters/{fw}/") or rel == f"infrarsi/adapters/{fw}.py" for fw in registered)


def _docstrings(tree: ast.AST) -> set[int]:
    """Strings that are statements of their own: a module's, class's or function's docstring, an attribute's
    docstring under it (``x: int = 0`` then ``\"\"\"what x is\"\"\"``)."""
    return {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}


def _registry_lines(tree: ast.AST) -> set[int]:
    """The registry's one line per framework: the nodes inside its ``SPECS = {...}`` table."""
    return {id(x) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Name) and t.id == "SPECS" for x in ast.walk(n)}


def names_in(path: Path, *, registry: bool = False) -> list[str]:
    """``line: word`` for each place ``path`` names a framework, by the rule above."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree) | (_registry_lines(tree) if registry else set())
    found = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        words: list[str] = []
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            words = [n.value]
        elif isinstance(n, ast.Name):
            words = [n.id]
        elif isinstance(n, ast.Attribute):
            words = [n.attr]
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words = [n.name]
        elif isinstance(n, ast.arg):
            words = [n.arg]
        elif isinstance(n, ast.keyword) and n.arg:
            words = [n.arg]
        elif isinstance(n, ast.alias):
            words = [n.name, n.asname or ""]
        elif isinstance(n, ast.ImportFrom):
            words = [n.module or ""]
        for w in words:
            m = _NAMES.search(w)
            if m:
                found.append(f"{getattr(n, 'lineno', '?')}: {w[:60]!r}")
    return found


def offenders() -> dict[str, list[str]]:
    registered = _registered()
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if _own_place(rel, registered):
            continue
        got = names_in(p, registry=rel == "infrarsi/adapters/registry.py")
        if _NAMES.search(rel):  # the module's own path names one (estimate/megatron.py)
            got = [f"path: {rel}", *got]
        if got:
            out[rel] = got
    return out


def test_the_rule_catches_a_name_in_code_and_lets_prose_be(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Megatron-LM and torchtitan in prose."""\n# megatron in a comment\n'
                 'def f(x):\n    """torchtitan."""\n    return x == "megatron"\n'
                 'import infrarsi.adapters.torchtitan as tt\nMegatronThing = 1\nmsg = f"{x} needs Torchtitan"\n')
    lines = sorted({g.split(":")[0] for g in names_in(f)})
    assert lines == ["5", "6", "7", "8"]  # the compared string, the import, the class-like name, the f-string


# Where what used to name a framework went: the FLOPs conventions and the step-time model's bands are values each spec
# names (transformer.FlopsConvention, with its words for the report's MFU formula; adapters/spec.StepPricing); the
# contract's workload.adapter is a name the registry's list checks where the contract is loaded at the edge; each
# framework's fidelity count, spelling table (adapters/<framework>/spelling.py), pre-flight estimate and the Megatron
# model the CPU trials run (adapters/megatron/cpu/) are in its folder, over the framework-free fakestep/; the simulated
# cluster's log names its traceback frame as its adapter hands it in (--oom-frame); the priors' LLM prompt and the
# rules' messages name the framework by its spec's title.


def test_no_module_outside_a_frameworks_folder_names_a_framework():
    got = offenders()
    assert got == {}, "modules outside adapters/<framework>/ that name a framework (move the code into the framework's " \
        "folder, or ask its spec):\n" + "\n".join(f"{k}: {v[:3]}" for k, v in got.items())
