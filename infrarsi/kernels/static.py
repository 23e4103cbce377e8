"""Static checks on a candidate's source (AST), run before any of it is imported: a lint.

The lint refuses what an honest kernel never needs, early and with a clear line; it is not what keeps a
candidate from the records or the secrets -- the isolation the dynamic checks run in is (verify.py,
execute/isolation.py). Python offers too many routes to everything for an AST check to be a boundary.

An allowlist, not a denylist: a candidate may import only the modules in ALLOWED_IMPORTS, call only
the builtins in ALLOWED_BUILTINS, reach only the torch and triton attributes listed below, and never
read an attribute by a computed name (no getattr, no ``__dict__``/``__class__``/frame attributes, no
``str.format`` field lookups). Anything else is a way to find out that it is being checked (the call
stack, the environment, the clock) or to do the work somewhere a reviewer does not look.

Attribute chains that leave the allowlist through an allowed module are refused too: any attribute named like
a module or builtin that reaches the interpreter's internals (``DENIED_ATTRS``: ``typing.sys``,
``triton.language.core.builtins``, ``torch.autograd.function.inspect``, ``.modules``, ``.exec``, ...), and any
chain rooted at an import that, resolved on the real module, lands on a module off the allowlist or a builtin
off ``ALLOWED_BUILTINS``.

Strings are never evaluated as code: typing's hint evaluation (``get_type_hints``, ``ForwardRef``) and
``functools.singledispatch`` (which evaluates string annotations) are refused (``STRING_EVAL``).

Besides: a ``@triton.jit`` kernel and a module-level ``forward``; no try/except fallbacks; no
assignment to attributes of imported modules (monkeypatching). Each finding is one line
``code: message``. The dynamic checks (dynamic.py) catch what the AST cannot see: torch math run on
the host, caches, races.
"""

from __future__ import annotations

import ast
import builtins

# module -> whether its submodules are allowed too
ALLOWED_IMPORTS = {"__future__": False, "math": False, "typing": False, "functools": False, "torch": False,
                   "torch.autograd": False, "torch.autograd.function": False, "triton": False,
                   "triton.language": True}
ALLOWED_BUILTINS = frozenset(
    "abs all any bool callable dict divmod enumerate filter float frozenset int isinstance issubclass iter len "
    "list map max min next object pow range reversed round set slice sorted str sum super tuple zip repr "
    "staticmethod classmethod property NotImplemented Ellipsis "
    "Exception ValueError TypeError RuntimeError NotImplementedError AssertionError KeyError IndexError".split())
# The host side of a candidate allocates, casts, reshapes and launches: these torch names are all it needs.
TORCH_ATTRS = frozenset(
    "Tensor Size dtype device autograd cuda empty empty_like empty_strided zeros zeros_like sum "
    "float32 float16 bfloat16 float64 float half double int8 int16 int32 int64 uint8 bool long int "
    "promote_types result_type is_tensor is_floating_point finfo iinfo get_default_dtype".split())
TORCH_SUBATTRS = {"autograd": frozenset({"Function", "function"}),
                  "cuda": frozenset({"is_available", "current_device", "get_device_capability"})}
TRITON_ATTRS = frozenset("jit cdiv next_power_of_2 autotune heuristics Config language constexpr".split())
# Attributes that lead from any object to frames, code or namespaces (the stack, the globals).
FRAME_ATTRS = frozenset("f_back f_globals f_locals f_code f_builtins f_trace tb_frame tb_next gi_frame gi_code "
                        "cr_frame cr_code ag_frame ag_code".split())
# Tensor methods that compute the ops on the host (x.rsqrt(), logits.log_softmax(-1), ...); the dynamic
# check measures the rest by the work they do.
DENIED_METHODS = frozenset(
    "rsqrt sqrt exp log sigmoid tanh softmax log_softmax logsumexp mean var norm pow mul mul_ add add_ sub div "
    "div_ gather scatter neg addcmul lerp cos sin numpy tolist copy_ fill_ zero_ index_select".split())
PROTECTED_ROOTS = ("time", "torch", "triton", "os", "math", "random", "functools", "tl", "typing")
# Attribute names that lead from an allowed module to the interpreter, the process or the file system
# (typing.sys, triton.language.core.builtins, torch.autograd.function.inspect, sys.modules, builtins.exec):
# refused wherever they appear, whatever they are read from.
DENIED_ATTRS = frozenset(
    "sys os builtins inspect modules importlib subprocess exec eval compile open globals locals vars getattr "
    "setattr delattr environ ctypes stack currentframe system popen pathlib shutil socket signal gc marshal "
    "pickle runpy tempfile threading multiprocessing io posix".split())

# Names that evaluate a string as code: typing's hint evaluation (get_type_hints and ForwardRef evaluate string
# annotations with eval), functools.singledispatch's register (it calls get_type_hints), inspect's eval_str.
STRING_EVAL = frozenset("get_type_hints ForwardRef evaluate_forward_ref get_annotations singledispatch "
                        "singledispatchmethod eval_str".split())

