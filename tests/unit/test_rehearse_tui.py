"""`rehearse ... --tui` is refused before anything is built when it cannot work: without a
terminal (the session would write escape codes into a pipe), and with `--remote` (the playbook
then runs in a child process of its own)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dbmigrate.cli.main import app
from dbmigrate.exceptions import UsageError
from dbmigrate.rehearsal.rehearse import rehearse_promote


@pytest.mark.parametrize("command", ["promote", "schema-swap", "consolidate"])
def test_tui_without_a_terminal_is_refused_before_any_sandbox(command, tmp_path):
    r = CliRunner().invoke(app, ["rehearse", command, "--tui"], env={"COLUMNS": "200",
                                                                      "DBMIGRATE_HOME": str(tmp_path)})
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert "--tui needs an interactive terminal" in r.stderr and "rehearse without --tui" in r.stderr, r.stderr
    assert not (tmp_path / "sandboxes").exists() and "sandbox" not in r.stdout


def test_tui_with_remote_is_refused_before_any_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path))
    with pytest.raises(UsageError, match="--remote runs the playbook in a child process"):
        rehearse_promote(remote=True, driver=object())
    assert list(tmp_path.iterdir()) == []
