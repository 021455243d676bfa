"""The slow log written to a table (log_output=TABLE): the statements that read and clear it.

Used where the tool cannot enter the server's host (a managed service): the
window is then read over SQL. Times are the server's own (NOW(6) and the
table's start_time on the same session time zone), so windows are cut by the
server's clock, never the tool's.
"""

from __future__ import annotations

from typing import Any, Iterator

from dbmigrate.db.connection import Server

COLUMNS = ("start_time", "user_host", "query_time", "lock_time", "rows_sent", "rows_examined", "db",
           "thread_id", "rows_affected", "sql_text")


def server_now(server: Server) -> str:
    """The server's clock with microseconds, as text that compares with start_time."""
    return str(server.scalar("SELECT DATE_FORMAT(NOW(6), '%Y-%m-%d %H:%i:%s.%f') AS now"))


def row_count(server: Server) -> int:
    return int(server.scalar("SELECT COUNT(*) AS n FROM mysql.slow_log") or 0)


def rows_between(server: Server, since: str, until: str | None) -> Iterator[dict[str, Any]]:
    """Statements that started in [since, until), streamed; `until` None means up to now.
    The table is CSV (no index): every read is a scan, which is why windows are read
    once each and the table is emptied afterwards when the tool owns what is in it."""
    columns = ", ".join(COLUMNS)
    if until is None:
        return server.stream(f"SELECT {columns} FROM mysql.slow_log WHERE start_time >= %s", (since,))
    return server.stream(f"SELECT {columns} FROM mysql.slow_log WHERE start_time >= %s AND start_time < %s",
                         (since, until))


def clear(server: Server) -> None:
    """Empty the table, unlogged: only when every row in it came from the tool's window."""
    session = server.dedicated()
    try:
        for statement in server.flavor.clear_slow_log_table_sql():
            session.execute(statement)
    finally:
        session.close()
