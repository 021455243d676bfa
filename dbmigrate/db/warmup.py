"""Warm-up reads: the statements that pull pages into a buffer pool, and the
read-only sessions that run them.

The fixed statements live here (index scans, primary-key lookups). Statements
replayed from a digest are the application's own captured text: they are data,
and a ReadSession runs them as they are (they were checked to be plain reads).
"""

from __future__ import annotations

from typing import Any

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.flavor import Flavor


def qident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def qtable(table: str) -> str:
    """'schema.table' as a quoted identifier."""
    schema, _, name = table.partition(".")
    return f"{qident(schema)}.{qident(name)}"


# -- statements -------------------------------------------------------------------
def index_scan_sql(table: str, index: str) -> str:
    """Every leaf page of one index: COUNT(*) needs no column, so with FORCE INDEX that
    index is read and nothing else (off-page BLOB pages are not)."""
    hint = "PRIMARY" if index == "PRIMARY" else qident(index)
    return f"SELECT COUNT(*) FROM {qtable(table)} FORCE INDEX ({hint})"


def clustered_scan_sql(table: str, secondary: list[str]) -> str:
    """The clustered index of a table without a primary key: ignoring every secondary
    index leaves it."""
    if not secondary:
        return f"SELECT COUNT(*) FROM {qtable(table)}"
    return f"SELECT COUNT(*) FROM {qtable(table)} IGNORE INDEX ({', '.join(qident(n) for n in secondary)})"


def key_lookup_sql(table: str, column: str) -> str:
    """One row by its key (the key is the statement's only parameter)."""
    return f"SELECT * FROM {qtable(table)} WHERE {qident(column)} = %s"


# -- sessions ---------------------------------------------------------------------
class ReadSession:
    """A dedicated session that can only read: replayed text cannot write through it."""

    def __init__(self, server: Server):
        self.server = server.dedicated()
        self.server.execute("SET SESSION TRANSACTION READ ONLY")
        self.schema: str | None = None

    @property
    def flavor(self) -> Flavor:
        return self.server.flavor

    def use(self, schema: str) -> None:
        """Default schema for unqualified names in replayed text; a no-op when already there."""
        if schema != self.schema:
            self.server.execute(f"USE {qident(schema)}")
            self.schema = schema

    def read(self, sql: str, params: tuple[Any, ...] | None = None, time_limit_s: float | None = None) -> int:
        """Run one read and discard its rows; returns how many there were. With a time
        limit the server stops a SELECT itself (see timed_out)."""
        if time_limit_s is not None and sql.lstrip()[:6].upper() == "SELECT":
            sql = self.flavor.with_statement_timeout(sql, time_limit_s)
        return self.server.consume(sql, params)

    def timed_out(self, error: QueryError) -> bool:
        """Did the statement time limit stop this read (rather than a real error)?"""
        return error.errno in self.flavor.statement_timeout_errnos

    def close(self) -> None:
        self.server.close()
