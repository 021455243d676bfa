"""All writes to servers go through here: one method per change.

In dry-run the applier sends nothing and records what it would have sent, so a
plan can be reviewed statement by statement.
"""

from __future__ import annotations

from typing import Any, Callable

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials, native_password_hash
from dbmigrate.db.generation import send_guarded
from dbmigrate.redact import redact, register_secret


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Applier:
    def __init__(self, server: Server, dry_run: bool = False, on_planned: Callable[[str, str], None] | None = None):
        self.server = server
        self.flavor = server.flavor
        self.dry_run = dry_run
        self.planned: list[str] = []
        self._on_planned = on_planned

    def _send(self, sql: str, params: tuple[Any, ...] | None = None) -> int:
        if self.dry_run:
            shown = redact(sql if params is None else f"{sql} -- {params!r}")
            self.planned.append(shown)
            if self._on_planned:
                self._on_planned(self.server.name, shown)
            return 0
        return self.server.execute(sql, params)

    # -- role changes: each carries this decision's fencing generation (db/generation.py) ----
    def _generation(self) -> int | None:
        """The generation role changes carry here (None: dry-run, or outside a run's decision)."""
        if self.dry_run:
            return None
        generations = self.server.ledger.generations  # the process's, unless the server was given another
        if not generations.armed:
            return None
        generations.ensure(self.server)
        return generations.current(self.server.address)

    def _send_role_change(self, statements: list[str]) -> None:
        """One request that does nothing when it lands after a later decision (Superseded when
        this process's own statement is refused: another process took over)."""
        if not statements:
            return
        if self._generation() is None:
            for sql in statements:
                self._send(sql)
            return
        send_guarded(self.server, statements)

    def set_read_only(self, on: bool, lock_wait_timeout: float | None = None) -> None:
        """With lock_wait_timeout, turning read_only ON gives up after that many seconds
        instead of queueing every write behind a long statement (global read lock)."""
        self._send_role_change(self.flavor.set_read_only_sql(on, lock_wait_timeout if on else None))

    def fence_and_read_binlog_pos(self, lock_wait_timeout: float, expiry_s: float | None = None) -> str | None:
        """read_only=ON (bounded like set_read_only) and the binlog position read right after it,
        in one round trip: inside a fenced window each round trip is write downtime. Returns
        the position; None in dry-run (nothing sent, the statements are recorded).

        With `expiry_s`, the same request first schedules the fence's expiry on the server
        (`cancel_fence_expiry` before the candidate opens): a tool that freezes or dies inside
        the window, or a fence that lands after the tool gave up on it, cannot hold the server
        read-only for longer than that."""
        gen = self._generation()
        statements = [*(self.flavor.fence_expiry_sql(expiry_s, gen) if expiry_s else []),
                      *self.flavor.set_read_only_sql(True, lock_wait_timeout)]
        if self.dry_run:
            for sql in statements:
                self._send(sql)
            return None
        if gen is None:
            return self.server.scalar_after(statements, self.flavor.gtid_binlog_pos_sql()) or ""
        rows = send_guarded(self.server, statements, self.flavor.gtid_binlog_pos_sql())
        return str(next(iter(rows[0].values())) or "") if rows else ""

    def cancel_fence_expiry(self) -> None:
        """Drop the fence's scheduled expiry (nothing replicates). Before a candidate opens, and
        whenever the fenced server is unfenced by the tool itself."""
        self._send_role_change(self.flavor.cancel_fence_expiry_sql())

    def stop_replica(self) -> None:
        self._send_role_change([self.flavor.stop_replica_sql()])

    def start_replica(self) -> None:
        self._send_role_change([self.flavor.start_replica_sql()])

    def restart_replica_io(self) -> None:
        """A new connection to the source: after a partition heals, the old one may stay silent for
        seconds (the source's kernel backs off its retransmissions); the SQL thread is untouched."""
        self._send_role_change(self.flavor.restart_io_thread_sql())

    def reset_replica_all(self) -> None:
        self._send_role_change([self.flavor.reset_replica_all_sql()])

    def change_source(self, host: str, port: int, repl: Credentials, *, ssl: bool = False) -> None:
        self._send_role_change([self.flavor.change_source_sql(host, port, repl.user, repl.password, ssl=ssl)])

    def add_source(self, conn: str, host: str, port: int, repl: Credentials, log_file: str, log_pos: int,
                   wild_do_tables: list[str]) -> None:
        """A named replication connection from (file, pos), filtered to the given schema.table patterns."""
        self._send(self.flavor.named_source_sql(conn, host, port, repl.user, repl.password, log_file, log_pos))
        self._send(self.flavor.named_filter_sql(conn, wild_do_tables))

    def add_source_at_gtid(self, conn: str, host: str, port: int, repl: Credentials, gtid_pos: str,
                           wild_do_tables: list[str]) -> None:
        """A named connection that starts after `gtid_pos` (a physical copy's position), filtered.
        Only for a server with no other connection: the slave position is server-wide."""
        self._send("SET GLOBAL gtid_slave_pos=%s", (gtid_pos,))
        self._send(self.flavor.named_source_gtid_sql(conn, host, port, repl.user, repl.password))
        self._send(self.flavor.named_filter_sql(conn, wild_do_tables))

    def start_source(self, conn: str) -> None:
        self._send(self.flavor.start_named_sql(conn))

    def stop_source(self, conn: str) -> None:
        self._send(self.flavor.stop_named_sql(conn))

    def remove_source(self, conn: str) -> None:
        self._send(self.flavor.stop_named_sql(conn))
        self._send(self.flavor.reset_named_all_sql(conn))

    def prepare_as_replica(self) -> None:
        self._send_role_change(self.flavor.prepare_as_replica_sql())

    def kill_connection(self, connection_id: int) -> None:
        self._send(f"KILL CONNECTION {int(connection_id)}")

    def kill_if_idle(self, ids: list[int]) -> bool:
        """End each of these sessions that is idle when the server runs the statement; False
        when the flavor cannot do it in one statement (nothing was sent)."""
        sql = self.flavor.kill_if_idle_sql(ids) if ids else None
        if sql is None:
            return False
        self._send(sql)
        return True

    def kill_query(self, connection_id: int) -> None:
        """End the statement a session is running; the session (and its transaction) stays."""
        self._send(f"KILL QUERY {int(connection_id)}")

    # -- topology wiring -------------------------------------------------------
    def binlog_session(self, on: bool) -> None:
        """Binlog (or not) what this session sends next: accounts created on every server
        with it off give no server GTIDs the others lack."""
        self._send(f"SET SESSION sql_log_bin={1 if on else 0}")

    def create_schema(self, schema: str) -> None:
        self._send(f"CREATE DATABASE IF NOT EXISTS {_ident(schema)}")

    def create_user(self, user: str, password: str) -> None:
        """An account that may connect from any host.

        On MariaDB the password goes as its mysql_native_password hash
        (`IDENTIFIED BY PASSWORD`), so a binlogged CREATE USER (replicated to the
        replicas) and the general log never hold it in clear text."""
        register_secret(password)  # it travels as a parameter: no SQL pattern would mask it in the log
        if self.flavor.name == "mariadb":
            self._send("CREATE USER %s@'%' IDENTIFIED BY PASSWORD %s", (user, native_password_hash(password)))
        else:
            self._send("CREATE USER %s@'%' IDENTIFIED BY %s", (user, password))

    def grant(self, privileges_on: str, user: str, *, with_grant_option: bool = False) -> None:
        """GRANT `privileges_on` ("PRIVILEGES ON what", from configuration, never from input) TO user@'%'."""
        self._send(f"GRANT {privileges_on} TO %s@'%'" + (" WITH GRANT OPTION" if with_grant_option else ""), (user,))

    def drop_index_locally(self, schema: str, table: str, index: str) -> None:
        """Drop an index on this server only (nothing replicates): a deliberate regression."""
        self.ddl_without_binlog(f"ALTER TABLE {_ident(schema)}.{_ident(table)} DROP INDEX {_ident(index)}")

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

    def sql(self, statement: str, params: tuple[Any, ...] | None = None) -> int:
        """An arbitrary statement from a procedure (DDL, seeding). Still tagged, logged, dry-run aware."""
        return self._send(statement, params)

    # -- used by the procedures
    def replay_account_statement(self, statement: str) -> None:
        """A CREATE USER or GRANT read from another server (SHOW CREATE USER / SHOW GRANTS), replayed here."""
        if not statement.lstrip().upper().startswith(("CREATE USER ", "GRANT ")):
            raise ValueError("only CREATE USER and GRANT statements are replayed")
        self._send(statement)

    def create_role(self, role: str) -> None:
        """A role as on another server; its administrator is the tool's account (MariaDB's default)."""
        self._send("CREATE ROLE IF NOT EXISTS " + _ident(role))

    def grant_role(self, role: str, user: str, host: str) -> None:
        """GRANT role TO user@host, or TO another role when host is ''."""
        self._send(f"GRANT {_ident(role)} TO " + (f"%s@%s" if host else "%s"), (user, host) if host else (user,))

    def set_default_role(self, role: str, user: str, host: str) -> None:
        self._send(f"SET DEFAULT ROLE {_ident(role)} FOR %s@%s", (user, host))

    def drop_schema_without_binlog(self, schema: str) -> None:
        """Drop a copied schema on this server only (nothing replicates, no GTID)."""
        self.ddl_without_binlog("DROP DATABASE IF EXISTS `" + schema.replace("`", "``") + "`")

    def write_switchover_probe(self, run_id: str, primary: str) -> None:
        """A row on the new primary whose arrival on every follower proves that writes flow."""
        self._send("CREATE DATABASE IF NOT EXISTS dbmigrate")
        self._send("CREATE TABLE IF NOT EXISTS dbmigrate.switchover_probe "
                   "(run_id VARCHAR(64) PRIMARY KEY, primary_name VARCHAR(128), ts DATETIME(6))")
        self._send("REPLACE INTO dbmigrate.switchover_probe VALUES (%s, %s, UTC_TIMESTAMP(6))", (run_id, primary))
