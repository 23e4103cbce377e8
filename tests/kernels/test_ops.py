"""The op table is written once (infrarsi/kernels/ops.py), and a new op is its folder plus one entry there."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from infrarsi.kernels.ops import OPERATORS, OPS

ROOT = Path(__file__).resolve().parents[2]


def _lists_of_ops(path: Path) -> list[int]:
    """Lines of a tuple, list, set or dict literal that holds two or more op names: a second op table."""
    tree = ast.parse(path.read_text())
    out = []
    for n in ast.walk(tree):
        elts = n.keys if isinstance(n, ast.Dict) else getattr(n, "elts", None) if isinstance(
            n, (ast.Tuple, ast.List, ast.Set)) else None
        if elts is None:
            continue
        names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in OPS}
        if len(names) >= 2:
            out.append(n.lineno)
    return out


def test_no_module_but_the_op_table_lists_the_ops():
    found = {p.relative_to(ROOT).as_posix(): lines for p in sorted((ROOT / "infrarsi").rglob("*.py"))
             if p.name != "ops.py" and (lines := _lists_of_ops(p))}
    assert found == {}, f"a second list of the kernel ops (read infrarsi.kernels.ops.OPS instead): {found}"


def test_the_rule_sees_a_second_table(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('X = ("rmsnorm", "rope")\nY = {"swiglu": 1, "cross_entropy": 2}\nZ = ("rmsnorm",)\n')
    assert _lists_of_ops(f) == [1, 2]


def test_each_op_has_its_folder_and_a_traffic_share():
    from infrarsi.kernels.loader import reference_path
    from infrarsi.kernels.space import traffic_shares

    dims = (("hidden", 64), ("ffn_hidden", 176), ("heads", 4), ("vocab", 512), ("seq", 32))
    shares = traffic_shares(dims, list(OPS), layers=2)
    assert abs(sum(shares.values()) - 1.0) < 1e-9 and all(v > 0 for v in shares.values())
    # rmsnorm: (2*2 + 1) * 2 * 64 * 3 = 1920 elements per token; cross_entropy: 2 * 512 * 2 = 2048
    assert OPERATORS["rmsnorm"].traffic(dict(dims), 2) == 1920 and OPERATORS["cross_entropy"].traffic(dict(dims), 2) == 2048
    assert all(reference_path(op).is_file() for op in OPS)


def test_a_new_op_is_its_folder_and_one_table_entry(tmp_path):
    """Done once, on a copy of the package: kernels/scale/ (a reference and a candidate) and one line in ops.py; then
    `infrarsi kernels list`, the minigpt adapter's kernel knobs and the traffic ranking know it, nothing else edited."""
    pkg = tmp_path / "infrarsi"
    shutil.copytree(ROOT / "infrarsi", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    kernels = tmp_path / "kernels"
    shutil.copytree(ROOT / "kernels", kernels, ignore=shutil.ignore_patterns("__pycache__", "generated"))
    (kernels / "scale").mkdir()
    (kernels / "scale" / "reference.py").write_text('"""y = 2x."""\n\ndef forward(x):\n    return 2 * x\n')
    (kernels / "scale" / "twice.py").write_text('"""y = x + x."""\n\ndef forward(x):\n    return x + x\n')
    ops = pkg / "kernels" / "ops.py"
    text = ops.read_text()
    entry = '    Operator(name="scale", traffic=lambda d, layers: layers * 2 * d["hidden"] * 3),\n'
    ops.write_text(text.replace(")}\nOPS:", entry + ")}\nOPS:"))
    assert ops.read_text().count("Operator(name=") == len(OPS) + 1
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "INFRARSI_KERNELS": str(kernels), "COLUMNS": "400"}
    code = ("import infrarsi, sys; assert infrarsi.__file__.startswith(sys.argv[1]), infrarsi.__file__\n"
            "from infrarsi.adapters.minigpt import KERNEL_OPS\n"
            "from infrarsi.kernels.space import traffic_shares\n"
            "from infrarsi.kernels.loader import list_candidates\n"
            "dims = (('hidden', 64), ('ffn_hidden', 176), ('heads', 4), ('vocab', 512), ('seq', 32))\n"
            "print('scale' in KERNEL_OPS, round(traffic_shares(dims, ['rmsnorm', 'scale'], 2)['scale'], 4),\n"
            "      [c.path.name for c in list_candidates('scale')])\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # scale: 2 * 2 * 64 * 3 = 768 against rmsnorm's 1920: 768 / 2688 = 0.2857
    assert out.stdout.split() == ["True", "0.2857", "['twice.py']"]
    cli = subprocess.run([sys.executable, "-m", "infrarsi.cli", "kernels", "list", "scale"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert cli.returncode == 0 and "twice.py" in cli.stdout, cli.stdout + cli.stderr[-2000:]
