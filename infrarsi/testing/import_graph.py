"""The project's import graph, read from the source (nothing imported): which package imports which, counting
imports inside functions and under ``if TYPE_CHECKING:`` too. tests/test_project_imports.py holds the layering to
it; scripts/gen_docs.py draws docs/architecture.md from it.

A "package" is a folder of ``infrarsi/`` or one of its top-level modules (``errors``, ``io``, ...); a name that is
no module of the tree (``from infrarsi import __version__``) is the root's, ``infrarsi``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]  # infrarsi/
ROOT = PKG.parent


def module_of(path: Path) -> tuple[str, bool]:
    """(the dotted module name of ``path``, whether it is a package's ``__init__``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imports(path: Path) -> set[str]:
    """Every infrarsi module ``path`` imports, at the top or inside a function (an ``if TYPE_CHECKING:`` block too)."""
    mod, is_pkg = module_of(path)
    out: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (n.level - 1)]
                stem = ".".join(base + ([n.module] if n.module else []))
                out |= {stem} if n.module else {f"{stem}.{a.name}" for a in n.names}
            else:
                out.add(n.module or "")
    return {m for m in out if m == "infrarsi" or m.startswith("infrarsi.")}


def package(module: str) -> str:
    """The package (or top-level module) of ``module``: ``infrarsi.search.tuner`` -> ``search``."""
    parts = module.split(".")
    if len(parts) < 2 or not ((PKG / parts[1]).is_dir() or (PKG / f"{parts[1]}.py").is_file()):
        return "infrarsi"
    return parts[1]


def package_graph() -> dict[str, dict[str, list[str]]]:
    """package -> the packages it imports -> the imports that make that edge (``file -> module``)."""
    out: dict[str, dict[str, list[str]]] = {}
    for p in sorted(PKG.rglob("*.py")):
        here = package(module_of(p)[0])
        out.setdefault(here, {})
        for m in sorted(imports(p)):
            there = package(m)
            if there != here:
                out[here].setdefault(there, []).append(f"{p.relative_to(ROOT)} -> {m}")
    return out


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def layers(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The packages in layers, lowest first: a package's layer is one above the highest it imports (the graph has no
    cycle: :func:`cycles` is empty), each layer sorted by name."""
    level: dict[str, int] = {}

    def of(v: str, seen: tuple[str, ...] = ()) -> int:
        if v in seen:
            raise ValueError(f"import cycle through {' -> '.join((*seen, v))}")
        if v not in level:
            level[v] = 1 + max((of(w, (*seen, v)) for w in graph.get(v, {})), default=-1)
        return level[v]

    for v in graph:
        of(v)
    return [sorted(v for v in level if level[v] == n) for n in range(max(level.values(), default=-1) + 1)]
