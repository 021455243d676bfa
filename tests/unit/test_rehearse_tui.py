"""`rehearse ... --tui` is refused before anything is built when it cannot work: without a
terminal (the session would write escape codes into a pipe), and with `--remote` (the playbook
then runs in a child process of its own)."""

from __future__ import annotations

from pathlib import Path

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


PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def test_a_session_closed_before_its_run_is_an_error_not_an_outcome(tmp_path, monkeypatch):
    from dbmigrate.exceptions import DbmigrateError
    from dbmigrate.tui.rehearsal import SessionDriver

    monkeypatch.setenv("DBMIGRATE_JOURNAL", str(tmp_path / "journal.sqlite"))
    opened = []
    driver = SessionDriver(opened.append)  # the session "closes" at once: no run took place
    with pytest.raises(DbmigrateError, match="did not take place in the terminal session: the session was closed"):
        driver.run(PLAYBOOKS / "promote-replica.yaml")
    assert opened and opened[0].autostart  # the run starts with the session


def test_the_consolidation_rollback_done_with_b_on_the_board_is_not_done_again(tmp_path, monkeypatch):
    from dbmigrate.tui.rehearsal import SessionDriver
    from dbmigrate.tui.session import CutoverApp

    monkeypatch.setenv("DBMIGRATE_JOURNAL", str(tmp_path / "journal.sqlite"))
    driver = SessionDriver()
    driver.app = CutoverApp(PLAYBOOKS / "consolidate-shards.yaml", monitor=False)
    row = driver.app.fleet.rows["db-legacy-2"]
    row.stage, row.reason = "rolled back", "routed shard_3, shard_4 back to db-legacy-2"
    assert driver.roll_back("RUN", "db-legacy-2") == "routed shard_3, shard_4 back to db-legacy-2"
