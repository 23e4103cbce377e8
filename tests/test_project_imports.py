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