_ALLOWED_MSG = ("a candidate may import " + ", ".join(sorted(ALLOWED_IMPORTS)) + " (and triton.language.*) only")


def _dotted(node: ast.AST) -> str | None:
    """'torch.nn.functional.silu' for an Attribute chain rooted at a Name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_triton_jit(dec: ast.AST, aliases: dict[str, str]) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target)
    if name is None:
        return False
    root, _, rest = name.partition(".")
    full = aliases.get(root, root) + ("." + rest if rest else "")
    return full in ("triton.jit", "triton.runtime.jit.jit", "triton.runtime.jit")


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the module binds anywhere (assignments, defs, arguments, imports, loop targets)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
    return out


def static_check(source: str) -> list[str]:
    """Reasons (``code: message``) the source is not an acceptable candidate; [] when it passes."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"static-syntax: the file does not parse: {e.msg} (line {e.lineno})"]
    reasons: list[str] = []

    def add(msg: str) -> None:
        if msg not in reasons:
            reasons.append(msg)

    # import aliases: name bound in the module -> the dotted module or object it stands for
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                _check_import(a.name, None, node.lineno, add)
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            if node.level:
                add(f"static-import: line {node.lineno}: relative import {base!r}; "
                    "a candidate is one self-contained file")
                continue
            for a in node.names:
                aliases[a.asname or a.name] = f"{base}.{a.name}"
                _check_import(base, a.name, node.lineno, add)

    jit_funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and any(_is_triton_jit(d, aliases) for d in n.decorator_list)]
    if not jit_funcs:
        add("static-no-kernel: no @triton.jit function is defined; the op must run in a Triton kernel")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in tree.body):
        add("static-no-forward: no module-level def forward(...); the candidate must define it")

    kernel_nodes = {id(n) for f in jit_funcs for n in ast.walk(f)}
    # Inside a kernel only triton (and math's constants) may appear: the CPU interpreter would run a
    # torch call there as plain Python, a hidden host computation that no GPU compiler accepts.
    for f in jit_funcs:
        for n in ast.walk(f):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in aliases:
                target = aliases[n.id]
                if not (target.startswith("triton") or target == "math" or target.startswith("__future__")):
                    add(f"static-kernel: line {n.lineno}: the @triton.jit function {f.name} uses {n.id} ({target}); "
                        "a kernel body may use triton.language only")

    bound = _bound_names(tree)
    builtin_names = set(dir(builtins))
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id.startswith("__"):
                add(f"static-builtin: line {line}: reads {node.id}; module dunders (__file__, __builtins__, ...) are "
                    "off limits")
            elif node.id in builtin_names and node.id not in bound and node.id not in ALLOWED_BUILTINS:
                add(f"static-builtin: line {line}: uses the builtin {node.id}; a candidate may use only "
                    f"{', '.join(sorted(ALLOWED_BUILTINS))}")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in FRAME_ATTRS:
                add(f"static-attribute: line {line}: reads .{node.attr}; private, dunder and frame attributes are "
                    "off limits (no attribute access by computed or hidden name)")
            elif node.attr in STRING_EVAL:
                add(f"static-eval: line {line}: reads .{node.attr}; it evaluates strings as code (string "
                    f"annotations are eval'd); a candidate never needs it")
            elif node.attr in DENIED_ATTRS:
                add(f"static-attribute: line {line}: reads .{node.attr}; a route from an allowed module to the "
                    f"interpreter, the process or the files (static.DENIED_ATTRS are off limits)")
            else:
                _check_reached(node, aliases, line, add)
                if id(node) not in kernel_nodes:
                    _check_module_attr(node, aliases, line, add)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            add(f"static-try: line {line}: try/except is not allowed (a failing kernel must fail, not fall back)")
        elif isinstance(node, ast.With):
            for item in node.items:
                name = _dotted(item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr)
                if name and name.split(".")[-1] == "suppress":
                    add(f"static-try: line {line}: contextlib.suppress swallows kernel failures (a hidden fallback)")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                _check_store(t, aliases, line, add)
        elif isinstance(node, ast.Call) and id(node) not in kernel_nodes:
            fn = node.func
            name = _dotted(fn)
            root = name.partition(".")[0] if name else ""
            if isinstance(fn, ast.Attribute) and fn.attr in ("format", "format_map"):
                add(f"static-attribute: line {line}: calls .{fn.attr}(); its fields look attributes up by name "
                    "(use an f-string)")
            elif name is not None and "reference" in name:
                add(f"static-fallback: line {line}: calls {name}; the reference is off limits")
            elif (isinstance(fn, ast.Attribute) and fn.attr in DENIED_METHODS
                  and aliases.get(root, root).split(".")[0] not in ("tl", "triton", "math")):
                add(f"static-fallback: line {line}: calls .{fn.attr}() on the host; "
                    "the op must be computed by the Triton kernel")
    return reasons


