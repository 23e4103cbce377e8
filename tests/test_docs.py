"""The generated reference pages under docs/ match the code they are generated from."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_docs_are_current():
    r = subprocess.run([sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


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
