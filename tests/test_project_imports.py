"""A broken import of the project's own modules fails loudly: no vanished sub-command, no silent skip.

Only optional third-party extras may be skipped or guarded. Each check runs in a fresh interpreter with
one project module made unimportable (``sys.modules[name] = None`` makes ``import name`` raise).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from infrarsi.testing import import_graph

TESTS = Path(__file__).resolve().parent


def _with_broken(module: str, code: str) -> subprocess.CompletedProcess:
    prog = f"import sys; sys.modules[{module!r}] = None\n{code}"
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["infrarsi.bank.cli", "infrarsi.kernels.cli"])
def test_cli_does_not_drop_a_subcommand_whose_module_is_broken(module):
    r = _with_broken(module, "from infrarsi import cli; cli._register_tools()")
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("module, call", [
    ("infrarsi.priors.offline", "run.memory_estimate(None, None)"),
    ("infrarsi.priors", "run.load_priors(None, None, None, None)"),
    ("infrarsi.bank", "run.bank_seed(None, None, None, [], None)"),
])
def test_run_stage_does_not_swallow_a_broken_project_import(module, call):
    r = _with_broken(module, f"from infrarsi.stages import run\n{call}")
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, r.stderr[-500:]


def test_no_test_skips_on_the_projects_own_modules():
    pat = re.compile(r"importorskip\(\s*['\"]infrarsi|except ImportError[^\n]*\n\s*pytest\.skip")
    offenders = []
    for p in TESTS.rglob("*.py"):
        text = p.read_text()
        for m in pat.finditer(text):
            offenders.append(f"{p.relative_to(TESTS)}:{text[:m.start()].count(chr(10)) + 1}")
    assert offenders == []


# ------------------------------------------------------------------ the import graph, read from the source
ROOT = TESTS.parent
PKG = ROOT / "infrarsi"
_imports, _package = import_graph.imports, import_graph.package


@pytest.mark.parametrize("floor", ["trial", "candidate.py"])
def test_the_types_floor_imports_nothing_else_of_the_projects(floor):
    """The types floor (infrarsi/trial/) and the kernel candidate's value (infrarsi/candidate.py: PATH@VARIANT,
    read by the contract's scope and by the kernels) import nothing else of the project's."""
    files = [PKG / floor] if floor.endswith(".py") else list((PKG / floor).rglob("*.py"))
    own = floor.removesuffix(".py")
    out = {f"{p.relative_to(ROOT)} -> {m}" for p in files for m in _imports(p) if _package(m) != own}
    assert out == set()


@pytest.mark.parametrize("package, never", [
    ("rundir", "execute"),  # the records are the floor's types; the executors write through RunDir
    ("trial", "execute"),
    ("contract", "execute"),  # the referee and the bank read trials as the floor's values
    ("bank", "execute"),
    ("contract", "adapters"),  # where a launch is (contract/place.py) needs no framework
    ("adapters", "estimate"),
    ("contract", "kernels"),
    ("search", "report"),  # the search writes the models record (search/record.py); the report only reads it  # a contract's kernel values are read by infrarsi/candidate.py; kernels read contracts  # the estimate is handed the Workload's adapter (estimate.run.estimate_workload)
])
def test_a_lower_package_does_not_import_a_higher_one(package, never):
    out = {f"{p.relative_to(ROOT)} -> {m}" for p in (PKG / package).rglob("*.py") for m in _imports(p)
           if _package(m) == never}
    assert out == set()


def test_the_framework_neutral_equivalence_rules_import_no_framework():
    """adapters/equivalence.py holds the comparison every framework's check uses: it imports none of them (they
    import it), so adapters/equivalence, megatron/ and torchtitan/ form no circle."""
    got = _imports(PKG / "adapters" / "equivalence.py")
    assert not {m for m in got if m.startswith(("infrarsi.adapters.megatron", "infrarsi.adapters.torchtitan"))}


def test_the_estimate_builds_no_adapter_of_its_own():
    """estimate/ is handed the adapter that reads the contract's launch (a Workload's, or the registry's once):
    none of its modules constructs a framework's adapter class."""
    import ast

    built = [f"{p.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)}" for p in sorted((PKG / "estimate").rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.Call) and ast.unparse(n.func).split(".")[-1].endswith("Adapter")]
    assert built == []


FRAMEWORKS = {"megatron", "torchtitan", "minigpt", "simulated"}
# Modules that hold per-framework data or conventions, not launch behaviour: minigpt's own shape rule
# (transformer.py), the bank's default evidence for a simulated run
# (bank/store.py: bank/ may not import adapters/, whose spec says it).
CONVENTIONS = {"infrarsi/transformer.py", "infrarsi/bank/store.py"}


def test_no_framework_name_is_compared_outside_the_adapters():
    """What differs per framework is asked of its adapter (adapters/<framework>/, the Workload): a stage that
    compares ``workload.adapter`` (or a ``framework``) with a framework's name is a second registry."""
    import ast

    found = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel.startswith("infrarsi/adapters/") or rel in CONVENTIONS:
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if not isinstance(n, ast.Compare):
                continue
            sides = [n.left, *n.comparators]
            names = [c for c in sides if isinstance(c, ast.Constant) and c.value in FRAMEWORKS] + [
                e for c in sides if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts
                if isinstance(e, ast.Constant) and e.value in FRAMEWORKS]
            about = any(re.search(r"\b(adapter|framework)\b", ast.unparse(c)) for c in sides)
            if names and about:
                found.append(f"{rel}:{n.lineno}: {ast.unparse(n)}")
    assert found == []


TYPED = {"contract", "adapter", "tuner", "record"}


def _untyped() -> dict[str, list[str]]:
    import ast

    out: dict[str, list[str]] = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]:
                    note = ast.unparse(a.annotation) if a.annotation is not None else ""
                    if a.arg in TYPED and (not note or "Any" in note.replace("|", " ").split()):
                        out.setdefault(rel, []).append(f"{n.name}({a.arg}: {note or '-'})")
    return out


def test_a_contract_adapter_tuner_or_record_parameter_says_its_type():
    """A parameter named contract, adapter, tuner or record is typed (``Any``, or nothing, hid import cycles)."""
    assert _untyped() == {}


def test_an_adapter_or_executor_is_asked_not_probed():
    """What an adapter, an executor or a tuner's part can do is declared (adapters/base.py, execute/executor.py's
    protocol, the runner's TrialAdapter, search/parts.py's protocols with their no-op defaults): a
    ``getattr``/``hasattr`` on one hides a capability the type does not state."""
    import ast

    found = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr") \
                    and n.args and re.fullmatch(r"(self\._?)?(adapter|executor)|(\w+\.)?(time|memory|steps)",
                                                ast.unparse(n.args[0])):
                found.append(f"{rel}:{n.lineno}: {ast.unparse(n)}")
    assert found == []


def test_no_class_forwards_its_attributes():
    """A wrapper states what it offers (kernels/verdicts.Pinned is a TrialAdapter method by method): a class
    ``__getattr__`` forwards every attribute of what it wraps and types as it without being one. (A module's
    ``__getattr__``, the lazy exports of bank/__init__.py, is not a class's.)"""
    import ast

    found = []
    for p in sorted(PKG.rglob("*.py")):
        for c in ast.walk(ast.parse(p.read_text())):
            if isinstance(c, ast.ClassDef):
                found += [f"{p.relative_to(ROOT).as_posix()}:{f.lineno}: {c.name}.{f.name}" for f in c.body
                          if isinstance(f, ast.FunctionDef) and f.name in ("__getattr__", "__getattribute__")]
    assert found == []
