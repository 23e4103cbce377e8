"""The flags a Megatron tree's parser knows, read from its source without running it.

A launch runs the Megatron-LM tree it finds on its import path: its ``megatron/training/arguments.py`` builds the
parser (``parse_args`` -> ``add_megatron_arguments`` -> one ``_add_*_args(parser)`` per group), and the program may
add its own flags through ``extra_args_provider`` (``pretrain(..., extra_args_provider=add_my_args)``). Forks add
flags in either place; both are read here with :mod:`ast`, importing nothing of the fork (it may need a GPU, a
library that is not installed, or simply be slow to import).

What is read, statically:

- ``X.add_argument('--flag', '--alias', ...)``: every ``-``-prefixed string literal among its positional arguments;
- a call of a function the same file defines (``_add_network_size_args(parser)``), followed, once;
- ``ArgumentGroupFactory(SomeConfig, exclude=[...])`` (upstream since 2025 builds groups from config dataclasses,
  megatron/training/argument_utils.py): the dataclass's fields (its bases' first), as that factory names them:
  ``--field-name``, or ``--no-field-name`` and ``--disable-field-name`` for a bool that defaults to anything but
  False, or the ``arg_names`` of the field's ``argparse_meta`` metadata; fields with ``init=False`` or in ``exclude``
  are left out. The class is found through the file's imports in the same tree.

What cannot be read (a flag name that is not a literal, a function from elsewhere handed the parser, a config class
outside the tree) is listed in ``unread`` (file:line and the call): a reading with unread parts cannot say that a
flag is unknown, only that it did not see it.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ARGUMENTS = Path("megatron/training/arguments.py")
_ENTRIES = ("parse_args", "add_megatron_arguments")  # upstream's parse_args calls add_megatron_arguments
_GROUPS = ("add_argument_group", "add_mutually_exclusive_group")
_PARSER_METHODS = frozenset({"add_argument", *_GROUPS, "set_defaults", "parse_args", "parse_known_args",
                             "build_group", "get_default", "print_help", "error"})
_BOOL = frozenset({"bool", "Optional[bool]", "typing.Optional[bool]", "bool | None", "None | bool"})


@dataclass(frozen=True)
class Reading:
    """The ``--`` flags read from a parser's source, and what could not be read (``"file:line call"`` each)."""

    flags: frozenset[str]
    unread: tuple[str, ...] = ()

    def __or__(self, other: Reading) -> Reading:
        return Reading(self.flags | other.flags, self.unread + other.unread)


def search_path(program: Path | None, env: Mapping[str, str], cwd: Path | None) -> list[Path]:
    """Where the program imports ``megatron`` from, in Python's order: the program's folder (``sys.path[0]`` of
    ``python script.py``), each ``PYTHONPATH`` entry (relative ones from ``cwd``), the working directory, then the
    program's parent folders (scripts in a tree's subfolder put its root on ``sys.path`` themselves)."""
    out: list[Path] = []
    here = cwd or Path.cwd()
    if program is not None:
        out.append(program.parent)
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            out.append(Path(entry) if os.path.isabs(entry) else here / entry)
    out.append(here)
    if program is not None:
        out.extend(program.parent.parents)
    seen: list[Path] = []
    for p in out:
        p = Path(os.path.normpath(p))
        if p not in seen:
            seen.append(p)
    return seen


def find_arguments(path: Sequence[Path]) -> Path | None:
    """The first ``megatron/training/arguments.py`` on ``path``: the one the launch's ``import`` would load."""
    for d in path:
        f = d / ARGUMENTS
        if f.is_file():
            return f
    return None


def read_arguments(arguments: Path) -> Reading:
    """The flags the parser that ``arguments`` (a tree's megatron/training/arguments.py) builds; read again only
    when a file the reading read has changed (:func:`_memo`)."""
    f = arguments.resolve()
    return _memo(("arguments", str(f)), lambda: _read_arguments(f))


