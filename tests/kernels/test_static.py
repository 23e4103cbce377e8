"""Static checks on candidate source: each cheat pattern is named, a clean kernel file passes."""

from __future__ import annotations

import pytest

from infrarsi.kernels.static import static_check

CLEAN = '''
import torch
import triton
import triton.language as tl

@triton.jit
def _k(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.exp(tl.load(X + offs, mask=offs < n)), mask=offs < n)

def forward(x):
    y = torch.empty_like(x)
    _k[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y
'''


def codes(src: str) -> set[str]:
    return {r.split(":", 1)[0] for r in static_check(src)}


def test_clean_candidate_passes():
    assert static_check(CLEAN) == []


@pytest.mark.parametrize("extra, code", [
    ("import time\ntime.perf_counter = lambda: 0.0\n", "static-patch"),
    ("torch.Tensor.sum = lambda *a: 0\n", "static-patch"),
    ("import triton.testing as tt\n", "static-import"),
    ("setattr(torch, 'rsqrt', None)\n", "static-builtin"),
    ("exec('y = 1')\n", "static-builtin"),
    ("import importlib\n", "static-import"),
    ("from . import reference\n", "static-import"),
    ("import numpy as np\n", "static-import"),
    ("def g(x):\n    try:\n        return forward(x)\n    except Exception:\n        return x\n", "static-try"),
    ("import contextlib\ndef g(x):\n    with contextlib.suppress(Exception):\n        return forward(x)\n",
     "static-try"),
    ("def g(x):\n    return torch.sigmoid(x)\n", "static-fallback"),
    ("def g(x):\n    return x.rsqrt()\n", "static-fallback"),
    ("import torch.nn.functional as F\ndef g(x):\n    return F.silu(x)\n", "static-fallback"),
])
def test_cheat_pattern_is_named(extra, code):
    assert code in codes(CLEAN + extra)


def test_torch_inside_a_kernel_body_is_named():
    # the CPU interpreter would run this as Python; no GPU compiler would accept it
    src = CLEAN.replace("tl.exp(tl.load(X + offs, mask=offs < n))", "torch.exp(tl.load(X + offs, mask=offs < n))")
    assert "static-kernel" in codes(src)


def test_kernel_math_is_not_host_math():
    # tl.exp inside the @triton.jit body is the kernel itself, not a fallback
    assert "static-fallback" not in codes(CLEAN)


def test_file_without_kernel_or_forward():
    assert codes("import torch\n") == {"static-no-kernel", "static-no-forward"}
    assert codes("def forward(:\n") == {"static-syntax"}


@pytest.mark.parametrize("module", ["os", "pathlib", "threading", "traceback", "weakref", "hashlib", "time",
                                    "random", "inspect", "sys", "gc", "ctypes", "torch.overrides", "torch.utils",
                                    "triton.testing", "triton.runtime"])
def test_only_allowlisted_modules_import(module):
    reasons = static_check(CLEAN + f"import {module}\n")
    assert [r.split(":", 1)[0] for r in reasons] == ["static-import"], reasons
    assert "may import __future__, functools, math, torch" in reasons[0]  # the message lists what is allowed


@pytest.mark.parametrize("extra", [
    "from torch import overrides\n",
    "def g(x):\n    return torch.overrides.get_default_nowrap_functions()\n",
    "def g(x):\n    return torch.where(x > 0, x, x)\n",
    "def g(x):\n    return torch.utils.data\n",
])
def test_torch_reach_is_an_allowlist(extra):
    assert codes(CLEAN + extra) & {"static-import", "static-fallback"}


