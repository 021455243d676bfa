"""The wire window's pure parts: tshark's frames paired into statements (prepared text by
stream and statement id, time to the next server frame, database and account from the
handshake, COM_INIT_DB, a `USE`, or the processlist for sessions connected before), the
window chooser's sentence, and a replay whose classes fail."""

from __future__ import annotations

import io

from dbmigrate.digest.wire_dissect import Dissector, client_ports
from dbmigrate.digest.wire_window import write_entries
from dbmigrate.rehearsal.shape_replay import failed_classes
from dbmigrate.cli.rehearse import rehearsal_failure

PORT = 3306


def frame(t, stream, src, length, command="", query="", stmt_id="", schema="", user="", error=""):
    return [str(t), str(stream), str(src), str(length), str(command), query, str(stmt_id), schema, user, str(error)]


def test_prepared_executions_take_their_text_from_the_prepare_on_the_same_stream():
    d = Dissector(PORT)
    frames = [
        frame(1.000, 0, PORT, 108),  # greeting
        frame(1.001, 0, 50000, 200, user="app_user", schema="app"),  # handshake response
        frame(1.002, 0, PORT, 11),
        frame(1.010, 0, 50000, 40, command=22, query="SELECT a FROM t WHERE id = ?"),
        frame(1.011, 0, PORT, 90, stmt_id=7),
        frame(1.020, 0, 50000, 0),  # an ACK: no protocol byte
        frame(1.030, 0, 50000, 20, command=23, stmt_id=7),
        frame(1.0335, 0, PORT, 60),
        frame(1.040, 0, 50000, 9, command=25, stmt_id=7),  # close: no reply, the next reply is not its
        frame(1.050, 0, 50000, 20, command=3, query="SELECT 1 FROM u"),
        frame(1.052, 0, PORT, 40, error=1146),
    ]
    got = list(d.statements(frames))
    assert [(s.sql, s.prepared, s.db, s.user, s.error) for s in got] == [
        ("SELECT a FROM t WHERE id = ?", True, "app", "app_user", 0), ("SELECT 1 FROM u", False, "app", "app_user", 1146)]
    assert abs(got[0].seconds - 0.0035) < 1e-9 and abs(got[1].seconds - 0.002) < 1e-9
    assert d.counts.prepared_executions == 1 and d.counts.errors == 1 and d.counts.sessions_before == 0
    log = io.StringIO()
    assert write_entries(got, log) == 2
    text = log.getvalue()
    assert "use app;" in text and "# User@Host: app_user[app_user]" in text and "Query_time: 0.003500" in text


def test_the_default_database_follows_init_db_and_use_and_sessions_before_come_from_the_processlist():
    class S:  # a processlist row
        def __init__(self, user, host, db):
            self.user, self.host, self.db = user, host, db

    d = Dissector(PORT, known=client_ports([S("pool_user", "10.0.0.5:41000", "shop"), S("x", "localhost", None)]))
    frames = [
        frame(2.0, 3, 41000, 20, command=3, query="SELECT * FROM orders"),  # connected before the window
        frame(2.001, 3, PORT, 50),
        frame(2.01, 3, 41000, 10, command=2, schema="audit"),
        frame(2.011, 3, PORT, 11),
        frame(2.02, 3, 41000, 20, command=3, query="SELECT * FROM log"),
        frame(2.021, 3, PORT, 50),
        frame(2.03, 3, 41000, 20, command=3, query="USE `nope`"),
        frame(2.031, 3, PORT, 50, error=1049),  # a failed USE leaves the database as it was
        frame(2.04, 3, 41000, 20, command=3, query="SET SESSION long_query_time = 11.2, max_statement_time=5"),
        frame(2.041, 3, PORT, 11),
        frame(2.05, 3, 41000, 20, command=23, stmt_id=1),  # prepared before the window: text unknown
        frame(2.051, 3, PORT, 50),
    ]
    got = list(d.statements(frames))
    assert [(s.db, s.user) for s in got[:2]] == [("shop", "pool_user"), ("audit", "pool_user")]
    assert got[-1].db == "audit"
    assert d.counts.sessions_before == 1 and d.counts.unknown_executions == 1
    assert d.session_sets == {"pool_user": {"long_query_time": "11.2", "max_statement_time": "5"}}


def test_a_replay_whose_classes_fail_is_a_failed_rehearsal_naming_class_error_and_count():
    classes = [
        {"class": "select id from pa_orders where id = ?", "checksum": "A",
         "before": {"count": 40, "errors": 40, "errors_by_code": {"1046": 40}},
         "during": {"count": 5, "errors": 5, "errors_by_code": {"1290": 5}},
         "after": {"count": 30, "errors": 30, "errors_by_code": {"1046": 30}}},
        {"class": "insert into pa_orders", "checksum": "B",
         "before": {"count": 10, "errors_by_code": {}}, "during": {"count": 3, "errors_by_code": {"1290": 3}},
         "after": {"count": 10, "errors_by_code": {}}},
    ]
    failed = failed_classes(classes)
    assert failed == ["select id from pa_orders where id = ? (70 of 75 executions failed: error 1046 x 70)"]
    assert failed_classes(classes, {"A": 70}) == []  # as often as at capture: not the replay's doing
    report = {"lost_writes": 0, "run_status": "done", "rolled_back": False, "shape": {"failed_classes": failed}}
    why = rehearsal_failure(report, regress=False)
    assert "1 replayed class(es) failed" in why and "error 1046 x 70" in why and "pa_orders" in why


def test_a_regress_rehearsal_stopped_before_the_guard_says_so_not_that_the_guard_did_not_roll_back():
    stopped = {"lost_writes": 0, "run_status": "rolled_back", "rolled_back": True, "guard": None}
    why = rehearsal_failure(stopped, regress=True)
    assert "stopped before the guard judged (run rolled_back, rolled back)" in why and "guard did not" not in why
    judged = {"lost_writes": 0, "run_status": "done", "rolled_back": False, "guard": {"rollback": False}}
    assert "the guard did not roll back (run done)" in rehearsal_failure(judged, regress=True)
