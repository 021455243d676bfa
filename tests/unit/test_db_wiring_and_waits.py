"""Statements of the heartbeat, wiring and warm-up helpers in db/, and the waits that
use them, driven by a scripted server and a fake clock (no server, no sleeping)."""

from __future__ import annotations

from datetime import datetime

import pytest

from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import MARIADB, ReplicaStatus
from dbmigrate.db.heartbeat import HeartbeatSQL
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.warmup import ReadSession, clustered_scan_sql, index_scan_sql, key_lookup_sql
from dbmigrate.clock import FakeClock
from dbmigrate.exceptions import DbmigrateError, WaitTimeout


class ScriptedServer:
    """Records statements; answers reads from `answers` (a function of the statement)."""

    name, host, port, address = "db2", "127.0.0.1", 3307, "127.0.0.1:3307"

    def __init__(self, answers=lambda sql, params: [], flavor=MARIADB):
        self.flavor = flavor
        self.sent: list[tuple[str, tuple | None]] = []
        self.answers = answers
        self.closed = False

    def execute(self, sql, params=None):
        self.sent.append((sql, params))
        return 1

    def query(self, sql, params=None):
        self.sent.append((sql, params))
        return self.answers(sql, params)

    def scalar(self, sql, params=None):
        rows = self.query(sql, params)
        return next(iter(rows[0].values())) if rows else None

    def consume(self, sql, params=None):
        self.sent.append((sql, params))
        return 3

    def dedicated(self):
        return self

    def close(self):
        self.closed = True


# -- heartbeat ---------------------------------------------------------------------
def test_heartbeat_statements():
    srv = ScriptedServer(lambda sql, p: [{"ts": datetime(2026, 1, 1)}])
    hb = HeartbeatSQL(srv, "dbmigrate.heartbeat")
    hb.create_database()
    hb.create_table()
    assert hb.beat_unless_read_only() == 1
    assert hb.ts_of(7) == datetime(2026, 1, 1)
    sent = [s for s, _ in srv.sent]
    assert sent[0] == "CREATE DATABASE IF NOT EXISTS `dbmigrate`"
    assert sent[1].startswith("CREATE TABLE IF NOT EXISTS `dbmigrate`.`heartbeat` (server_id INT UNSIGNED")
    assert sent[2].endswith("WHERE @@GLOBAL.read_only = 0")  # never a write on a fenced server
    assert srv.sent[3] == ("SELECT ts FROM `dbmigrate`.`heartbeat` WHERE server_id = %s", (7,))


def test_heartbeat_table_name_is_checked():
    with pytest.raises(ValueError):
        HeartbeatSQL(ScriptedServer(), "db.t; DROP TABLE x")


# -- wiring ------------------------------------------------------------------------
def test_account_statements_and_dry_run():
    srv = ScriptedServer()
    app = Applier(srv)
    app.binlog_session(False)
    app.create_schema("app")
    app.create_user("dbm_app", "pw")
    app.grant("ALL PRIVILEGES ON *.*", "dbm_admin", with_grant_option=True)
    app.binlog_session(True)
    assert srv.sent == [
        ("SET SESSION sql_log_bin=0", None),
        ("CREATE DATABASE IF NOT EXISTS `app`", None),
        # MariaDB: the hash only, never the cleartext (binlogs, general log)
        ("CREATE USER %s@'%' IDENTIFIED BY PASSWORD %s", ("dbm_app", "*D821809F681A40A6E379B50D0463EFAE20BDD122")),
        ("GRANT ALL PRIVILEGES ON *.* TO %s@'%' WITH GRANT OPTION", ("dbm_admin",)),
        ("SET SESSION sql_log_bin=1", None),
    ]
    dry = Applier(ScriptedServer(), dry_run=True)
    dry.create_user("dbm_app", "secret-pw")
    assert dry.server.sent == [] and len(dry.planned) == 1


