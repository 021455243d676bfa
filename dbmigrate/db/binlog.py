"""What a server wrote, read from its binary log (python-mysql-replication).

Two questions need the binlog itself, not a GTID position:
- after the fence, what did the old primary log past its final position (a session of an
  account that bypasses read_only, or root), and does the candidate have it?
- which rows did each errant transaction on a candidate change, so that the operator can
  decide whether to keep it (replay it on the primary) or remove it?

Each transaction is read as its GTID, the tables it changed with a count of rows per kind
of change and a few row images, the statement that made it (MariaDB logs it in an
Annotate_rows event, or the Query event of a DDL), and the session id where the binlog
carries one (a Query event's thread id). ROW events name no account: the caller adds the
account where it knows it (the sessions it ended at the seal).

The stream is a replication connection of its own (REPLICATION SLAVE), non-blocking (it ends
at the end of the binlog), bounded by `timeout_s` for every read, with a random replica
server_id that no real replica uses. Column names need binlog_row_metadata=FULL.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.redact import redact

# A row image longer than this is cut: a report line, not a dump.
ROW_SHOWN_CHARS = 160
ROWS_SHOWN = 3


class BinlogReadError(DbmigrateError):
    """The binlog could not be read (privileges, purged files, a server that stopped answering)."""


@dataclass
class TableChange:
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    rows: list[str] = field(default_factory=list)  # the first few row images, shortened

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in ((self.inserted, "inserted"), (self.updated, "updated"),
                                                (self.deleted, "deleted")) if n]
        return ", ".join(parts) or "no row"


@dataclass
class BinlogTransaction:
    """One transaction as the binlog holds it."""

    gtid: str
    tables: dict[str, TableChange] = field(default_factory=dict)  # "schema.table" -> what changed
    statements: list[str] = field(default_factory=list)  # the statement text where logged
    session_id: int | None = None  # the writing session, where the binlog carries it
    account: str | None = None  # filled in by callers who know it

    @property
    def rows(self) -> int:
        return sum(c.inserted + c.updated + c.deleted for c in self.tables.values())

    def describe(self) -> str:
        """One line: GTID, what it changed, by whom where known, and the statement."""
        changed = "; ".join(f"{t}: {c.describe()}" for t, c in self.tables.items())
        if not changed:
            changed = "no row (a statement: " + (self.statements[0] if self.statements else "unknown") + ")"
        elif self.statements:
            changed += f" (by {self.statements[0]!r})"
        who = f"account {self.account}" if self.account else "account not in the binlog"
        if self.session_id is not None:
            who += f", session {self.session_id}"
        return f"{self.gtid}: {changed}; {who}"

    def to_dict(self) -> dict[str, Any]:
        return {"gtid": self.gtid, "session_id": self.session_id, "account": self.account,
                "statements": self.statements,
                "tables": {t: {"inserted": c.inserted, "updated": c.updated, "deleted": c.deleted, "rows": c.rows}
                           for t, c in self.tables.items()}}


def connection_settings(server: Server, timeout_s: float) -> dict[str, Any]:
    """PyMySQL settings for `server` (TLS only where its credentials ask for it: a TLS context
    built per connection costs ~18 ms on loopback)."""
    c: Credentials = server.credentials
    settings: dict[str, Any] = {"user": c.user, "password": c.password or "", "connect_timeout": max(1, int(timeout_s)),
                                "read_timeout": max(1, int(timeout_s)), "write_timeout": max(1, int(timeout_s))}
    if server.unix_socket:
        settings["unix_socket"] = server.unix_socket
    else:
        settings.update(host=server.host, port=int(server.port))
    if c.ssl_ca or c.ssl_mode in ("REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"):
        settings["ssl"] = {k: v for k, v in (("ca", c.ssl_ca), ("cert", c.ssl_cert), ("key", c.ssl_key)) if v} or \
            {"check_hostname": False}
    else:
        settings["ssl_disabled"] = True
    return settings


def _stream_reader_class() -> type:
    """python-mysql-replication's reader, with its MariaDB dump request fixed: 1.0.17 declares
    the COM_BINLOG_DUMP packet one byte shorter than what it sends (an empty file name written
    as four zero bytes), and MariaDB resets the connection once it reads that stray byte, which
    it does only when a large event fills the socket (measured: the first big Write_rows event
    of a 20,000-row INSERT). The request here is the documented one: no file name, length 11."""
    import struct

    from pymysqlreplication import BinLogStreamReader
    from pymysql.constants.COMMAND import COM_BINLOG_DUMP

    class Reader(BinLogStreamReader):  # type: ignore[misc]  # the library has no type hints
        def _BinLogStreamReader__set_mariadb_settings(self) -> bytes:  # overrides the library's private method
            cur = self._stream_connection.cursor()
            if self.auto_position is not None:
                cur.execute("SET @slave_connect_state = %s", (self.auto_position,))
            cur.execute("SET @slave_gtid_strict_mode=1")
            cur.execute("SET @slave_gtid_ignore_duplicates=0")
            cur.close()
            flags = 0 if self._BinLogStreamReader__blocking else 0x01  # BINLOG_DUMP_NON_BLOCK
            if self._BinLogStreamReader__annotate_rows_event:
                flags |= 0x02  # BINLOG_SEND_ANNOTATE_ROWS_EVENT
            # Without a GTID position, from the start of the named file (none: the oldest).
            name = b"" if self.auto_position is not None else (self.log_file or "").encode()
            return struct.pack("<i", 11 + len(name)) + bytes([COM_BINLOG_DUMP]) + \
                struct.pack("<IHI", 4, flags, self._BinLogStreamReader__server_id) + name

    return Reader


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= ROW_SHOWN_CHARS else text[:ROW_SHOWN_CHARS - 3] + "..."


def _statement(text: Any) -> str:
    s = " ".join(str(text.decode(errors="replace") if isinstance(text, bytes) else text).split())
    return redact(s if len(s) <= 200 else s[:197] + "...")


class BinlogReader:
    """Reads transactions from one server's binlog. `stream_factory` (tests) builds the event
    stream from the reader's arguments instead of python-mysql-replication."""

    def __init__(self, server: Server, timeout_s: float = 5.0, stream_factory: Callable[..., Any] | None = None) -> None:
        self.server, self.timeout_s = server, timeout_s
        self._factory = stream_factory or self._stream

    def _stream(self, **kw: Any) -> Any:
        # Imported only where a binlog is read: it costs an import.
        from pymysqlreplication.event import MariadbAnnotateRowsEvent, MariadbGtidEvent, QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        return _stream_reader_class()(
            connection_settings=connection_settings(self.server, self.timeout_s),
            server_id=random.randint(1 << 30, (1 << 32) - 1),  # no real replica uses one this high
            blocking=False, is_mariadb=self.server.flavor.name == "mariadb", annotate_rows_event=True,
            only_events=[MariadbGtidEvent, MariadbAnnotateRowsEvent, QueryEvent, XidEvent, WriteRowsEvent,
                         UpdateRowsEvent, DeleteRowsEvent],
            enable_logging=False, **kw)

    def after(self, position: str, includes: Callable[[str, str], bool]) -> list[BinlogTransaction]:
        """Every transaction logged after GTID position `position`, to the end of the binlog:
        what the server wrote since. `includes(pos, gtid)` is the flavor's GTID arithmetic."""
        if self.server.flavor.name != "mariadb":
            raise BinlogReadError(f"reading {self.server.name}'s binlog from a GTID position is implemented for "
                                  f"MariaDB only")
        return list(self._transactions(lambda gtid: not includes(position, gtid), auto_position=position or None))

    def transactions(self, match: Callable[[str], bool], start_file: str = "") -> list[BinlogTransaction]:
        """The transactions whose GTID `match`es, read from the start of binlog `start_file`
        (empty: the oldest the server still has) to the end."""
        return list(self._transactions(match, log_file=start_file or None))

    def _transactions(self, match: Callable[[str], bool], **kw: Any) -> Iterator[BinlogTransaction]:
        """The matching transactions, in binlog order. The rows of the others are never decoded:
        in pure Python that is what a scan of a large binlog costs."""
        deadline = time.monotonic() + self.timeout_s
        try:
            stream = self._factory(**kw)
        except Exception as e:  # the library raises PyMySQL's errors: one clear message
            raise BinlogReadError(f"cannot read {self.server.name}'s binlog: {redact(str(e))}",
                                  hint="the tool's account needs REPLICATION SLAVE (and the binlog must still hold "
                                       "those transactions)") from None
        current: BinlogTransaction | None = None
        try:
            for event in stream:
                if time.monotonic() > deadline:
                    raise BinlogReadError(f"reading {self.server.name}'s binlog took longer than {self.timeout_s:g}s")
                kind = type(event).__name__
                if kind == "MariadbGtidEvent":
                    if current is not None:
                        yield current
                    current = BinlogTransaction(str(event.gtid)) if match(str(event.gtid)) else None
                elif current is None:
                    continue  # not a transaction asked for (or the stream's own header)
                elif kind == "MariadbAnnotateRowsEvent":
                    current.statements.append(_statement(event.sql_statement))
                elif kind == "QueryEvent":
                    text = _statement(event.query)
                    if text.upper() not in ("BEGIN", "COMMIT"):
                        current.statements.append(text)
                        current.session_id = int(event.slave_proxy_id)
                elif kind in ("WriteRowsEvent", "UpdateRowsEvent", "DeleteRowsEvent"):
                    change = current.tables.setdefault(f"{event.schema}.{event.table}", TableChange())
                    for row in event.rows:
                        if kind == "WriteRowsEvent":
                            change.inserted += 1
                            image = row.get("values")
                        elif kind == "UpdateRowsEvent":
                            change.updated += 1
                            image = {"before": row.get("before_values"), "after": row.get("after_values")}
                        else:
                            change.deleted += 1
                            image = row.get("values")
                        if len(change.rows) < ROWS_SHOWN:
                            change.rows.append(_short(image))
            if current is not None:
                yield current
        except BinlogReadError:
            raise
        except Exception as e:
            raise BinlogReadError(f"reading {self.server.name}'s binlog failed: {redact(str(e))}") from None
        finally:
            try:
                stream.close()
            except Exception:
                pass


