"""DDL tried on scratch copies of tables, never on the tables themselves.

A schema swap must know that every statement is valid against the live schema
(types, column and index names, algorithms) before any server leaves the pool.
The server is the only parser that knows: each statement runs on an empty copy
of its table (CREATE TABLE ... LIKE) in a scratch schema, with the binlog off (no
GTID, nothing replicates), and the scratch schema is dropped afterwards. No table
of the application is read beyond its definition, none is written.
"""

from __future__ import annotations

from types import TracebackType

from dbmigrate.db.connection import QueryError, Server, Unresponsive

SCRATCH_SCHEMA = "_dbmigrate_ddl_check"


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def scratch_name(schema: str, table: str) -> str:
    """The copy's name in the scratch schema: schema and table, within MySQL's 64 characters."""
    return f"{schema}__{table}"[:64]


class ScratchSchema:
    """A scratch schema on one server, on a session of its own; dropped on exit, also on failure.

    Every statement goes through the flavor's `ddl_without_binlog_sql`, so nothing reaches
    the binlog; a schema left by an earlier crash is dropped first.
    """

    def __init__(self, server: Server, name: str = SCRATCH_SCHEMA) -> None:
        self.server = server
        self.name = name
        self.session: Server | None = None

    def _run(self, statement: str) -> None:
        assert self.session is not None, "use ScratchSchema as a context manager"
        for sql in self.server.flavor.ddl_without_binlog_sql(statement):
            self.session.execute(sql)

    def __enter__(self) -> "ScratchSchema":
        self.session = self.server.dedicated()
        try:
            self._run(f"DROP DATABASE IF EXISTS {_ident(self.name)}")
            self._run(f"CREATE DATABASE {_ident(self.name)}")
        except BaseException:
            self.session.close()
            self.session = None
            raise
        return self

    def qualified(self, schema: str, table: str) -> str:
        """`scratch`.`copy`: where the copy of schema.table lives (or a new table is tried)."""
        return f"{_ident(self.name)}.{_ident(scratch_name(schema, table))}"

    def try_copy(self, schema: str, table: str) -> str | None:
        """An empty copy of schema.table (its definition only): None, or why the server refused."""
        return self.try_statement(f"CREATE TABLE {self.qualified(schema, table)} LIKE {_ident(schema)}.{_ident(table)}")

    def try_statement(self, statement: str) -> str | None:
        """None when the server accepts the statement; else the server's reason."""
        try:
            self._run(statement)
        except Unresponsive:
            raise  # no answer is no verdict on the statement
        except QueryError as e:
            # "name (address): <the server's reason> [errno] in: <statement>" -> the reason
            return e.message.split("): ", 1)[-1].rsplit(" in: ", 1)[0]
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.session is None:
            return
        try:
            self._run(f"DROP DATABASE IF EXISTS {_ident(self.name)}")
        finally:
            self.session.close()
            self.session = None
