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
