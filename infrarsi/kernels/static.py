"""Static checks on a candidate's source (AST), run before any of it is imported.

A candidate must launch its own ``@triton.jit`` kernels and nothing else may do the work: no
import of the reference or of a PyTorch fallback, no try/except that falls back, no patching of
timers or torch functions, no dynamic code loading. Each finding is one line ``code: message``.
The dynamic checks in verify.py catch what the AST cannot see (torch math on the host, caches, races).
"""

from __future__ import annotations

import ast

# Modules a kernel file has no business importing: code loading, process/interpreter access,
# other array libraries (a numpy fallback), the project itself (the reference lives there).
DENIED_IMPORTS = (
    "importlib", "imp", "runpy", "ctypes", "cffi", "subprocess", "multiprocessing", "sys", "gc", "inspect",
    "pickle", "marshal", "builtins", "numpy", "scipy", "jax", "cupy", "numba", "infrarsi", "kernels",
    "torch.nn", "torch._C", "torch._dynamo", "torch._inductor", "torch.library", "torch.ops", "torch.jit",
    "torch.testing", "triton.testing",
)
DENIED_BUILTINS = ("exec", "eval", "compile", "__import__", "open", "setattr", "delattr", "globals", "vars",
                   "breakpoint")
# torch attributes that are a PyTorch implementation of the ops (or a route to one) when called on the host
DENIED_TORCH_ATTRS = (
    "nn", "ops", "compile", "jit", "_C", "library", "rsqrt", "sqrt", "exp", "log", "sigmoid", "tanh", "softmax",
    "log_softmax", "logsumexp", "mean", "var", "norm", "rms_norm", "layer_norm", "silu", "cat", "stack",
    "where", "einsum", "matmul", "mul", "add", "sub", "div", "pow", "cross_entropy", "nll_loss", "gather",
    "scatter", "clamp", "cos", "sin", "neg", "addcmul", "lerp", "index_select", "take_along_dim",
)
# Tensor methods that compute the ops on the host (x.rsqrt(), logits.log_softmax(-1), ...)
DENIED_METHODS = (
    "rsqrt", "sqrt", "exp", "log", "sigmoid", "tanh", "softmax", "log_softmax", "logsumexp", "mean", "var",
    "norm", "pow", "mul", "mul_", "add", "add_", "sub", "div", "div_", "gather", "scatter", "neg", "addcmul",
    "lerp", "cos", "sin", "numpy", "tolist", "item", "copy_", "fill_", "zero_", "index_select",
)
# Modules whose attributes must never be assigned (timers, benchmark helpers, torch itself)
PROTECTED_ROOTS = ("time", "torch", "triton", "os", "math", "random", "functools", "tl")
HOST_RECEIVERS_OK = ("tl", "triton", "math")  # tl.exp etc. are kernel language, math.* is scalar arithmetic


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
                _check_import(a.name, node.lineno, add)
        elif isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            for a in node.names:
                aliases[a.asname or a.name] = f"{base}.{a.name}"
                _check_import(f"{base}.{a.name}" if node.module else base + a.name, node.lineno, add)
            if node.level:
                add(f"static-import: line {node.lineno}: relative import {base!r}; "
                    "a candidate is one self-contained file")

    jit_funcs: list[ast.FunctionDef] = []
    has_forward = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            has_forward = True
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            _is_triton_jit(d, aliases) for d in node.decorator_list
        ):
            jit_funcs.append(node)
    if not jit_funcs:
        add("static-no-kernel: no @triton.jit function is defined; the op must run in a Triton kernel")
    if not has_forward:
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
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
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
        elif isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in DENIED_BUILTINS:
                add(f"static-call: line {line}: {fn.id}() is not allowed in a candidate")
            name = _dotted(fn)
            if name is None or id(node) in kernel_nodes:
                continue
            root, _, rest = name.partition(".")
            full = aliases.get(root, root) + ("." + rest if rest else "")
            if full.startswith("torch.") and full.split(".")[1] in DENIED_TORCH_ATTRS:
                add(f"static-fallback: line {line}: calls {full} on the host; "
                    "the op must be computed by the Triton kernel")
            elif full.startswith("torch.nn") or "reference" in full:
                add(f"static-fallback: line {line}: calls {full}; the reference and torch.nn are off limits")
            elif (isinstance(fn, ast.Attribute) and fn.attr in DENIED_METHODS
                  and aliases.get(root, root).split(".")[0] not in HOST_RECEIVERS_OK):
                add(f"static-fallback: line {line}: calls .{fn.attr}() on the host; "
                    "the op must be computed by the Triton kernel")
        elif isinstance(node, ast.Attribute) and id(node) not in kernel_nodes:
            name = _dotted(node)
            if name and "reference" in name.split("."):
                add(f"static-fallback: line {line}: uses {name}; the candidate may not reach the reference")
    return reasons


def _check_import(module: str, line: int, add) -> None:
    mod = module.lstrip(".")
    for denied in DENIED_IMPORTS:
        if mod == denied or mod.startswith(denied + "."):
            add(f"static-import: line {line}: imports {mod}; kernel files may import torch, triton, math, typing, "
                "functools, time and random only")
            return
    if "reference" in mod.split("."):
        add(f"static-fallback: line {line}: imports {mod}; the candidate may not use the reference")


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
