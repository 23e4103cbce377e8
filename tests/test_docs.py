"""The generated reference pages under docs/ match the code they are generated from."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_docs_are_current():
    r = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_architecture_page_is_drawn_from_the_tree():
    """docs/architecture.md is scripts/gen_docs.py's output: every package in its layer of the import graph, with
    what it imports and its modules' own first sentences; a module added or an import changed redraws it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_docs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from infrarsi.testing import import_graph

    text = (ROOT / "docs/architecture.md").read_text()
    assert text == gen_docs.architecture_page()
    layers = import_graph.layers(import_graph.package_graph())
    assert "| 0 | `infrarsi/trial/` |" in text and f"| {len(layers) - 1} | `infrarsi/cli.py` |" in text
    assert "`workload` (Workload: one contract bound to its folder and its adapter, built once per stage)" in text


def test_contract_page_lists_every_field_with_its_check():
    text = (ROOT / "docs/contract.md").read_text()
    # a field, its default and its bound, as declared in infrarsi/contract/model.py
    assert "| `memory_capacity_gib` | number | **required** | > 0 |" in text
    assert "| `precision_fraction` | number | `0.1` | > 0, <= 1 |" in text


def test_the_architecture_page_names_every_package_and_module_of_the_tree():
    """docs/architecture.md is the newcomer's map: a package or a top-level module it does not name is one
    nobody can find (checked against the tree, as the generated pages are)."""
    text = (ROOT / "docs/architecture.md").read_text()
    tree = sorted(p.name for p in (ROOT / "infrarsi").iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    tree += sorted(p.name for p in (ROOT / "infrarsi").glob("*.py") if p.name != "__init__.py")
    assert [name for name in tree if f"infrarsi/{name}" not in text] == []


def test_the_cli_page_names_every_verb_and_flag():
    """docs/cli.md has a heading for every verb the CLI registers (sub-commands included) and names each flag."""
    import typer

    from infrarsi.cli import _register_tools, app

    _register_tools()
    text = (ROOT / "docs/cli.md").read_text()
    root = typer.main.get_command(app)

    def walk(cmd, path: list[str]):
        if getattr(cmd, "commands", None):  # a group
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, cmd

    verbs = list(walk(root, []))
    assert len(verbs) >= 14
    for path, cmd in verbs:
        verb = " ".join(path)
        assert f"infrarsi {verb}" in text, f"docs/cli.md does not name `infrarsi {verb}`"
        for p in cmd.params:
            for opt in p.opts if p.param_type_name == "option" else []:
                if opt != "--help":
                    assert f"`{opt}" in text or f"{opt} " in text or f"{opt}]" in text, f"{verb}: {opt} not in docs/cli.md"
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
        assert code in text


def test_every_file_the_how_to_add_section_names_exists():
    """docs/architecture.md's "How to add a framework, a knob, a kernel operator" lists files: each one it names
    (outside the <placeholders>) is in the tree, so the list cannot point at a file that moved."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## How to add a framework, a knob, a kernel operator", 1)[1].split("\n## ", 1)[0]
    # a path (with a folder) is checked; a bare file name (`reference.py`) lives in the folder named before it
    named = {m for m in re.findall(r"`([\w/<>.-]+\.py|[\w/<>.-]+/)`", section) if "<" not in m and "/" in m}
    assert named, "the section names no file"
    missing = [n for n in sorted(named)
               if not any((ROOT / base / n).exists() for base in ("", "infrarsi", "infrarsi/adapters"))]
    assert missing == []
