"""A command loads what it needs: `--version` nothing, `run` neither the terminal UI, the HTTP
client, the sandbox nor the other procedures; and every command is reachable that way."""

from __future__ import annotations

import json
import subprocess
import sys

from dbmigrate.cli.main import app
from dbmigrate.cli.root import COMMAND_MODULES, build, command_of


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_every_top_level_command_has_its_module():
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert names == set(COMMAND_MODULES)


def test_a_command_alone_registers_what_the_whole_application_has_for_it():
    whole = {c.name for c in app.registered_commands}
    alone = build(["run"])
    assert {c.name for c in alone.registered_commands} == {"run", "plan", "resume", "rollback"} <= whole
    assert [g.name for g in alone.registered_groups] == ["runs"]


def test_the_command_is_the_first_word_that_is_not_an_option():
    assert command_of(["--debug", "run", "x.yaml", "--dry-run"]) == "run"
    assert command_of(["sandbox", "up"]) == "sandbox"
    assert command_of(["--help"]) is None
    assert command_of(["nosuch"]) is None  # the whole application reports the unknown command


def test_version_loads_no_command():
    loaded = modules_after("import sys; sys.argv = ['dbmigrate', '--version']\n"
                           "from dbmigrate.cli.main import main; main()")
    assert "typer" not in loaded and "rich" not in loaded and "pydantic" not in loaded


def test_run_loads_neither_the_ui_nor_other_procedures():
    loaded = modules_after("from dbmigrate.cli.root import build; build(['run'])\n"
                           "from dbmigrate.procedures import registry; registry.get('promote')")
    assert "dbmigrate.procedures.promote.procedure" in loaded
    for heavy in ("textual", "httpx", "dbmigrate.tui", "dbmigrate.rehearsal.sandbox.manager",
                  "dbmigrate.procedures.consolidate.procedure", "dbmigrate.procedures.schema_swap.procedure",
                  "dbmigrate.report.html"):
        assert heavy not in loaded, heavy


def test_an_unknown_procedure_still_lists_every_known_one():
    from dbmigrate.exceptions import UsageError
    from dbmigrate.procedures import registry

    try:
        registry.get("nosuch")
    except UsageError as e:
        assert "consolidate" in str(e) and "promote" in str(e) and "schema-swap" in str(e)
    else:
        raise AssertionError("an unknown procedure was accepted")
