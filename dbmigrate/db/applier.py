"""All writes to servers go through here: one method per change.

In dry-run the applier sends nothing and records what it would have sent, so a
plan can be reviewed statement by statement.
"""

from __future__ import annotations

from typing import Callable

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.redact import redact


class Applier:
    def __init__(self, server: Server, dry_run: bool = False, on_planned: Callable[[str, str], None] | None = None):
        self.server = server
        self.flavor = server.flavor
        self.dry_run = dry_run
        self.planned: list[str] = []
        self._on_planned = on_planned

    def _send(self, sql: str, params: tuple | None = None) -> int:
        if self.dry_run:
            shown = redact(sql if params is None else f"{sql} -- {params!r}")
            self.planned.append(shown)
            if self._on_planned:
                self._on_planned(self.server.name, shown)
            return 0
        return self.server.execute(sql, params)

    def set_read_only(self, on: bool, lock_wait_timeout: float | None = None) -> None:
        """With lock_wait_timeout, turning read_only ON gives up after that many seconds
        instead of queueing every write behind a long statement (global read lock)."""
        for sql in self.flavor.set_read_only_sql(on, lock_wait_timeout if on else None):
            self._send(sql)

    def stop_replica(self) -> None:
        self._send(self.flavor.stop_replica_sql())

    def start_replica(self) -> None:
        self._send(self.flavor.start_replica_sql())

    def reset_replica_all(self) -> None:
        self._send(self.flavor.reset_replica_all_sql())

    def change_source(self, host: str, port: int, repl: Credentials, *, ssl: bool = False) -> None:
        self._send(self.flavor.change_source_sql(host, port, repl.user, repl.password, ssl=ssl))

    def add_source(self, conn: str, host: str, port: int, repl: Credentials, log_file: str, log_pos: int,
                   wild_do_tables: list[str]) -> None:
        """A named replication connection from (file, pos), filtered to the given schema.table patterns."""
        self._send(self.flavor.named_source_sql(conn, host, port, repl.user, repl.password, log_file, log_pos))
        self._send(self.flavor.named_filter_sql(conn, wild_do_tables))

    def start_source(self, conn: str) -> None:
        self._send(self.flavor.start_named_sql(conn))

    def stop_source(self, conn: str) -> None:
        self._send(self.flavor.stop_named_sql(conn))

    def remove_source(self, conn: str) -> None:
        self._send(self.flavor.stop_named_sql(conn))
        self._send(self.flavor.reset_named_all_sql(conn))

    def prepare_as_replica(self) -> None:
        for sql in self.flavor.prepare_as_replica_sql():
            self._send(sql)

    def kill_connection(self, connection_id: int) -> None:
        self._send(f"KILL CONNECTION {int(connection_id)}")

    def set_global(self, name: str, value: str | int | float) -> None:
        if not name.replace("_", "").isalnum():
            raise ValueError(f"not a variable name: {name!r}")
        literal = value if isinstance(value, (int, float)) else "'" + str(value).replace("'", "''") + "'"
        self._send(f"SET GLOBAL {name}={literal}")

    def buffer_pool_dump_now(self) -> None:
        """Ask InnoDB to write its page list (space_id,page_no) to innodb_buffer_pool_filename."""
        self._send("SET GLOBAL innodb_buffer_pool_dump_now=ON")

    def buffer_pool_load_now(self) -> None:
        """Start reading the pages listed in innodb_buffer_pool_filename (in the background)."""
        self._send("SET GLOBAL innodb_buffer_pool_load_now=ON")

    def buffer_pool_load_abort(self) -> None:
        self._send("SET GLOBAL innodb_buffer_pool_load_abort=ON")

    def ddl_without_binlog(self, statement: str) -> None:
        """Apply DDL on this server only: no binlog event, no GTID, nothing replicates.
        Give the applier a dedicated session (Server.dedicated()): the MySQL form
        spans three statements of one session."""
        for sql in self.flavor.ddl_without_binlog_sql(statement):
            self._send(sql)

    def sql(self, statement: str, params: tuple | None = None) -> int:
        """An arbitrary statement from a procedure (DDL, seeding). Still tagged, logged, dry-run aware."""
        return self._send(statement, params)

    # -- used by the procedures
    def replay_account_statement(self, statement: str) -> None:
        """A CREATE USER or GRANT read from another server (SHOW CREATE USER / SHOW GRANTS), replayed here."""
        if not statement.lstrip().upper().startswith(("CREATE USER ", "GRANT ")):
            raise ValueError("only CREATE USER and GRANT statements are replayed")
        self._send(statement)

    def drop_schema_without_binlog(self, schema: str) -> None:
        """Drop a copied schema on this server only (nothing replicates, no GTID)."""
        self.ddl_without_binlog("DROP DATABASE IF EXISTS `" + schema.replace("`", "``") + "`")

    def write_switchover_probe(self, run_id: str, primary: str) -> None:
        """A row on the new primary whose arrival on every follower proves that writes flow."""
        self._send("CREATE DATABASE IF NOT EXISTS dbmigrate")
        self._send("CREATE TABLE IF NOT EXISTS dbmigrate.switchover_probe "
                   "(run_id VARCHAR(64) PRIMARY KEY, primary_name VARCHAR(128), ts DATETIME(6))")
        self._send("REPLACE INTO dbmigrate.switchover_probe VALUES (%s, %s, UTC_TIMESTAMP(6))", (run_id, primary))