def _read_arguments(f: Path) -> Reading:
    root = f.parents[2]  # <root>/megatron/training/arguments.py
    mod = _Module.load(f, (root,))
    if mod is None:
        return Reading(frozenset(), (f"{f}: not Python that parses",))
    entries = [n for n in _ENTRIES if n in mod.defs][:1] or [n for n in mod.defs if n.startswith("_add_")]
    got = _Walker(mod).functions(entries)
    return Reading(got.flags | {"--help"}, got.unread)  # argparse's own


def read_extra_args(script: Path, path: Sequence[Path]) -> tuple[Reading, list[str]]:
    """The flags the program ``script`` adds through ``extra_args_provider=NAME`` (any call that passes it), and
    the providers' names; (empty reading, []) when it passes none."""
    if not script.is_file():
        return Reading(frozenset()), []
    f = script.resolve()
    return _memo(("extra", str(f), tuple(path)), lambda: _read_extra_args(f, tuple(path)))


def _read_extra_args(script: Path, path: tuple[Path, ...]) -> tuple[Reading, list[str]]:
    mod = _Module.load(script, path)
    if mod is None:
        return Reading(frozenset()), []
    out, names = Reading(frozenset()), []
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg != "extra_args_provider":
                continue
            v = kw.value
            # `add_modelopt_args if has_nvidia_modelopt else None` (upstream's pretrain_gpt.py): either branch
            for e in (v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,):
                if isinstance(e, ast.Constant) and e.value is None:
                    continue
                where = mod.definition(e.id) if isinstance(e, ast.Name) else None
                if where is not None:
                    names.append(e.id)
                    out = out | _Walker(where[0]).functions([where[1]])
                else:
                    out = out | Reading(frozenset(), (f"{mod.file}:{e.lineno} extra_args_provider={ast.unparse(e)} "
                                                      "(not a function found in the program or its tree)",))
    return out, names


# --------------------------------------------------------------------------- memo of readings
# A reading of upstream's tree parses ~10 files (0.4-2 s on this machine); knobs, init and apply read a launch several
# times per process. A reading is kept with the (mtime, size) of every file it parsed and reused while they hold.
_READINGS: dict[tuple, tuple[tuple[tuple[str, int, int], ...], Any]] = {}
_TOUCHED: set[str] | None = None  # the files :func:`_load` gives out while a reading is computed


def _stamp(file: str) -> tuple[int, int]:
    try:
        st = os.stat(file)
    except OSError:
        return (-1, -1)
    return (st.st_mtime_ns, st.st_size)


def _memo(key: tuple, compute: Callable[[], Any]) -> Any:
    global _TOUCHED
    hit = _READINGS.get(key)
    if hit is not None and all(_stamp(f) == (m, n) for f, m, n in hit[0]):
        return hit[1]
    outer, _TOUCHED = _TOUCHED, set()
    try:
        value = compute()
        touched = _TOUCHED
    finally:
        _TOUCHED = outer
    if outer is not None:
        outer |= touched
    _READINGS[key] = (tuple((f, *_stamp(f)) for f in sorted(touched)), value)
    return value


# --------------------------------------------------------------------------- modules and their names
@dataclass
class _Module:
    file: Path
    tree: ast.Module
    roots: tuple[Path, ...]
    defs: dict[str, ast.FunctionDef]
    classes: dict[str, ast.ClassDef]
    imports: dict[str, tuple[str, str | None]]  # local name -> (absolute module, name in it or None)

    @classmethod
    def load(cls, file: Path, roots: tuple[Path, ...]) -> _Module | None:
        return _load(str(file), roots)

    def package(self) -> str:
        """This module's package, dotted, from the root it is under ("" when under none)."""
        for r in self.roots:
            try:
                rel = self.file.relative_to(r)
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            return ".".join(parts[:-1]) if parts[-1] != "__init__" else ".".join(parts[:-1])
        return ""

    def module(self, name: str) -> _Module | None:
        """The module ``name`` (dotted, absolute) found under the roots."""
        rel = Path(*name.split("."))
        for r in self.roots:
            for f in (r / rel.with_suffix(".py"), r / rel / "__init__.py"):
                if f.is_file():
                    return _load(str(f.resolve()), self.roots)
        return None

    def definition(self, name: str, depth: int = 0) -> tuple[_Module, str] | None:
        """The module that defines function ``name`` as seen from here (through imports), and its name there."""
        if name in self.defs:
            return self, name
        src = self.imports.get(name)
        if src is None or depth > 8:
            return None
        m = self.module(src[0]) if src[1] is not None else None
        return m.definition(src[1], depth + 1) if m is not None else None

    def find_class(self, name: str, depth: int = 0) -> tuple[_Module, ast.ClassDef] | None:
        if name in self.classes:
            return self, self.classes[name]
        src = self.imports.get(name)
        if src is None or depth > 8:
            return None
        if src[1] is None:
            return None
        m = self.module(src[0])
        if m is None:  # `from pkg import submodule_or_name`: a name of pkg/__init__.py, or nothing found
            return None
        return m.find_class(src[1], depth + 1)


