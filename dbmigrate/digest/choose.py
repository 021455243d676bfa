"""Which query window sees the application: what each would miss on this server, now.

- slow_log: sessions connected before the window (long_query_time is copied into a session
  when it connects) and sessions that set their own long_query_time (every connection of many
  pools does), whose statements are never logged;
- performance_schema (where it is on): server-side prepared statements' executions, which
  MariaDB counts in no digest;
- wire (tcpdump + tshark, where the host lets the tool capture): only executions of statements
  prepared before the window opened (their text went by before it).

`auto` takes the available window that misses least, in that order of preference reversed
(wire, performance_schema, slow_log), and says why, naming what the others would miss.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.db.statement_digest import StatementDigests
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.hosts import Host

WINDOWS = ("auto", "wire", "performance_schema", "slow_log")
PREFERENCE = ("wire", "performance_schema", "slow_log")


@dataclass
class Option:
    window: str
    unavailable: str | None
    misses: list[str]

    def describe(self) -> str:
        if self.unavailable:
            return f"{self.window}: not available ({self.unavailable})"
        return f"{self.window} would miss " + ("; ".join(self.misses) if self.misses else "nothing known")


def options(server: Server, host: Host | None) -> list[Option]:
    from dbmigrate.tools.wire import WireUnavailable, check_available

    insp = Inspector(server)
    sessions = len(insp.sessions())
    try:
        prepared = int(insp.status("Prepared_stmt_count").get("prepared_stmt_count") or 0)
    except DbmigrateError:
        prepared = 0
    why_not_wire = None
    if host is None:
        why_not_wire = "the server's host is not reachable by the tool"
    else:
        try:
            check_available(host, server.port)
        except (WireUnavailable, DbmigrateError) as e:
            why_not_wire = str(getattr(e, "message", e))
    wire = Option("wire", why_not_wire,
                  [f"executions of statements prepared before the window opened ({prepared} prepared now)"]
                  if prepared else [])
    pfs = Option("performance_schema", StatementDigests(server).unavailable(),
                 ["every execution of a server-side prepared statement (MariaDB counts them in no digest)"
                  + (f": {prepared} statement(s) prepared now" if prepared else "")])
    slow = Option("slow_log", None,
                  [f"{sessions} session(s) connected before the window (long_query_time is copied at connect)",
                   "every statement of sessions that set their own long_query_time"])
    return [wire, pfs, slow]


def choose(server: Server, host: Host | None) -> tuple[str, str]:
    """(window, why) for `auto`."""
    opts = options(server, host)
    chosen = next(o for o in opts if not o.unavailable)
    others = [o.describe() for o in opts if o is not chosen]
    why = (f"auto chose {chosen.window}: it would miss " + ("; ".join(chosen.misses) if chosen.misses else "nothing known")
           + "; " + "; ".join(others))
    return chosen.window, why
