"""The documentation says what the code does: the reference is the code's own (regenerated and
compared), the examples in docs/ run, links lead somewhere, and the README stays a front page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(\S+)(?: (\S+))?\n(.*?)^```$", re.M | re.S)


def reference_module():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "scripts" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(kind: str, tag: str | None = None) -> list[tuple[Path, str]]:
    """(file, text) of every fenced block ```kind [tag] in the docs and the README."""
    found = []
    for path in DOCS:
        for m in FENCE.finditer(path.read_text()):
            if m.group(1) == kind and (tag is None or m.group(2) == tag):
                found.append((path, m.group(3)))
    return found


def test_the_reference_is_the_codes_own():
    for path, text in reference_module().render_all().items():
        assert path.exists() and path.read_text() == text, \
            f"{path.relative_to(ROOT)} differs from the code: run .venv/bin/python scripts/reference.py"


def test_the_reference_documents_every_command_and_every_field():
    ref = reference_module()
    commands = ref.commands_md()
    for name in ("run", "plan", "warm", "digest capture", "consolidate plan", "sandbox up", "topology wire"):
        assert f"### `{name}`" in commands, name
    assert "| `--target-hit-ratio` |" in commands
    playbooks = ref.playbooks_md()
    for model in ("PromoteParams", "SchemaSwapParams", "ConsolidateParams", "WarmSpec", "HooksSpec"):
        assert f"### {model}" in playbooks, model
    assert "| `converge_max_trx` | integer | `10` |" in playbooks
    assert "### SshAccess" in ref.inventory_md()


def test_a_stale_reference_is_caught(tmp_path, monkeypatch):
    from dbmigrate.procedures.promote.procedure import PromoteParams

    ref = reference_module()
    monkeypatch.setattr(ref, "REFERENCE", tmp_path)
    for path, text in ref.render_all().items():
        path.write_text(text)
    monkeypatch.setattr(PromoteParams.model_fields["candidate"], "description", "a field whose text changed")
    stale = [path.name for path, text in ref.render_all().items() if path.read_text() != text]
    assert stale == ["playbooks.md"]


def test_inventory_examples_load():
    from dbmigrate.config import load_inventory

    examples = blocks("yaml", "inventory")
    assert len(examples) >= 2
    for path, text in examples:
        load_inventory(path.with_suffix(".yaml"), text=text)  # raises with the line on any error


def test_command_examples_run(tmp_path):
    lines = [(path, line[2:]) for path, text in blocks("console") for line in text.splitlines()
             if line.startswith("$ dbmigrate ")]
    assert len(lines) >= 3
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DBMIGRATE_HOME": str(tmp_path), "COLUMNS": "100"}
    for path, command in lines:
        argv = command.split()[1:]
        r = subprocess.run([sys.executable, "-m", "dbmigrate", *argv], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"{path.relative_to(ROOT)}: `{command}` exited {r.returncode}: {r.stderr}"


def test_relative_links_lead_to_files():
    broken = []
    for path in DOCS:
        text = FENCE.sub("", path.read_text())
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            if not (path.parent / target).resolve().exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    first_screen = "\n".join(readme.splitlines()[:30])
    assert "./scripts/setup && .venv/bin/dbmigrate rehearse promote" in first_screen
    assert "./scripts/setup --test && .venv/bin/python -m pytest" in first_screen


@pytest.mark.parametrize("name", ["promote", "schema-swap"])
def test_each_procedure_page_has_its_steps_as_a_table_with_bound_and_undo(name):
    text = (ROOT / "docs" / "procedures" / f"{name}.md").read_text()
    assert re.search(r"^\|[^\n]*\bbound\b[^\n]*\bundo\b[^\n]*\|$", text, re.M), name