def test_drop_index_locally_writes_no_binlog():
    srv = ScriptedServer()
    Applier(srv).drop_index_locally("app", "orders", "idx_customer")
    assert srv.sent == [("SET STATEMENT sql_log_bin=0 FOR ALTER TABLE `app`.`orders` DROP INDEX `idx_customer`",
                         None)]


def _replica(statuses: list[dict], executed: str = "0-1-10"):
    """A replica whose SHOW SLAVE STATUS walks through `statuses` (the last one repeats)."""
    seen = iter(statuses)
    last: list[dict] = [statuses[0]]

    def answers(sql, params):
        if sql == "SHOW SLAVE STATUS":
            last[0] = next(seen, last[0])
            return [last[0]]
        if "gtid_current_pos" in sql:
            return [{"pos": executed}]
        return []

    return ScriptedServer(answers)


RUNNING = {"Master_Host": "127.0.0.1", "Master_Port": 3306, "Slave_IO_Running": "Yes", "Slave_SQL_Running": "Yes"}
CONNECTING = {**RUNNING, "Slave_IO_Running": "Connecting"}


def test_wait_replicating_returns_once_running_and_caught_up():
    from dbmigrate.topology.wire import wait_replicating

    clock = FakeClock()
    wait_replicating(_replica([CONNECTING, CONNECTING, RUNNING]), "db1", "0-1-10", 5, clock=clock)
    assert clock.sleeps == [0.1, 0.1]


def test_wait_replicating_stops_at_a_replication_error():
    from dbmigrate.topology.wire import wait_replicating

    broken = {**RUNNING, "Slave_SQL_Running": "No", "Last_SQL_Error": "Duplicate entry"}
    with pytest.raises(DbmigrateError, match=r"replication db1 -> db2 failed: Duplicate entry"):
        wait_replicating(_replica([broken]), "db1", "0-1-10", 5, clock=FakeClock())


def test_wait_replicating_times_out_on_the_clock():
    from dbmigrate.topology.wire import wait_replicating

    clock = FakeClock()
    with pytest.raises(WaitTimeout, match=r"db2 did not start replicating from db1 within 2s"):
        wait_replicating(_replica([RUNNING], executed="0-1-9"), "db1", "0-1-10", 2, clock=clock)
    assert sum(clock.sleeps) == pytest.approx(2.0)


# -- warm-up -----------------------------------------------------------------------
def test_warmup_statements():
    assert index_scan_sql("app.t", "PRIMARY") == "SELECT COUNT(*) FROM `app`.`t` FORCE INDEX (PRIMARY)"
    assert index_scan_sql("app.t", "k`1") == "SELECT COUNT(*) FROM `app`.`t` FORCE INDEX (`k``1`)"
    assert clustered_scan_sql("app.t", ["a", "b"]) == "SELECT COUNT(*) FROM `app`.`t` IGNORE INDEX (`a`, `b`)"
    assert clustered_scan_sql("app.t", []) == "SELECT COUNT(*) FROM `app`.`t`"
    assert key_lookup_sql("app.t", "id") == "SELECT * FROM `app`.`t` WHERE `id` = %s"


def test_read_session_is_read_only_and_bounded():
    srv = ScriptedServer()
    s = ReadSession(srv)
    s.use("app")
    s.use("app")  # already there: nothing sent
    assert s.read("SELECT COUNT(*) FROM t", time_limit_s=2) == 3
    s.read("SHOW TABLES", time_limit_s=2)  # only a SELECT gets the time limit
    assert [x for x, _ in srv.sent] == ["SET SESSION TRANSACTION READ ONLY", "USE `app`",
                                        "SET STATEMENT max_statement_time=2.000 FOR SELECT COUNT(*) FROM t",
                                        "SHOW TABLES"]
    assert s.timed_out(QueryError("stopped", errno=1969)) and not s.timed_out(QueryError("other", errno=1146))


