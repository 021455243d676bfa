"""Rows of mysql.slow_log written back as a slow-log file, the input pt-query-digest reads.

pt-query-digest has no reader for the log table, so the table's rows are turned
into the text a server would have written with log_output=FILE: one entry per
statement with its timing header. Pure: rows in, lines out.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Iterator, TextIO


def _seconds(value: Any) -> float:
    """TIME(6) arrives as a timedelta; some drivers give text 'HH:MM:SS.ffffff'."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value or "0")
    negative = text.startswith("-")
    h, m, s = (text.lstrip("-").split(":") + ["0", "0"])[:3] if ":" in text else ("0", "0", text)
    total = int(h) * 3600 + int(m) * 60 + float(s)
    return -total if negative else total


def _moment(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def entry(row: dict[str, Any]) -> str:
    """One slow-log entry (MySQL 5.7+ header style, which pt-query-digest parses with microseconds)."""
    started = _moment(row["start_time"])
    sql = str(row.get("sql_text") or "").rstrip()
    if not sql.endswith(";"):
        sql += ";"
    lines = [
        f"# Time: {started.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z",
        f"# User@Host: {row.get('user_host') or ''}",
        f"# Thread_id: {int(row.get('thread_id') or 0)}  Schema: {row.get('db') or ''}  QC_hit: No",
        f"# Query_time: {_seconds(row.get('query_time')):.6f}  Lock_time: {_seconds(row.get('lock_time')):.6f}  "
        f"Rows_sent: {int(row.get('rows_sent') or 0)}  Rows_examined: {int(row.get('rows_examined') or 0)}",
        f"# Rows_affected: {int(row.get('rows_affected') or 0)}",
    ]
    if row.get("db"):
        lines.append(f"use {row['db']};")
    lines.append(f"SET timestamp={int(started.replace(tzinfo=dt.timezone.utc).timestamp())};")
    lines.append(sql)
    return "\n".join(lines) + "\n"


def entries(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield entry(row)


def write(rows: Iterable[dict[str, Any]], out: TextIO) -> int:
    """Write the entries; return how many statements were written."""
    n = 0
    for text in entries(rows):
        out.write(text)
        n += 1
    return n
