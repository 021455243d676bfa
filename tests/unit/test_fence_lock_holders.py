"""The fence refusal names who holds what the fence waits for: a session holding LOCK TABLES
... WRITE (idle, so no running statement shows it) or FLUSH TABLES WITH READ LOCK. MariaDB
tells through information_schema.METADATA_LOCK_INFO (the metadata_lock_info plugin); without
the plugin the refusal says so and lists the tables in use. MySQL reads
performance_schema.metadata_locks."""

from __future__ import annotations

from dbmigrate.db.connection import QueryError
from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.db.inspector import Inspector, LockHolder
from dbmigrate.procedures.kit.fence_watch import FenceWatch


class FakeServer:
    """Answers the lock-holder query with `rows`, or with 'unknown table' when the plugin is missing."""

    def __init__(self, flavor, rows=None, open_tables=()):
        self.flavor, self.rows, self.open_tables = flavor, rows, open_tables
        self.sent: list[tuple[str, tuple | None]] = []

    def query(self, sql, params=None):
        self.sent.append((sql, params))
        if sql.startswith("SHOW OPEN TABLES"):
            return [{"Database": d, "Table": t, "In_use": 1} for d, t in self.open_tables]
        if self.rows is None:
            raise QueryError("Unknown table 'METADATA_LOCK_INFO' in information_schema", errno=1109)
        return self.rows


def row(id_, mode, db="", tbl="", user="app", command="Sleep", time=3):
    return {"id": id_, "user": user, "command": command, "time": time, "mode": mode, "db": db, "tbl": tbl}


def test_mariadb_names_an_idle_lock_tables_write_holder_and_an_ftwrl_holder():
    server = FakeServer(MARIADB, [row(9, "MDL_BACKUP_DDL"), row(9, "MDL_SHARED_NO_READ_WRITE", "app", "t"),
                                  row(9, "MDL_INTENTION_EXCLUSIVE", "app"),
                                  row(13, "MDL_BACKUP_FTWRL2", user="ops", time=40)])
    holders, note = Inspector(server).lock_holders(exclude_id=7)

    assert note == ""
    assert [h.describe() for h in holders] == [
        "session 9 (app, idle for 3s) holds LOCK TABLES app.t WRITE",
        "session 13 (ops, idle for 40s) holds FLUSH TABLES WITH READ LOCK"]
    sql, params = server.sent[0]
    assert "information_schema.METADATA_LOCK_INFO" in sql and params == (7,)


def test_without_the_plugin_the_holder_is_not_named_and_the_note_says_why():
    server = FakeServer(MARIADB, rows=None, open_tables=[("app", "t")])
    holders, note = Inspector(server).lock_holders(exclude_id=7)
    assert holders == []
    assert "metadata_lock_info plugin" in note and "tables in use: app.t" in note


def test_mysql_reads_performance_schema_metadata_locks():
    server = FakeServer(MYSQL, [row(21, "TABLE:SHARED_NO_READ_WRITE", "app", "t"), row(22, "GLOBAL:SHARED")])
    holders, _ = Inspector(server).lock_holders(exclude_id=7)
    assert [h.locks for h in holders] == [("LOCK TABLES app.t WRITE",), ("FLUSH TABLES WITH READ LOCK",)]
    assert "performance_schema.metadata_locks" in server.sent[0][0]


class Session:
    """The watchdog's side session: the fence 'blocks' until it is killed."""

    def __init__(self, holders, note=""):
        self.server = self
        self.holders, self.note = holders, note
        self.killed: list[int] = []

    def row_lock_waits(self):
        return 0

    def fence_blockers(self, fence_id):
        return []  # an idle holder runs no statement

    def lock_holders(self, fence_id):
        return self.holders, self.note

    def kill_query(self, session_id):
        self.killed.append(session_id)


def blocked_fence(session) -> FenceWatch:
    import time

    w = FenceWatch(session, session, fence_id=7, block_s=0.02, early_s=0.001)
    with w:
        deadline = time.monotonic() + 2
        while not session.killed and time.monotonic() < deadline:
            time.sleep(0.001)
    return w


def test_the_fence_refusal_names_the_session_holding_the_table_lock():
    w = blocked_fence(Session([LockHolder(9, "app", "Sleep", 3, ("LOCK TABLES app.t WRITE",))]))
    refusal = w.refusal("db1").message
    assert w.gave_up
    assert "(session 9 (app, idle for 3s) holds LOCK TABLES app.t WRITE)" in refusal, refusal
    assert "db1 stays writable (read_only=OFF), nothing changed" in refusal


def test_the_fence_refusal_says_when_the_server_cannot_name_the_holder():
    w = blocked_fence(Session([], note="information_schema.METADATA_LOCK_INFO cannot be read, so ..."))
    assert "METADATA_LOCK_INFO cannot be read" in w.refusal("db1").message