def _allowed_module(module: str) -> bool:
    return module in ALLOWED_IMPORTS or any(module.startswith(m + ".") for m, deep in ALLOWED_IMPORTS.items() if deep)


def _resolve(full: str) -> str | None:
    """Why the dotted path ``full`` (rooted at an allowed module) reaches past the allowlist, resolved on the real
    modules: a module off ALLOWED_IMPORTS, or a builtin off ALLOWED_BUILTINS, on its way; None when it does not
    (or cannot be resolved). triton is resolved only once imported (importing it here first would fix the
    interpreter mode for the whole process, see loader.ensure_interpreter)."""
    import importlib
    import sys
    import types

    parts = full.split(".")
    if parts[0] not in {m.split(".")[0] for m in ALLOWED_IMPORTS} or parts[0] == "__future__":
        return None
    if parts[0] == "triton" and "triton" not in sys.modules:
        return None
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - not installed here: nothing to resolve
        return None
    builtin_names = {k: v for k, v in vars(builtins).items()}
    for i, attr in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - a name the module does not have: the import or the call will say so
            return None
        where = ".".join(parts[:i + 1])
        if isinstance(obj, types.ModuleType) and not _allowed_module(obj.__name__):
            return f"{where} is the module {obj.__name__}, which {_ALLOWED_MSG}"
        if attr in builtin_names and obj is builtin_names[attr] and attr not in ALLOWED_BUILTINS:
            return f"{where} is the builtin {attr}, off the allowed builtins"
    return None


def _check_reached(node: ast.Attribute, aliases: dict[str, str], line, add) -> None:
    """An attribute chain rooted at an import that reaches a module or builtin off the allowlists."""
    name = _dotted(node)
    if name is None:
        return
    root, _, rest = name.partition(".")
    if root not in aliases:
        return
    why = _resolve(aliases[root] + ("." + rest if rest else ""))
    if why:
        add(f"static-attribute: line {line}: {name}: {why}")


def _check_import(module: str, name: str | None, line: int, add) -> None:
    """``import module`` (name None) or ``from module import name``."""
    if "reference" in module.split(".") or name == "reference":
        add(f"static-fallback: line {line}: imports {module}{'.' + name if name else ''}; "
            "the candidate may not use the reference")
    if not _allowed_module(module):
        add(f"static-import: line {line}: imports {module}; {_ALLOWED_MSG}")
        return
    if name is None:
        return
    full = f"{module}.{name}"
    if name in STRING_EVAL:
        add(f"static-eval: line {line}: imports {full}; it evaluates strings as code (string annotations are "
            f"eval'd); a candidate never needs it")
        return
    if name in DENIED_ATTRS:
        add(f"static-import: line {line}: imports {full}; a route from an allowed module to the interpreter")
        return
    why = _resolve(full)
    if why:
        add(f"static-import: line {line}: imports {full}: {why}")
        return
    if module in ("torch", "triton", "torch.autograd"):
        _check_path(full, line, add)


def _check_path(full: str, line, add) -> None:
    """A dotted path into torch or triton must stay on the allowlists."""
    parts = full.split(".")
    if parts[0] == "torch" and len(parts) > 1:
        if parts[1] in ("nn", "ops", "library", "jit", "compile") or parts[1] not in TORCH_ATTRS:
            add(f"static-fallback: line {line}: uses {full}; the host side may use only torch."
                f"{{{', '.join(sorted(TORCH_ATTRS))}}} (the op must be computed by the Triton kernel)")
        elif parts[1] in TORCH_SUBATTRS and len(parts) > 2 and parts[2] not in TORCH_SUBATTRS[parts[1]]:
            add(f"static-fallback: line {line}: uses {full}; from torch.{parts[1]} only "
                f"{', '.join(sorted(TORCH_SUBATTRS[parts[1]]))} are allowed")
    elif parts[0] == "triton" and len(parts) > 1 and parts[1] not in TRITON_ATTRS:
        add(f"static-import: line {line}: uses {full}; from triton only {', '.join(sorted(TRITON_ATTRS))} are "
            "allowed")


def _check_module_attr(node: ast.Attribute, aliases: dict[str, str], line, add) -> None:
    name = _dotted(node)
    if name is None:
        return
    root, _, rest = name.partition(".")
    full = aliases.get(root, root) + ("." + rest if rest else "")
    if full.startswith(("torch.", "triton.")) and not full.startswith("triton.language"):
        _check_path(full, line, add)


def _check_store(target: ast.AST, aliases: dict[str, str], line, add) -> None:
    """Assignments like ``time.perf_counter = ...`` or ``torch.Tensor.sum = ...`` (monkeypatching)."""
    node = target
    if isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            _check_store(elt, aliases, line, add)
        return
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute):
        return
    name = _dotted(node)
    if name is None:
        return
    root = name.split(".")[0]
    full_root = aliases.get(root, "")
    if full_root.split(".")[0] in PROTECTED_ROOTS:
        add(f"static-patch: line {line}: assigns {name} (monkeypatching {full_root or root}); "
            "a candidate may not replace timers or torch/triton functions")
