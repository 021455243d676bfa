"""Reads of performance_schema's statement digests: a query window that sees every session,
also those that set their own long_query_time (a slow-log window cannot: a session keeps the
long_query_time it set). Nothing is changed on the server: the summary table's counters are
read at the window's start and end, and the difference is the window.

A sample statement and the account that sent it come from events_statements_history(_long)
when one of those consumers is on (with events_statements_current, which they depend on; off by
default in MariaDB); the summary's DIGEST_TEXT (literals as `?`) otherwise."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.connection import QueryError, Server

SUMMARY = ("SELECT SCHEMA_NAME AS schema_name, DIGEST AS digest, DIGEST_TEXT AS digest_text, COUNT_STAR AS n, "
           "SUM_TIMER_WAIT AS sum_ps, MAX_TIMER_WAIT AS max_ps, SUM_ROWS_EXAMINED AS rows_examined "
           "FROM performance_schema.events_statements_summary_by_digest WHERE DIGEST IS NOT NULL")


# MariaDB 10.11 counts a server-side prepared statement's executions (the binary protocol's
# COM_STMT_EXECUTE) under these event names and in no digest: a window of digests alone does not
# see an application that prepares its statements. Their count says how much the window missed.
UNDIGESTED_EXECUTES = ("SELECT COALESCE(SUM(COUNT_STAR), 0) AS n "
                       "FROM performance_schema.events_statements_summary_global_by_event_name "
                       "WHERE EVENT_NAME IN ('statement/com/Execute', 'statement/com/Bulk_execute')")


class StatementDigests:
    def __init__(self, server: Server):
        self.server = server

    def unavailable(self) -> str | None:
        """Why a window cannot be read here, or None."""
        try:
            on = str(self.server.scalar("SELECT @@GLOBAL.performance_schema AS p")).upper() in ("1", "ON")
            if not on:
                return "performance_schema is OFF (it is set at server start)"
            enabled = self.server.scalar("SELECT ENABLED AS e FROM performance_schema.setup_consumers "
                                         "WHERE NAME='statements_digest'")
            if str(enabled).upper() != "YES":
                return "performance_schema's statements_digest consumer is disabled"
        except QueryError as e:
            return f"performance_schema could not be read: {e.message}"
        return None

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(str(r["schema_name"] or ""), str(r["digest"])): r for r in self.server.query(SUMMARY)}

    def undigested_executions(self) -> int:
        """Prepared-statement executions counted so far outside any digest (see UNDIGESTED_EXECUTES)."""
        try:
            return int(self.server.scalar(UNDIGESTED_EXECUTES) or 0)
        except QueryError:
            return 0

    def samples(self) -> dict[str, tuple[str, str]]:
        """digest -> (user, statement) from whichever statement history consumer is on."""
        out: dict[str, tuple[str, str]] = {}
        consumers = {str(r["n"]) for r in self.server.query(
            "SELECT NAME AS n FROM performance_schema.setup_consumers WHERE ENABLED='YES' AND NAME IN "
            "('events_statements_current', 'events_statements_history', 'events_statements_history_long')")}
        if "events_statements_current" not in consumers:  # the history consumers depend on it
            return out
        for table in ("events_statements_history_long", "events_statements_history"):
            if table not in consumers:
                continue
            for r in self.server.query(
                    f"SELECT h.DIGEST AS digest, h.SQL_TEXT AS sql_text, t.PROCESSLIST_USER AS user "
                    f"FROM performance_schema.{table} h LEFT JOIN performance_schema.threads t "
                    f"ON t.THREAD_ID = h.THREAD_ID WHERE h.DIGEST IS NOT NULL AND h.SQL_TEXT IS NOT NULL"):
                out.setdefault(str(r["digest"]), (str(r["user"] or ""), str(r["sql_text"])))
        return out
