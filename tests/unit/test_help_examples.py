"""Every command's --help example runs as printed: each parses (command, options, arguments), each
shipped file it names exists and validates, and those that need no server run on fixtures."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from dbmigrate.cli.examples import EXAMPLES
from dbmigrate.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DIGESTS = ROOT / "tests" / "fixtures" / "digest"

# Examples that need no server, with the exit codes they may end with on the fixtures
# (digest evaluate: 3 when its policy would roll back).
RUNNABLE = {
    "plan": {0},
    "digest show": {0},
    "digest compare": {0},
    "digest evaluate": {0, 3},
    "inventory validate": {0},
    "runs ls": {0},
    "sandbox ls": {0},
}


def _parse(tokens: list[str]):
    """Parse as the command line would, down to the leaf command: unknown options, missing
    arguments and wrong types raise usage errors."""
    command = typer.main.get_command(app)
    ctx = command.make_context("dbmigrate", list(tokens))
    while isinstance(command, TyperGroup):
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, command, rest = command.resolve_command(ctx, args)
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_parses_and_its_shipped_files_validate(name):
    tokens = shlex.split(EXAMPLES[name])
    assert tokens[0] == "dbmigrate" and " ".join(tokens[1:]).startswith(name), EXAMPLES[name]
    _parse(tokens[1:])
    for token in tokens:
        if token.startswith("playbooks/"):
            path = ROOT / token
            assert path.exists(), f"{name}: {token} is not shipped"
            if path.suffix == ".yaml" and not path.name.startswith("inventory"):
                from dbmigrate.app.runs import plan_playbook

                plan_playbook(path)  # loads, validates, its inventory and cluster are there


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A directory laid out as the examples assume: the shipped playbooks/, two digests, an inventory."""
    (tmp_path / "playbooks").symlink_to(ROOT / "playbooks")
    shutil.copy(DIGESTS / "before.json", tmp_path / "before.json")
    shutil.copy(DIGESTS / "after.json", tmp_path / "after.json")
    shutil.copy(ROOT / "playbooks" / "inventory.example.yaml", tmp_path / "inventory.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_example_runs_as_printed(workdir, name):
    tokens = shlex.split(EXAMPLES[name])[1:]
    r = CliRunner().invoke(app, tokens, env={"COLUMNS": "200", "DBMIGRATE_HOME": str(workdir / "home"),
                                            "DBMIGRATE_JOURNAL": str(workdir / "home" / "journal.sqlite"),
                                            "PATH": os.environ.get("PATH", "")})
    assert r.exit_code in RUNNABLE[name], (EXAMPLES[name], r.exit_code, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stdout + r.stderr
    assert "unknown key" not in r.stderr