def errant_floor(errant: list[str], source_state: str) -> dict[tuple[int, int], int]:
    """(domain, server_id) of each errant origin -> the last sequence the source has of it
    (-1: none): every GTID of that origin past it is errant."""
    from dbmigrate.db import gtid as g

    have = {(x.domain, x.server_id): x.seq for x in g.parse_mariadb(source_state)}
    return {(x.domain, x.server_id): have.get((x.domain, x.server_id), -1) for x in g.parse_mariadb(",".join(errant))}


def first_file_holding(start_states: list[tuple[str, str]], floor: dict[tuple[int, int], int]) -> str:
    """The newest binlog file (of (file, GTID state at its start), oldest first) before whose
    start no GTID past `floor` was written: reading from there finds every one of them. ''
    when even the oldest file begins past it (read from the oldest: older ones are purged)."""
    from dbmigrate.db import gtid as g

    chosen = ""
    for name, state in start_states:
        at_start = {(x.domain, x.server_id): x.seq for x in g.parse_mariadb(state)}
        if all(at_start.get(origin, -1) <= seq for origin, seq in floor.items()):
            chosen = name
    return chosen


def errant_matcher(errant: list[str], source_state: str) -> Callable[[str], bool]:
    """MariaDB: which GTIDs of a candidate's binlog are errant. `errant` holds the last GTID of
    each (domain, server_id) the source lacks (flavor.errant); every GTID of that origin past
    what the source has of it is errant too, not only the last."""
    from dbmigrate.db import gtid as g

    have = {(x.domain, x.server_id): x.seq for x in g.parse_mariadb(source_state)}
    last = {(x.domain, x.server_id): x.seq for x in g.parse_mariadb(",".join(errant))}

    def match(text: str) -> bool:
        parsed = g.parse_mariadb(text)
        if len(parsed) != 1:
            return False
        x = parsed[0]
        origin = (x.domain, x.server_id)
        return origin in last and have.get(origin, -1) < x.seq <= last[origin]

    return match
