"""The slow-log window against an in-memory server: the saved settings are persisted
before any change, restored in the right order, and a stale window is refused."""

from __future__ import annotations

import json
import re

import pytest

from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.exceptions import SafetyError, UsageError
from dbmigrate.digest.window import (SlowLogWindow, load_saved_settings, restore, saved_settings_file_writer,
                                         saved_settings_path_for)

ORIGINAL = {"long_query_time": 2.5, "slow_query_log": 0, "log_slow_rate_limit": 1,
            "log_slow_filter": "admin,filesort", "log_slow_verbosity": "query_plan", "min_examined_row_limit": 0,
            "log_output": "TABLE", "slow_query_log_file": "/var/lib/mysql/db1-slow.log", "datadir": "/var/lib/mysql/"}


class FakeServer:
    """Just enough of Server for Inspector/Applier: global variables and a statement log."""

    name, host, port, address = "db1", "10.0.0.1", 3306, "10.0.0.1:3306"

    def __init__(self, flavor=MARIADB, globals_=None, fail_on: str | None = None):
        self.flavor = flavor
        self.globals = dict(globals_ or ORIGINAL)
        self.events: list[tuple] = []
        self.fail_on = fail_on

    def query(self, sql, params=None):
        if "PROCESSLIST" in sql:
            return [{"ID": 7, "USER": "app", "HOST": "h", "DB": "app", "COMMAND": "Sleep", "TIME": 3, "STATE": None}]
        names = re.findall(r"@@GLOBAL\.(\w+)", sql)
        return [{n: self.globals[n] for n in names}]

    def execute(self, sql, params=None):
        m = re.fullmatch(r"SET GLOBAL (\w+)=(.*)", sql)
        assert m, sql
        name, literal = m.groups()
        if name == self.fail_on:
            raise RuntimeError(f"refused {name}")
        value = literal[1:-1].replace("''", "'") if literal.startswith("'") else \
            (float(literal) if "." in literal else int(literal))
        self.events.append(("set", name, value))
        self.globals[name] = value
        return 0


def test_persist_happens_before_any_change_and_holds_the_old_values():
    srv = FakeServer()

    def persist(saved):
        srv.events.append(("persist", dict(saved["variables"])))

    w = SlowLogWindow(srv, persist=persist)
    saved = w.open()
    assert srv.events[0][0] == "persist"
    assert srv.events[0][1] == {k: v for k, v in ORIGINAL.items() if k != "datadir"}
    assert saved["address"] == "10.0.0.1:3306" and saved["flavor"] == "mariadb"
    # window settings applied, long_query_time last
    assert [e[1] for e in srv.events[1:]][-1] == "long_query_time"
    assert srv.globals["long_query_time"] == 0 and srv.globals["slow_query_log"] == 1
    assert srv.globals["log_output"] == "TABLE,FILE"
    assert srv.globals["log_slow_verbosity"] == ""
    assert srv.globals["slow_query_log_file"].startswith("/var/lib/mysql/dbmigrate-digest-")
    assert w.sessions_before == 1

    srv.events.clear()
    w.close()
    assert {k: srv.globals[k] for k in ORIGINAL} == ORIGINAL
    order = [e[1] for e in srv.events]
    assert order[0] == "long_query_time" and order[-1] == "slow_query_log_file"


def test_restore_is_idempotent_and_standalone():
    srv = FakeServer()
    w = SlowLogWindow(srv)
    saved = w.open()
    # the tool "crashes" here: a fresh process restores from the persisted dict alone
    assert restore(srv, json.loads(json.dumps(saved)))
    assert {k: srv.globals[k] for k in ORIGINAL} == ORIGINAL
    srv.events.clear()
    assert restore(srv, saved) == []  # nothing left to change
    assert srv.events == []


def test_restore_refuses_another_server():
    srv = FakeServer()
    saved = SlowLogWindow(srv).open()
    other = FakeServer()
    other.address = "10.0.0.2:3306"
    with pytest.raises(SafetyError, match="saved on 10.0.0.1:3306"):
        restore(other, saved)


def test_a_window_left_open_by_a_crash_is_not_saved_as_the_previous_state():
    srv = FakeServer(globals_={**ORIGINAL, "long_query_time": 0.0,
                               "slow_query_log_file": "/var/lib/mysql/dbmigrate-digest-20260101T000000Z-1.slow.log"})
    with pytest.raises(SafetyError, match="already logging to a dbmigrate capture file") as e:
        SlowLogWindow(srv, persist=lambda s: pytest.fail("must not persist")).open()
    assert "digest restore" in e.value.hint
    assert srv.events == []


def test_a_failure_while_opening_puts_everything_back():
    srv = FakeServer(fail_on="long_query_time")
    with pytest.raises(RuntimeError):
        SlowLogWindow(srv).open()
    assert {k: srv.globals[k] for k in ORIGINAL} == ORIGINAL


def test_relative_slow_log_path_goes_to_the_datadir():
    srv = FakeServer(globals_={**ORIGINAL, "slow_query_log_file": "db1-slow.log"})
    w = SlowLogWindow(srv)
    w.open()
    assert w.log_file.startswith("/var/lib/mysql/dbmigrate-digest-")


def test_mysql_window_settings():
    s = MYSQL.slow_log_window_settings("/x/w.log", {"log_output": "NONE"})
    assert list(s)[-1] == "long_query_time" and s["long_query_time"] == 0
    assert s["log_output"] == "FILE"
    assert "log_slow_rate_limit" not in s  # MariaDB only
    assert set(s) <= set(MYSQL.slow_log_variables())
    assert set(MARIADB.slow_log_window_settings("/x", {})) <= set(MARIADB.slow_log_variables())


def test_saved_settings_file(tmp_path):
    path = saved_settings_path_for(tmp_path / "cap.digest.json")
    assert path.name == "cap.saved-settings.json"
    saved = SlowLogWindow(FakeServer(), persist=saved_settings_file_writer(path)).open()
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_saved_settings(path) == saved
    (tmp_path / "bad.json").write_text('{"kind": "other"}')
    with pytest.raises(UsageError, match="not a dbmigrate slow-log saved-settings file"):
        load_saved_settings(tmp_path / "bad.json")
