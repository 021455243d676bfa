"""A rehearsal stopped by Ctrl-C removes its topology: it must not then suggest rolling back or
resuming a run whose servers are gone."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dbmigrate.cli.main import app
from dbmigrate.engine.events import RunFinished

INTERRUPTED = RunFinished(run_id="20261120-100000-aaaa", status="interrupted",
                          summary="interrupted by the operator in step 'fence', which may be half done; undo with: "
                                  "dbmigrate rollback 20261120-100000-aaaa, or continue with: dbmigrate resume "
                                  "20261120-100000-aaaa")


def interrupted_rehearsal(**kwargs):
    for subscriber in kwargs["subscribers"]:
        subscriber(INTERRUPTED)
    raise KeyboardInterrupt


@pytest.mark.parametrize("command, target", [
    (["rehearse", "promote", "--compose"], "dbmigrate.rehearsal.rehearse.rehearse_promote"),
    (["rehearse", "schema-swap", "--compose"], "dbmigrate.rehearsal.rehearse_swap.rehearse_schema_swap"),
    (["rehearse", "consolidate", "--compose"], "dbmigrate.rehearsal.consolidate.rehearse_consolidate"),
])
def test_interrupted_rehearsal_says_its_topology_is_gone(monkeypatch, command, target):
    monkeypatch.setattr(target, interrupted_rehearsal)
    r = CliRunner().invoke(app, command, env={"COLUMNS": "300"})
    said = r.stdout + r.stderr
    assert r.exit_code == 130, (r.exit_code, said)
    assert "dbmigrate rollback 2026" not in said and "dbmigrate resume 2026" not in said, said
    assert "runs show last" not in said, said
    assert "removed its topology: nothing is left to roll back or resume" in r.stderr, said
    assert "interrupted by the operator in step 'fence'" in r.stdout, said


def test_kept_rehearsal_still_names_the_run_to_undo(monkeypatch):
    monkeypatch.setattr("dbmigrate.rehearsal.rehearse.rehearse_promote", interrupted_rehearsal)
    r = CliRunner().invoke(app, ["rehearse", "promote", "--keep"], env={"COLUMNS": "300"})
    assert r.exit_code == 130
    assert "dbmigrate rollback 20261120-100000-aaaa" in r.stdout
