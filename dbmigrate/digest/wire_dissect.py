"""Statements from tshark's MySQL fields, one frame at a time (pure: frames in, statements out).

tshark dissects the protocol; this pairs what it found. Per TCP stream it keeps the session's
account and default database (the handshake, COM_INIT_DB, a successful `USE`), the text of
each prepared statement by its id (COM_STMT_PREPARE's text, the id from the server's reply),
and the command in flight: a statement's time runs from its command to the next server frame
on the same stream, which is the first byte of its response (the same moment the slow log's
Query_time ends, less the server's write of the packet).

Each statement becomes a slow-log entry (digest/slowlog_text.py), so pt-query-digest
summarises the wire as it does the slow log: fingerprint, count, times, db, user.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

if TYPE_CHECKING:
    from dbmigrate.db.inspector import Session

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_CHANGE_USER = 1, 2, 3, 17
COM_STMT_PREPARE, COM_STMT_EXECUTE, COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE = 22, 23, 24, 25
NO_REPLY = {COM_QUIT, COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE}
# `SET [SESSION] name = value, ...` as pools send on each new connection (values kept as written).
_SET = re.compile(r"^\s*SET\s+(?!GLOBAL\b|PASSWORD\b|NAMES\b|CHARACTER\b|TRANSACTION\b|STATEMENT\b)", re.IGNORECASE)
_SET_PAIR = re.compile(r"(?:@@SESSION\.|@@LOCAL\.|@@|\bSESSION\s+|\bLOCAL\s+)?`?(\w+)`?\s*=\s*('(?:[^'\\]|\\.|'')*'|\"[^\"]*\"|[\w.+-]+)",
                       re.IGNORECASE)
_USE = re.compile(r"^\s*use\s+`?([^`;\s]+)`?\s*;?\s*$", re.IGNORECASE)

# tshark field positions (tools/wire.py FIELDS)
TIME, STREAM, SRCPORT, TCPLEN, COMMAND, QUERY, STMT_ID, SCHEMA, USER, ERROR = range(10)


@dataclass(frozen=True)
class Statement:
    started: float  # unix time of the command
    seconds: float  # to the first server frame after it
    stream: int
    user: str
    db: str
    sql: str
    prepared: bool  # a COM_STMT_EXECUTE (its text from the prepare)
    error: int = 0

    def slow_log_row(self) -> dict[str, Any]:
        """A row in mysql.slow_log's form, for slowlog_text.entry."""
        return {"start_time": dt.datetime.fromtimestamp(self.started, dt.timezone.utc).replace(tzinfo=None),
                "user_host": f"{self.user}[{self.user}] @  [wire]", "thread_id": self.stream + 1,
                "db": self.db, "query_time": self.seconds, "lock_time": 0.0, "rows_sent": 0, "rows_examined": 0,
                "rows_affected": 0, "sql_text": self.sql}


@dataclass
class _Session:
    user: str = ""
    db: str = ""
    statements: dict[str, str] = field(default_factory=dict)
    pending: tuple[float, int, str, str] | None = None  # (time, command, text, stmt_id)
    pending_db: str | None = None  # a USE or COM_INIT_DB that takes effect when it succeeds


@dataclass
class WireCounts:
    statements: int = 0
    prepared_executions: int = 0
    prepares: int = 0
    sessions: int = 0  # streams seen
    sessions_before: int = 0  # streams whose handshake was not seen: connected before the window
    unknown_executions: int = 0  # a COM_STMT_EXECUTE whose prepare came before the window
    errors: int = 0


