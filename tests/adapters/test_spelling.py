"""A knob's spelling is written once: in its framework's table (``adapters/<framework>/spelling.py``, or the
framework's single module), which its spec names; the catalog keeps meaning, domain, default, group and the rules.

The rule, read from the source with ``ast``: a knob's name and that knob's spelling in one framework's table, side by
side in one place of the code (the key and value of one dict item, the string arguments of one call, the strings of
one tuple or list), is a second table of it, unless it is the table itself (inside a ``Spelling(...)`` call).
"""

from __future__ import annotations

import ast
from pathlib import Path

from infrarsi.adapters import registry
from infrarsi.knobs import Knob
from infrarsi.knobs.catalog import KNOB_NAMES, KNOBS

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "infrarsi"


def _pairs() -> set[tuple[str, str]]:
    """(knob, spelling) of every registered framework's table."""
    return {(k, f) for s in registry.specs() for k, f in s.spelling.flags.items()}


def _strings(nodes: list[ast.AST | None]) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def second_tables(path: Path, pairs: set[tuple[str, str]]) -> list[str]:
    """``line: knob = spelling`` for each place of ``path`` that writes a knob beside its spelling, by the rule above."""
    tree = ast.parse(path.read_text())
    inside = {id(x) for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("Spelling")
              for x in ast.walk(n)}
    found = []
    for n in ast.walk(tree):
        if id(n) in inside:
            continue
        groups: list[set[str]] = []
        if isinstance(n, ast.Dict):
            groups = [_strings([k, v]) for k, v in zip(n.keys, n.values)]
        elif isinstance(n, ast.Call):
            groups = [_strings([*n.args, *(kw.value for kw in n.keywords)])]
        elif isinstance(n, (ast.Tuple, ast.List)):
            groups = [_strings(list(n.elts))]
        for g in groups:
            found += [f"{n.lineno}: {k} = {f}" for k, f in sorted(pairs) if k in g and f in g]
    return found


def test_no_module_writes_a_knobs_spelling_a_second_time():
    pairs = _pairs()
    found = {p.relative_to(ROOT).as_posix(): got for p in sorted(PKG.rglob("*.py")) if (got := second_tables(p, pairs))}
    assert found == {}


def test_the_rule_catches_a_second_table_and_lets_the_table_and_its_readers_be(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('from x import Spelling, SPELLING\n'
                 'T = Spelling(flags={"tensor_parallel": "--tensor-model-parallel-size"})\n'  # the table itself
                 'FLAGS = {"--tensor-model-parallel-size": "tensor_parallel"}\n'  # a second table
                 'K = _k("micro_batch_size", "int", megatron="--micro-batch-size")\n'  # the catalog's old form
                 'R = {SPELLING.flags[n]: n for n in ("tensor_parallel",)}\n'  # read from the table
                 'msg = "needs tensor_parallel (--tensor-model-parallel-size)"\n')  # prose in a message
    got = second_tables(f, {("tensor_parallel", "--tensor-model-parallel-size"),
                            ("micro_batch_size", "--micro-batch-size")})
    assert [g.split(":")[0] for g in got] == ["3", "4"]


def test_each_table_spells_catalog_knobs_or_its_frameworks_own():
    own = {n: sorted(set(registry.spec(n).spelling.flags) - set(KNOB_NAMES)) for n in registry.SPECS}
    assert own == {"minigpt": ["adam_impl", "intra_op_threads"], "megatron": [],
                   "torchtitan": ["data_parallel_replicate"], "simulated": []}


def test_the_catalog_names_no_framework_and_a_knob_has_no_spelling_of_its_own():
    text = (PKG / "knobs" / "catalog.py").read_text().lower()
    assert [n for n in registry.SPECS if n in text] == []
    assert "spelling" not in Knob.model_fields
    assert {k.name: k.env for k in KNOBS if k.env} == {
        "nccl_algo": "NCCL_ALGO", "nccl_proto": "NCCL_PROTO", "nccl_min_nchannels": "NCCL_MIN_NCHANNELS"}