def _load(file: str, roots: tuple[Path, ...]) -> _Module | None:
    """The module at ``file``, parsed once per version of the file (its mtime and size: an edited tree is re-read)."""
    mtime, size = _stamp(file)
    if size < 0:
        return None
    if _TOUCHED is not None:
        _TOUCHED.add(file)
    return _parse(file, mtime, size, roots)


@cache
def _parse(file: str, _mtime: int, _size: int, roots: tuple[Path, ...]) -> _Module | None:
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"), filename=file)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    mod = _Module(Path(file), tree, roots, {}, {}, {})
    pkg = mod.package()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            mod.defs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            mod.classes[node.name] = node
    for node in ast.walk(tree):  # imports anywhere (upstream imports some inside functions)
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".") if pkg else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join([*parts, *([base] if base else [])])
            for a in node.names:
                mod.imports.setdefault(a.asname or a.name, (base, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                mod.imports.setdefault(a.asname or a.name.split(".")[0], (a.name, None))
    return mod


# --------------------------------------------------------------------------- the walk over a parser's functions
class _Walker:
    def __init__(self, mod: _Module) -> None:
        self.mod = mod
        self.seen: set[tuple[str, str]] = set()
        self.flags: set[str] = set()
        self.unread: list[str] = []

    def functions(self, names: Iterable[str]) -> Reading:
        for n in names:
            self._function(self.mod, n)
        return Reading(frozenset(self.flags), tuple(self.unread))

    def _function(self, mod: _Module, name: str) -> None:
        key = (str(mod.file), name)
        if key in self.seen or name not in mod.defs:
            return
        self.seen.add(key)
        fn = mod.defs[name]
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        # names bound to the parser or one of its groups: "parser", a parameter named so, a group made in here
        holders = {"parser"} | {p for p in params if "parser" in p or "group" in p}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                f = node.value.func
                if isinstance(f, ast.Attribute) and f.attr in (*_GROUPS, "build_group"):
                    holders.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                self._call(mod, fn, node, params, holders)

    def _call(self, mod: _Module, fn: ast.FunctionDef, node: ast.Call, params: set[str], holders: set[str]) -> None:
        f = node.func
        where = f"{mod.file}:{node.lineno}"
        if isinstance(f, ast.Attribute) and f.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if len(names) < len(node.args):
                self.unread.append(f"{where} {ast.unparse(node)[:80]} (a flag name that is not a literal)")
            longs = [n for n in names if n.startswith("--")]
            self.flags.update(longs)
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            if action is not None and ast.unparse(action).endswith("BooleanOptionalAction"):  # adds --no-X too
                self.flags.update(f"--no-{n[2:]}" for n in longs)
            return
        handed = [a for a in node.args if isinstance(a, ast.Name) and a.id in holders]
        if isinstance(f, ast.Name) and f.id not in params:
            if f.id == "ArgumentGroupFactory":
                self._factory(mod, fn, node, where)
                return
            found = mod.definition(f.id)
            # a function of this file is followed (upstream's `parser = _add_x_args(parser)`); one from another
            # module only when it is handed the parser
            if found is not None and (found[0] is mod or handed):
                self._function(found[0], found[1])
                return
        if isinstance(f, ast.Attribute) and f.attr in _PARSER_METHODS:
            return
        if isinstance(f, ast.Name) and f.id in params:
            return  # the function's own argument (parse_args' extra_args_provider): read from the program
        if handed:
            self.unread.append(f"{where} {ast.unparse(node)[:80]} (a function outside the file is handed the parser)")

    def _factory(self, mod: _Module, fn: ast.FunctionDef, node: ast.Call, where: str) -> None:
        if not node.args or not isinstance(node.args[0], ast.Name):
            self.unread.append(f"{where} {ast.unparse(node)[:80]} (a config class that is not a name)")
            return
        cls = mod.find_class(node.args[0].id)
        if cls is None:
            self.unread.append(f"{where} {ast.unparse(node)[:80]} (config class {node.args[0].id} not found in the tree)")
            return
        exclude: set[str] = set()
        for kw in node.keywords:
            if kw.arg == "exclude":
                got = _strings(kw.value, fn)
                if got is None:
                    self.unread.append(f"{where} exclude={ast.unparse(kw.value)[:60]} (not a literal list)")
                else:
                    exclude = got
        fields, unread = _fields(*cls)
        self.unread.extend(unread)
        for name, names in fields.items():
            if name not in exclude:
                self.flags.update(names)


def _strings(v: ast.expr, fn: ast.FunctionDef) -> set[str] | None:
    """A literal list of strings, or a name the function assigns one to."""
    if isinstance(v, ast.Name):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == v.id for t in node.targets):
                v = node.value
                break
    try:
        got = ast.literal_eval(v)
    except (ValueError, SyntaxError, TypeError):
        return None
    return {str(x) for x in got} if isinstance(got, (list, tuple, set)) else None


def _fields(mod: _Module, cls: ast.ClassDef, depth: int = 0) -> tuple[dict[str, list[str]], list[str]]:
    """A dataclass's init fields (its bases' first) -> the flags ArgumentGroupFactory gives each; what is unread."""
    out: dict[str, list[str]] = {}
    unread: list[str] = []
    for b in cls.bases:
        if not isinstance(b, ast.Name) or b.id in ("object", "Generic") or depth > 8:
            continue
        found = mod.find_class(b.id)
        if found is None:
            unread.append(f"{mod.file}:{cls.lineno} base {b.id} of {cls.name} (not found in the tree)")
            continue
        got, more = _fields(*found, depth + 1)
        out.update(got)
        unread.extend(more)
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        ann = ast.unparse(node.annotation).strip("'\"")
        if ann.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")):
            continue
        name = node.target.id
        default, names = _field_default(node.value)
        if default == "no-init":
            out.pop(name, None)
            continue
        dashed = name.replace("_", "-")
        if names:
            out[name] = names
        elif ann in _BOOL and default is not False:
            out[name] = [f"--no-{dashed}", f"--disable-{dashed}"]
        else:
            out[name] = [f"--{dashed}"]
    return out, unread


def _field_default(v: ast.expr | None) -> tuple[object, list[str]]:
    """(the field's default: a literal, None when unknown or absent, "no-init" for init=False; argparse_meta's
    arg_names or [])."""
    if v is None:
        return None, []
    if not (isinstance(v, ast.Call) and ast.unparse(v.func) in ("field", "dataclasses.field")):
        return (v.value if isinstance(v, ast.Constant) else None), []
    kws = {k.arg: k.value for k in v.keywords if k.arg}
    if isinstance(kws.get("init"), ast.Constant) and kws["init"].value is False:
        return "no-init", []
    d = kws.get("default")
    default = d.value if isinstance(d, ast.Constant) else None
    names: list[str] = []
    meta = kws.get("metadata")
    if isinstance(meta, ast.Dict):
        for k, mv in zip(meta.keys, meta.values):
            if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(mv, ast.Dict):
                for k2, v2 in zip(mv.keys, mv.values):
                    if isinstance(k2, ast.Constant) and k2.value == "arg_names" and isinstance(v2, (ast.List, ast.Tuple)):
                        names = [e.value for e in v2.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return default, names