# -- inspector reads ---------------------------------------------------------------
def test_checksum_differences_reads_the_named_table():
    srv = ScriptedServer(lambda sql, p: [{"db": "app", "tbl": "t", "chunks": 1}])
    assert Inspector(srv).checksum_differences("percona.checksums")[0]["tbl"] == "t"
    assert "FROM `percona`.`checksums` WHERE master_cnt <> this_cnt" in srv.sent[0][0]
    with pytest.raises(ValueError):
        Inspector(srv).checksum_differences("percona")


def test_server_clock():
    now = datetime(2026, 1, 1, 12)
    srv = ScriptedServer(lambda sql, p: [{"utc_now": now, "local_now": now}])
    assert Inspector(srv).server_clock() == (now, now)


def test_replica_status_type_is_flavor_neutral():
    # wait_replicating reads through Inspector.replica_status: the flavor parses the row.
    st = MARIADB.parse_replica_status(RUNNING)
    assert isinstance(st, ReplicaStatus) and st.running


# -- lag sampling on the fake clock ------------------------------------------------
T0 = datetime(2026, 1, 1, 12, 0, 0)
T1 = datetime(2026, 1, 1, 12, 0, 1)


def _primary():
    def answers(sql, params):
        if "server_id` " in sql or sql.endswith("AS `server_id`"):
            return [{"server_id": 1}]
        if "@@server_id" in sql:
            return [{"ts": T1}]
        if "gtid_binlog_pos" in sql:
            return [{"pos": "0-1-10"}]
        return []
    return ScriptedServer(answers)


def _lagging_replica(applied_after_reads: int | None):
    reads = [0]

    def answers(sql, params):
        if sql.startswith("SELECT ts FROM"):
            reads[0] += 1
            done = applied_after_reads is not None and reads[0] >= applied_after_reads
            return [{"ts": T1 if done else T0}]
        if sql == "SHOW SLAVE STATUS":
            return [RUNNING]
        if "gtid_current_pos" in sql:
            return [{"pos": "0-1-10" if applied_after_reads else "0-1-9"}]
        return []
    return ScriptedServer(answers)


def test_sample_lag_measures_when_the_probe_heartbeat_arrives():
    from dbmigrate.lag import sample_lag

    clock = FakeClock()
    [s] = sample_lag(_primary(), [_lagging_replica(3)], limit_ms=50, settle_ms=100, poll_s=0.01, clock=clock)
    assert s.heartbeat == "fresh" and s.lag_ms == pytest.approx(20.0) and s.ok
    assert clock.sleeps == [0.01, 0.01]


def test_sample_lag_waits_settle_ms_for_a_replica_that_never_applies():
    from dbmigrate.lag import sample_lag

    clock = FakeClock()
    [s] = sample_lag(_primary(), [_lagging_replica(None)], limit_ms=50, settle_ms=100, poll_s=0.01, clock=clock)
    # Its row is 1 s behind the primary's: the larger of that and the 100 ms waited.
    assert s.lag_ms == pytest.approx(1000.0) and not s.ok and s.behind == {"0": 1}
    assert sum(clock.sleeps) == pytest.approx(0.1)


def _pool_server(statuses: list[str]):
    """A source whose dump status walks through `statuses` (the last one repeats)."""
    seen = iter(statuses)
    last = [statuses[0]]

    def answers(sql, params):
        if "GLOBAL_STATUS" in sql:
            last[0] = next(seen, last[0])
            return [{"n": "INNODB_BUFFER_POOL_DUMP_STATUS", "v": last[0]}]
        if "innodb_buffer_pool_dump_pct" in sql:
            return [{"innodb_buffer_pool_dump_pct": 25}]
        if "datadir" in sql:
            return [{"datadir": "/var/lib/mysql/", "innodb_buffer_pool_filename": "ib_buffer_pool"}]
        return []
    return ScriptedServer(answers)


