"""Journal: paths, ids, redaction, persistence."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dbmigrate.engine import Journal, default_journal_path, new_run_id, redact, register_secret
from dbmigrate.exceptions import UsageError


def test_default_path_honours_journal_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("DBMIGRATE_JOURNAL", raising=False)
    monkeypatch.delenv("DBMIGRATE_HOME", raising=False)
    assert default_journal_path() == Path("~/.dbmigrate/journal.sqlite").expanduser()
    monkeypatch.setenv("DBMIGRATE_HOME", str(tmp_path))
    assert default_journal_path() == tmp_path / "journal.sqlite"
    monkeypatch.setenv("DBMIGRATE_JOURNAL", str(tmp_path / "other.sqlite"))
    assert default_journal_path() == tmp_path / "other.sqlite"


def test_run_ids_are_short_and_sort_by_time():
    early = new_run_id(datetime(2026, 11, 22, 18, 5, 1, tzinfo=timezone.utc))
    late = new_run_id(datetime(2026, 11, 22, 18, 5, 2, tzinfo=timezone.utc))
    assert re.fullmatch(r"20261122-180501-[0-9a-f]{4}", early)
    assert early < late


@pytest.mark.parametrize("text, expected", [
    ("CREATE USER 'app'@'%' IDENTIFIED BY 's3cret'", "CREATE USER 'app'@'%' IDENTIFIED BY '***'"),
    ("ALTER USER x IDENTIFIED WITH mysql_native_password BY 'pw'",
     "ALTER USER x IDENTIFIED WITH mysql_native_password BY '***'"),
    ("CHANGE MASTER TO MASTER_HOST='db-1', MASTER_PASSWORD='it''s', MASTER_PORT=3306",
     "CHANGE MASTER TO MASTER_HOST='db-1', MASTER_PASSWORD='***', MASTER_PORT=3306"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD = \"x\\\"y\"", "CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD = '***'"),
    ("SET PASSWORD FOR 'bob'@'%' = PASSWORD('pw')", "SET PASSWORD FOR 'bob'@'%' = PASSWORD('***')"),
    ("dsn host=db-1 password=hunter2 user=root", "dsn host=db-1 password=*** user=root"),
    ("mysql --password='a b' -h db", "mysql --password=*** -h db"),
    ("mysql://root:pw@db-1:3306/app", "mysql://root:***@db-1:3306/app"),
    ("SELECT @@read_only", "SELECT @@read_only"),
])
def test_redact_masks_passwords(text, expected):
    assert redact(text) == expected


def test_registered_secrets_are_masked_everywhere_in_the_journal(tmp_path):
    register_secret("Tr0ub4dor&3")
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("r1", procedure="p", cluster="c", params={"note": "uses Tr0ub4dor&3"})
        journal.record_statement("r1", "db-1", "SELECT 'Tr0ub4dor&3'", 1.0, False)
        detail = journal.run_detail("r1")
    assert "Tr0ub4dor&3" not in str(detail)
    assert detail["statements"][0]["sql"] == "SELECT '***'"
    assert detail["params"] == {"note": "uses ***"}


def test_resolve_run_id_accepts_prefix_and_last_and_explains_misses(tmp_path):
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("20261122-180501-a1b2", procedure="p", cluster="c")
        journal.create_run("20261122-190000-c3d4", procedure="p", cluster="c")
        assert journal.resolve_run_id("20261122-18") == "20261122-180501-a1b2"
        assert journal.resolve_run_id("last") == "20261122-190000-c3d4"
        with pytest.raises(UsageError, match="ambiguous"):
            journal.resolve_run_id("20261122")
        with pytest.raises(UsageError, match="no run 'nope'"):
            journal.resolve_run_id("nope")


def test_journal_uses_wal_so_a_killed_writer_leaves_it_readable(tmp_path):
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        journal.create_run("r1", procedure="p", cluster="c")
        mode = journal._rows("PRAGMA journal_mode")[0]["journal_mode"]
        journal.step_started("r1", 0, "p", "fence")
        # No step_finished: as after a SIGKILL. Another process sees the committed row.
        with Journal(path) as reader:
            assert reader.last_step_status("r1") == {("p", "fence"): "started"}
    assert mode == "wal"


def test_journal_masks_credentials_read_from_option_files(tmp_path):
    """Secrets registered by the credential loader are masked in the journal too (one registry)."""
    from dbmigrate.db import credentials
    from dbmigrate.engine import Journal

    cnf = tmp_path / "c.cnf"
    cnf.write_text("[client]\nuser=u\npassword=zebra-violet-42\n")
    credentials.from_option_file(cnf)
    with Journal(tmp_path / "j.sqlite") as j:
        j.create_run("r1", procedure="demo", cluster="c")
        j.record_statement("r1", "s1", "SELECT 'zebra-violet-42'", 1.0, False)
        text = (tmp_path / "j.sqlite").read_bytes() + (tmp_path / "j.sqlite-wal").read_bytes()
    assert b"zebra-violet-42" not in text