class Dissector:
    """Feed tshark frames (lists of FIELDS) in capture order; collect `Statement`s."""

    def __init__(self, server_port: int, known: dict[str, tuple[str, str]] | None = None):
        """`known`: client port -> (user, db) of the sessions connected before the window (the
        server's processlist when it opened): their handshake is not on the wire."""
        self.port = str(server_port)
        self.known = dict(known or {})
        self.sessions: dict[str, _Session] = {}
        self.counts = WireCounts()
        self._handshaken: set[str] = set()
        self.session_sets: dict[str, dict[str, str]] = {}  # account -> variable -> value its sessions SET

    def _session(self, stream: str) -> _Session:
        s = self.sessions.get(stream)
        if s is None:
            s = self.sessions[stream] = _Session()
            self.counts.sessions += 1
        return s

    def feed(self, frame: list[str]) -> Statement | None:
        if len(frame) < len(FIELDS_N):
            frame = frame + [""] * (len(FIELDS_N) - len(frame))
        stream, srcport = frame[STREAM], frame[SRCPORT]
        if not stream or not frame[TCPLEN] or frame[TCPLEN] == "0":
            return None  # an ACK: no byte of the protocol
        session = self._session(stream)
        t = float(frame[TIME] or 0)
        if srcport == self.port:
            return self._reply(stream, session, t, frame)
        if frame[USER]:  # the handshake response (or COM_CHANGE_USER): the account and its schema
            session.user = frame[USER]
            session.db = frame[SCHEMA] or ""
            self._handshaken.add(stream)
            if frame[COMMAND] == "":
                return None
        command = int(frame[COMMAND]) if frame[COMMAND].isdigit() else None
        if command is None:
            return None
        if stream not in self._handshaken:
            self._handshaken.add(stream)  # its first command without a handshake: connected before us
            self.counts.sessions_before += 1
            session.user, session.db = self.known.get(srcport, (session.user, session.db))
        if command == COM_STMT_CLOSE:
            session.statements.pop(frame[STMT_ID], None)
        if command in NO_REPLY:
            return None
        text = frame[QUERY]
        if command == COM_INIT_DB:
            session.pending_db = frame[SCHEMA]
        elif command == COM_QUERY:
            m = _USE.match(text)
            session.pending_db = m.group(1) if m else None
        elif command == COM_STMT_EXECUTE:
            text = session.statements.get(frame[STMT_ID], "")
            if not text:
                self.counts.unknown_executions += 1
        session.pending = (t, command, text, frame[STMT_ID])
        return None

    def _reply(self, stream: str, session: _Session, t: float, frame: list[str]) -> Statement | None:
        pending, session.pending = session.pending, None
        if pending is None:
            return None
        started, command, text, _ = pending
        error = int(frame[ERROR]) if frame[ERROR].isdigit() else 0
        if session.pending_db is not None:
            if not error:
                session.db = session.pending_db
            session.pending_db = None
        if command == COM_STMT_PREPARE:
            self.counts.prepares += 1
            if frame[STMT_ID] and not error:
                session.statements[frame[STMT_ID]] = text
            return None
        if command not in (COM_QUERY, COM_STMT_EXECUTE) or not text:
            return None
        set_statement = _SET.match(text) if command == COM_QUERY and not error else None
        if set_statement:
            for name, value in _SET_PAIR.findall(text[set_statement.end():]):
                if not name.startswith("@"):
                    self.session_sets.setdefault(session.user, {})[name.lower()] = value.strip("'\"")
        self.counts.statements += 1
        if command == COM_STMT_EXECUTE:
            self.counts.prepared_executions += 1
        if error:
            self.counts.errors += 1
        return Statement(started, max(0.0, t - started), int(stream), session.user, session.db, text,
                         command == COM_STMT_EXECUTE, error)

    def statements(self, frames: Iterable[list[str]]) -> Iterator[Statement]:
        for f in frames:
            s = self.feed(f)
            if s is not None:
                yield s


FIELDS_N = tuple(range(10))


def client_ports(sessions: Iterable[Session]) -> dict[str, tuple[str, str]]:
    """client port -> (user, db) from processlist sessions (their host is `address:port`)."""
    out = {}
    for s in sessions:
        _, _, port = str(s.host or "").rpartition(":")
        if port.isdigit():
            out[port] = (str(s.user or ""), str(s.db or ""))
    return out