def test_buffer_pool_dump_waits_on_the_clock_and_restores_dump_pct():
    from dbmigrate.warm.methods import dump_source_pool

    clock = FakeClock()
    srv = _pool_server(["", "Dumping buffer pool(s)", "Dumping buffer pool(s)",
                        "Buffer pool(s) dump completed at 260101 12:00:00"])
    assert dump_source_pool(srv, timeout=5, clock=clock) == "/var/lib/mysql/ib_buffer_pool"
    assert clock.sleeps == [0.05, 0.05]
    writes = [sql for sql, _ in srv.sent if sql.startswith("SET GLOBAL")]
    assert writes == ["SET GLOBAL innodb_buffer_pool_dump_pct=100", "SET GLOBAL innodb_buffer_pool_dump_now=ON",
                      "SET GLOBAL innodb_buffer_pool_dump_pct=25"]


def test_buffer_pool_dump_times_out_on_the_clock():
    from dbmigrate.warm.methods import dump_source_pool

    srv = _pool_server(["", "Dumping buffer pool(s)"])
    with pytest.raises(WaitTimeout, match=r"did not complete within 1s \(status: Dumping buffer pool\(s\)\)"):
        dump_source_pool(srv, timeout=1, clock=FakeClock())
    assert srv.sent[-1][0] == "SET GLOBAL innodb_buffer_pool_dump_pct=25"  # restored on the way out


def test_a_new_accounts_password_never_reaches_the_statement_log():
    from dbmigrate.redact import redact

    dry = Applier(ScriptedServer(), dry_run=True)
    dry.create_user("dbm_app", "Qm4-only-here-pw")
    assert "Qm4-only-here-pw" not in dry.planned[0]
    assert "Qm4-only-here-pw" not in redact("CREATE USER %s@'%' IDENTIFIED BY %s -- ('dbm_app', 'Qm4-only-here-pw')")


# -- other waits on the clock ------------------------------------------------------
def test_haproxy_socket_wait_is_bounded_by_the_clock(tmp_path):
    from dbmigrate.routing.base import RouterError
    from dbmigrate.routing.haproxy import wait_for_socket

    clock = FakeClock()
    with pytest.raises(RouterError, match=r"did not answer within 1s"):
        wait_for_socket(str(tmp_path / "missing.sock"), timeout=1, clock=clock)
    assert sum(clock.sleeps) == pytest.approx(1.0)
    with pytest.raises(RouterError, match="HAProxy exited during startup"):
        wait_for_socket(str(tmp_path / "missing.sock"), alive=lambda: False, clock=FakeClock())


def test_stop_pid_of_a_process_already_gone():
    from dbmigrate.rehearsal.sandbox.instance import stop_pid

    clock = FakeClock()
    stop_pid(2 ** 22 + 12345, 5, clock=clock)  # no such pid: nothing to signal, nothing to wait for
    assert clock.sleeps == []


# -- redo since the last checkpoint (what a physical backup streams under its commit lock) --
def test_redo_since_checkpoint_per_flavor():
    from dbmigrate.db.flavor import MYSQL
    from dbmigrate.db.readers.status import StatusReader

    maria = ScriptedServer(lambda sql, p: [{"n": "INNODB_CHECKPOINT_AGE", "v": "7340032"}])
    assert StatusReader(maria).redo_since_checkpoint_bytes() == 7340032
    assert maria.sent[0][1] == ("INNODB_CHECKPOINT_AGE",)
    mysql = ScriptedServer(lambda sql, p: [{"n": "Innodb_redo_log_current_lsn", "v": "5000"},
                                           {"n": "Innodb_redo_log_checkpoint_lsn", "v": "1200"}], flavor=MYSQL)
    assert StatusReader(mysql).redo_since_checkpoint_bytes() == 3800
    assert "performance_schema.global_status" in mysql.sent[0][0]
    # A server that does not say (older MySQL): unknown, never 0.
    assert StatusReader(ScriptedServer(lambda sql, p: [], flavor=MYSQL)).redo_since_checkpoint_bytes() is None