@pytest.mark.parametrize("extra, code", [
    ("def g(x):\n    return getattr(x, 'ex' + 'p')()\n", "static-builtin"),
    ("def g(x):\n    return vars(x)\n", "static-builtin"),
    ("def g(x):\n    return type(x)\n", "static-builtin"),
    ("def g(x):\n    print('ok')\n", "static-builtin"),
    ("def g(x):\n    return id(x)\n", "static-builtin"),
    ("def g(x):\n    return __builtins__\n", "static-builtin"),
    ("def g(x):\n    return __file__\n", "static-builtin"),
    ("def g(x):\n    return x.__class__\n", "static-attribute"),
    ("def g(f):\n    return f.__globals__\n", "static-attribute"),
    ("def g(e):\n    return e.tb_frame.f_back\n", "static-attribute"),
    ("def g(x):\n    return x._base\n", "static-attribute"),
    ("def g(x):\n    return '{0.__class__}'.format(x)\n", "static-attribute"),
])
def test_no_attribute_access_by_computed_or_hidden_name(extra, code):
    assert code in codes(CLEAN + extra)


def test_allowed_builtins_and_bookkeeping_pass():
    src = CLEAN + ("def g(x, t):\n    n = max(1, len(range(3)))\n    assert isinstance(n, int)\n"
                   "    return torch.sum(x) / n, (t != -100).sum(), float(n), torch.float16\n")
    assert static_check(src) == []


def test_a_name_the_module_binds_is_not_a_builtin():
    assert static_check(CLEAN + "def g(x):\n    id = 3\n    return id\n") == []


# Class 1: attribute chains of allowed modules that lead to the interpreter (sys.modules, builtins, inspect, os), and
# exec/eval reached that way. Each of these passed the allowlist; the lint refuses them now (it is a lint: the
# isolation of the dynamic checks is what keeps a candidate from the records, tests/referee/test_isolation.py).
ROUTES = [
    ("import typing\nb = typing.sys.modules['builtins']\n", "typing.sys.modules"),
    ("import typing\ntyping.sys.modules['builtins'].exec('y = 1')\n", "typing.sys ... exec"),
    ("import triton.language as tl\ntl.core.builtins.exec('y = 1')\n", "triton.language.core.builtins.exec"),
    ("import triton.language as tl\nE = tl.core.builtins.eval\n", "triton.language.core.builtins.eval"),
    ("import torch\nst = torch.autograd.function.inspect.stack()\n", "torch.autograd.function.inspect.stack"),
    ("import torch.autograd.function as F\nenv = F.inspect.os.environ\n", "torch.autograd.function.inspect.os"),
    ("from typing import sys as s\n", "from typing import sys"),
    ("import typing\nc = typing.collections.abc\n", "typing.collections (resolved: a module off the allowlist)"),
]


@pytest.mark.parametrize("extra, route", ROUTES, ids=[r for _, r in ROUTES])
def test_routes_from_allowed_modules_to_the_interpreter_are_refused(extra, route):
    found = static_check(CLEAN + extra)
    assert found and {f.split(":", 1)[0] for f in found} <= {"static-attribute", "static-import", "static-builtin"}, \
        (route, found)


def test_the_shipped_candidates_pass_the_lint():
    from infrarsi.kernels.loader import KERNELS_ROOT

    files = [p for p in KERNELS_ROOT.glob("*/*.py") if p.name != "reference.py"]
    assert files and {str(p): static_check(p.read_text()) for p in files} == {str(p): [] for p in files}


# String evaluation through typing's hint evaluation: a string annotation is eval'd by get_type_hints, by a
# ForwardRef, and by functools.singledispatch's register (which calls get_type_hints). Each passed the lint before.
STRING_EVALS = [
    ("import typing\ndef f(a: \"__import__('os').system('id')\"): pass\ntyping.get_type_hints(f)\n",
     "typing.get_type_hints"),
    ("from typing import get_type_hints as h\ndef f(a: \"1\"): pass\nh(f)\n", "from typing import get_type_hints"),
    ("import typing\nr = typing.ForwardRef(\"[1]\")\n", "typing.ForwardRef"),
    ("import functools\n@functools.singledispatch\ndef f(a): pass\n", "functools.singledispatch"),
]


@pytest.mark.parametrize("extra, route", STRING_EVALS, ids=[r for _, r in STRING_EVALS])
def test_string_evaluation_through_type_hints_is_a_lint_finding(extra, route):
    assert "static-eval" in codes(CLEAN + extra), (route, static_check(CLEAN + extra))
