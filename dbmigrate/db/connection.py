"""A handle on one server: connect/read timeouts, bounded retries, tagged and
redacted statements, clear errors.

Every statement carries the `/* dbmigrate */` tag so that a DBA reading the
processlist or the slow log knows who sent it. Listeners (the journal, the
dry-run recorder) receive each statement with secrets already masked.
"""

from __future__ import annotations

import logging
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import mysql.connector
from mysql.connector import errorcode

from dbmigrate import faultpoint
from dbmigrate.db.credentials import Credentials
from dbmigrate.db.flavor import Flavor, for_server
from dbmigrate.db.in_doubt import SETTLE_GONE_S, InDoubt, settle_on
from dbmigrate.db.intent import Intent
from dbmigrate.db.ledger import SafetyLedger, process_ledger
from dbmigrate.clock import Clock
from dbmigrate.exceptions import AuthFailed, ConnectionFailed, DbmigrateError
from dbmigrate.redact import redact

log = logging.getLogger("dbmigrate.sql")

TAG = "/* dbmigrate */ "

StatementListener = Callable[[str, str, float], None]  # (server name, redacted sql, ms)

_listeners: list[StatementListener] = []


def add_statement_listener(fn: StatementListener) -> None:
    _listeners.append(fn)


def remove_statement_listener(fn: StatementListener) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


class QueryError(DbmigrateError):
    """A statement failed on a server; carries the server's error number."""

    def __init__(self, message: str, errno: int | None = None, hint: str | None = None):
        super().__init__(message, hint)
        self.errno = errno
        # Set when the statement was a change given up on (timeout, lost connection): it may
        # still be executed until its session is ended (db/in_doubt.py).
        self.in_doubt: InDoubt | None = None


class Unresponsive(QueryError):
    """A server did not answer within the bound of the wait in progress (frozen, overloaded,
    or its network gone). The session is closed: a late answer can never be mistaken for
    the reply to a later statement."""


class InDoubtUnsettled(Unresponsive):
    """A statement this process gave up on may still be executed on the server, and its session
    could not be ended: nothing read from that server can be trusted until it is."""

    def __init__(self, message: str, doubt: InDoubt, hint: str | None = None):
        super().__init__(message, errno=None, hint=hint)
        self.doubt = doubt


# mysql-connector's errno for a socket read/write that timed out.
_IO_TIMEOUT = 3024

# A statement's parameters, as the driver takes them.
Params = tuple[Any, ...] | list[Any] | None
# What a bounded statement keeps for the round trip: a server-side wait (MASTER_GTID_WAIT)
# is given the rest, so that it answers before the socket gives up on it.
ROUND_TRIP_MARGIN_S = 0.25


@dataclass
class Server:
    # Not a field: the clock connect retries wait on (tests may give a server a FakeClock).
    clock = Clock()
    name: str
    host: str
    port: int
    credentials: Credentials = field(repr=False)
    connect_timeout: float = 3.0
    read_timeout: int = 60
    retries: int = 2
    unix_socket: str | None = None
    # Generations held, intents, statements in doubt (db/ledger.py): the process's unless given one.
    ledger: SafetyLedger = field(default_factory=process_ledger, repr=False, compare=False)
    _conn: Any = field(default=None, init=False, repr=False)
    _cursor: Any = field(default=None, init=False, repr=False)  # one per session: cursor() pings the server
    _flavor: Flavor | None = field(default=None, init=False, repr=False)
    _version: str | None = field(default=None, init=False, repr=False)
    _waiter: "Server | None" = field(default=None, init=False, repr=False)
    _watcher: "Server | None" = field(default=None, init=False, repr=False)
    _deadline: float | None = field(default=None, init=False, repr=False)  # time.monotonic()
    _settling: bool = field(default=False, init=False, repr=False)
    _twins: list["Server"] = field(default_factory=list, init=False, repr=False)  # from dedicated()  # the session that ends doubtful ones

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- connection ----------------------------------------------------------
    def _connect_args(self) -> dict[str, Any]:
        c = self.credentials
        args: dict[str, Any] = dict(
            user=c.user, password=c.password or "", connection_timeout=max(1, int(round(self._connect_bound()))),
            read_timeout=self.read_timeout, write_timeout=self.read_timeout,
            autocommit=True, use_pure=True, charset="utf8mb4", collation="utf8mb4_general_ci",
        )
        if self.unix_socket:
            args["unix_socket"] = self.unix_socket
        else:
            args.update(host=self.host, port=self.port)
        if c.ssl_mode == "DISABLED" or not (c.ssl_ca or c.ssl_mode):
            # Loopback/sandbox default: no TLS handshake (it costs ~20 ms per connect).
            args["ssl_disabled"] = c.ssl_mode != "REQUIRED" and not c.ssl_ca
        if c.ssl_ca:
            args["ssl_ca"] = c.ssl_ca
        if c.ssl_cert:
            args.update(ssl_cert=c.ssl_cert, ssl_key=c.ssl_key)
        if c.ssl_mode in ("VERIFY_CA", "VERIFY_IDENTITY"):
            args["ssl_verify_cert"] = True
            args["ssl_verify_identity"] = c.ssl_mode == "VERIFY_IDENTITY"
        return args

    def _probe_tcp(self) -> None:
        """Fail fast and clearly for a host that does not answer at all."""
        if self.unix_socket:
            return
        timeout = self._connect_bound()
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout):
                pass
        except socket.timeout:
            raise ConnectionFailed(f"{self.name} ({self.address}) did not answer within {timeout:g}s",
                                   hint="check host, port and firewall; the connect timeout is connect_timeout in the inventory")
        except OSError as e:
            raise ConnectionFailed(f"cannot reach {self.name} ({self.address}): {e.strerror or e}",
                                   hint="is the server running and listening on that address?")

    def connect(self) -> Any:
        if self._conn is not None and (self._deadline is not None or self._conn.is_connected()):
            # Under a bound the open session is trusted without a ping: a ping to a frozen server
            # would wait for the read timeout, and a lost session fails the statement anyway.
            return self._conn
        left = self.remaining()
        if left is not None and left <= 0:
            # A spent bound (a frozen server took it) is not stretched by the connector's handshake
            # timeout, which counts whole seconds.
            raise Unresponsive(f"{self.name} ({self.address}): the bound of the wait in progress ran out "
                               f"before a new session could be opened")
        attempt = 0
        while True:
            attempt += 1
            self._probe_tcp()
            try:
                conn = mysql.connector.connect(**self._connect_args())
                # The connector asks the server for sql_mode the first time a statement has
                # parameters, on the connection's read timeout rather than the statement's bound:
                # against a frozen server that is the whole read timeout. Ask now, while connecting.
                conn.sql_mode  # noqa: B018 (cached by the connector)
                self._conn, self._cursor = conn, None
                return self._conn
            except mysql.connector.Error as e:
                err = self._translate_connect_error(e)
                transient = isinstance(err, ConnectionFailed) and not isinstance(err, AuthFailed) and \
                    getattr(e, "errno", None) in (errorcode.CR_CONN_HOST_ERROR, errorcode.CR_SERVER_LOST)
                if not transient or attempt > self.retries:
                    raise err from None
                self.clock.sleep(0.2 * attempt)

    def _translate_connect_error(self, e: Exception) -> DbmigrateError:
        errno = getattr(e, "errno", None)
        if errno == errorcode.ER_ACCESS_DENIED_ERROR:
            return AuthFailed(f"{self.name} ({self.address}) refused user '{self.credentials.user}': access denied",
                              hint=f"check the password in {self.credentials.source or 'the credentials'}")
        first_line = str(getattr(e, "msg", e)).strip().splitlines()[0] if str(getattr(e, "msg", e)).strip() else ""
        if errno == 3024 or "timed out" in str(e).lower():  # handshake read timeout
            return ConnectionFailed(f"{self.name} ({self.address}) did not answer within {self.connect_timeout:g}s",
                                    hint="check host, port and firewall; the connect timeout is connect_timeout in the inventory")
        if errno in (errorcode.ER_DBACCESS_DENIED_ERROR,):
            return AuthFailed(f"{self.name} ({self.address}): {getattr(e, 'msg', e)}")
        if errno in (errorcode.CR_SERVER_LOST, errorcode.CR_SERVER_GONE_ERROR, None) or "handshake" in str(e).lower() \
                or "protocol" in str(e).lower():
            return ConnectionFailed(f"{self.name} ({self.address}) did not answer as a MySQL server ({first_line})",
                                    hint="is that the right port? something else is listening there")
        return ConnectionFailed(f"cannot connect to {self.name} ({self.address}): {redact(first_line)} [{errno}]")

    # -- bounds --------------------------------------------------------------
    @contextmanager
    def bounded(self, seconds: float) -> Iterator["Server"]:
        """Inside the block every statement on this server (and on its wait session) must be
        answered within what is left of `seconds`, counted from now: a frozen or dead server
        costs the bound, not the read timeout. Nested bounds keep the tighter one."""
        outer = self._deadline
        mine = time.monotonic() + max(seconds, 0.0)
        self._deadline = mine if outer is None else min(outer, mine)
        try:
            yield self
        finally:
            self._deadline = outer

    @property
    def session_id(self) -> int:
        """This handle's session id on the server (CONNECTION_ID()), known from the handshake:
        no round trip."""
        return int(self.connect().connection_id)

    def remaining(self) -> float | None:
        """Seconds left of the bound in force, None when there is none."""
        return None if self._deadline is None else self._deadline - time.monotonic()

    def _connect_bound(self) -> float:
        left = self.remaining()
        return self.connect_timeout if left is None else max(0.05, min(self.connect_timeout, left))

    def close(self) -> None:
        for side in (self._waiter, self._watcher):
            if side is not None:
                side.close()
        self._waiter = self._watcher = None
        self._cursor = None
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- statements ----------------------------------------------------------
    def _run(self, sql: str, params: Params, fetch: bool | str) -> Any:
        text = TAG + sql
        shown = redact(sql if params is None else f"{sql} -- {params!r}")
        retried = False
        while True:
            self._check_time_left(shown)
            self._settle_doubts()
            if not self._settling:
                # A run's decision bumps the server's fencing generation before anything else
                # there (db/generation.py); a no-op outside a run and once done.
                self.ledger.generations.ensure(self)
            conn = self.connect()
            bound = self.remaining()
            intent = self._intent(conn, sql, shown)
            started = time.perf_counter()
            try:
                if self._cursor is None:
                    self._cursor = conn.cursor(dictionary=True)
                cur = self._cursor
                self._socket_timeouts(cur, bound if bound is not None else self.read_timeout)
                faultpoint.sending(self.name, shown)  # no-op unless a fault-injection pause listens
                cur.execute(text, params)
                if fetch == "count":
                    result: Any = sum(1 for _ in cur) if cur.with_rows else 0
                elif fetch == "last":
                    result = self._last_result(cur)
                else:
                    rows = cur.fetchall() if cur.with_rows else []
                    result = rows if fetch else cur.rowcount
                self.ledger.intents.done(intent, "done")
                return result
            except mysql.connector.Error as e:
                self._cursor = None  # a fresh one for the next statement, whatever state this one is in
                errno = getattr(e, "errno", None)
                if intent is not None and not self._lost(e, errno, conn):
                    self.ledger.intents.done(intent, f"failed [{errno}]")  # answered: it did not happen
                if errno == _IO_TIMEOUT or isinstance(e, (mysql.connector.errors.ReadTimeoutError,
                                                          mysql.connector.errors.WriteTimeoutError)):
                    doubt = self._give_up(conn, sql, shown, intent)
                    self.close()  # the answer may still come: never read it as another statement's
                    waited = bound if bound is not None else self.read_timeout
                    unresponsive = Unresponsive(f"{self.name} ({self.address}) did not answer within {waited:.1f}s in: {shown}"
                                       + (f"; in doubt until session {doubt.session_id} is ended" if doubt else ""),
                                       errno=errno,
                                       hint=f"is {self.name} frozen or overloaded? check it by hand")
                    unresponsive.in_doubt = doubt
                    raise unresponsive from None
                lost = errno in (errorcode.CR_SERVER_LOST, errorcode.CR_SERVER_GONE_ERROR) or \
                    isinstance(e, mysql.connector.errors.OperationalError) and not conn.is_connected()
                if lost and fetch and not retried and self._is_read(sql):
                    # Reads are safe to retry once on a fresh connection; writes are not.
                    retried = True
                    self.close()
                    continue
                doubt = self._give_up(conn, sql, shown, intent) if lost else None
                if lost:
                    self.close()
                err = QueryError(f"{self.name} ({self.address}): {redact(getattr(e, 'msg', str(e)))} [{errno}] in: {shown}"
                                 + (f"; in doubt until session {doubt.session_id} is ended" if doubt else ""),
                                 errno=errno)
                err.in_doubt = doubt
                raise err from None
            finally:
                ms = (time.perf_counter() - started) * 1000
                log.debug("%s %.1fms %s", self.name, ms, shown)
                for fn in list(_listeners):
                    fn(self.name, shown, ms)

    @staticmethod
    def _lost(e: Exception, errno: int | None, conn: Any) -> bool:
        """Was the answer lost (timeout, dropped connection) rather than an error from the server?"""
        if errno == _IO_TIMEOUT or isinstance(e, (mysql.connector.errors.ReadTimeoutError,
                                                  mysql.connector.errors.WriteTimeoutError)):
            return True
        return errno in (errorcode.CR_SERVER_LOST, errorcode.CR_SERVER_GONE_ERROR) or \
            isinstance(e, mysql.connector.errors.OperationalError) and not conn.is_connected()

    def _intent(self, conn: Any, sql: str, shown: str) -> Intent | None:
        """Journal a change before it is sent (db/intent.py): a process killed while it is on the
        wire leaves a record the next process settles. Reads, and the session that settles doubts,
        change nothing."""
        intents = self.ledger.intents
        if not intents.armed or self._settling or self._is_read(sql):
            return None
        try:
            session: int | None = int(conn.connection_id)
        except (TypeError, ValueError, AttributeError):
            session = None
        return intents.record(server=self.name, address=self.address, session_id=session, user=self.credentials.user,
                              statement=shown, generation=self.ledger.generations.current(self.address))

    # -- statements in doubt (see db/in_doubt.py) ------------------------------
    def _give_up(self, conn: Any, sql: str, shown: str, intent: Intent | None = None) -> InDoubt | None:
        """A change sent on `conn` got no answer: record it as in doubt (reads are not)."""
        if self._is_read(sql) or self._settling:
            return None
        try:
            session = int(conn.connection_id)
        except (TypeError, ValueError, AttributeError):
            return None
        doubt = InDoubt(server=self.name, address=self.address, session_id=session, user=self.credentials.user,
                        statement=shown, at=time.time())
        self.ledger.in_doubt.add(doubt)
        if intent is not None:
            self.ledger.intents.in_doubt(intent.id, doubt.address, doubt.session_id, doubt.statement)
        log.warning("%s: gave up on %s: in doubt until session %d is ended", self.name, shown, session)
        return doubt

    def settle_doubts(self) -> None:
        """End the sessions of this server's statements in doubt now (see _settle_doubts), so that
        a bounded read that follows spends its bound on the read alone."""
        self._settle_doubts()

    def _settle_doubts(self) -> None:
        """Before any statement to a server with a statement in doubt: end that statement's
        session from a fresh one and see it gone, so that what is read next is final."""
        pending = [] if self._settling else self.ledger.in_doubt.pending(self.address)
        if not pending:
            return
        left = self.remaining()
        if left is not None and left <= 0:
            # The bound in force is spent (a frozen server took it): connecting to end the session
            # would cost the connector's whole-second handshake timeout beyond it.
            first = pending[0]
            raise InDoubtUnsettled(
                f"{first.said()} was given up on and may still be executed; it stays in doubt until that "
                f"session is ended: {self.name} ({self.address}) did not answer within the bound in force", first,
                hint=f"when {self.name} answers again, the next command ends that session first "
                     f"(or by hand: KILL CONNECTION {first.session_id} on {self.name})")
        twin = self.dedicated()
        twin._settling, twin.retries = True, 0
        bound = self.connect_timeout + SETTLE_GONE_S
        doubt = None
        try:
            with twin.bounded(bound if left is None else max(0.05, min(bound, left))):
                for doubt in self.ledger.in_doubt.pending(self.address):
                    said = settle_on(twin, doubt)
                    self.ledger.in_doubt.settled(doubt)
                    self.ledger.intents.settled(doubt.address, doubt.session_id, doubt.statement, said)
                    log.warning("%s: %s; %s is no longer in doubt", self.name, said, doubt.statement)
        except DbmigrateError as e:
            assert doubt is not None
            raise InDoubtUnsettled(
                f"{doubt.said()} was given up on and may still be executed; it stays in doubt until that "
                f"session is ended, and it cannot be ended now: {e.message}", doubt,
                hint=f"when {self.name} answers again, the next command ends that session first "
                     f"(or by hand: KILL CONNECTION {doubt.session_id} on {self.name})") from None
        finally:
            twin.close()

    def _check_time_left(self, shown: str) -> None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise Unresponsive(f"{self.name} ({self.address}): the bound of the wait in progress ran out before: {shown}")

    @staticmethod
    def _last_result(cur: Any) -> list[dict[str, Any]]:
        """The rows of the last statement of a request that carried several (each result read
        in turn: the session is free for the next statement afterwards)."""
        rows: list[dict[str, Any]] = []
        while True:
            rows = cur.fetchall() if cur.with_rows else []
            if not cur.nextset():
                return rows

    @staticmethod
    def _socket_timeouts(cursor: Any, seconds: float) -> None:
        """The read/write timeout of this cursor's exchanges. The connector's public setters take
        whole seconds; a bound needs fractions (the socket itself takes floats)."""
        cursor._read_timeout = cursor._write_timeout = max(0.001, float(seconds))

    @staticmethod
    def _is_read(sql: str) -> bool:
        return sql.lstrip().split(None, 1)[0].upper() in ("SELECT", "SHOW")

    def query(self, sql: str, params: Params = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._run(sql, params, fetch=True)
        return rows

    def query_after(self, statements: list[str], sql: str) -> list[dict[str, Any]]:
        """Send `statements` then the read `sql` in one request (one round trip instead of one
        each); returns the read's rows. The server stops at the first statement that fails:
        that error is raised and the read never runs. Not retried (the statements change things)."""
        rows: list[dict[str, Any]] = self._run(";\n".join([*statements, sql]), None, fetch="last")
        return rows

    def scalar_after(self, statements: list[str], sql: str) -> Any:
        """query_after's first value, as scalar() is query()'s."""
        return _first_value(self.query_after(statements, sql))

    def consume(self, sql: str, params: Params = None) -> int:
        """Run a read and discard its rows as they arrive (warm-up, probes): returns the row count."""
        count: int = self._run(sql, params, fetch="count")
        return count

    def execute(self, sql: str, params: Params = None) -> int:
        affected: int = self._run(sql, params, fetch=False)
        return affected

    def stream(self, sql: str, params: Params = None, batch: int = 5000) -> Iterator[dict[str, Any]]:
        """A read whose rows arrive in batches instead of all at once (log tables can hold
        hundreds of thousands of rows). Not retried: a lost connection raises QueryError."""
        self._settle_doubts()
        conn = self.connect()
        cur = conn.cursor(dictionary=True, buffered=False)
        try:
            cur.execute(TAG + sql, params)
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    return
                yield from rows
        except mysql.connector.Error as e:
            self.close()
            raise QueryError(f"{self.name} ({self.address}): {redact(getattr(e, 'msg', str(e)))} "
                             f"[{getattr(e, 'errno', None)}] in: {redact(sql)}", errno=getattr(e, "errno", None)) from None
        finally:
            try:
                cur.close()
            except mysql.connector.Error:
                self.close()  # an abandoned unbuffered read leaves the session unusable

    def scalar(self, sql: str, params: Params = None) -> Any:
        return _first_value(self.query(sql, params))

    # -- identity ------------------------------------------------------------
    @property
    def version(self) -> str:
        if self._version is None:
            self._version = str(self.scalar("SELECT VERSION() AS v"))
        return self._version

    @property
    def flavor(self) -> Flavor:
        if self._flavor is None:
            self._flavor = for_server(self.version)
        return self._flavor

    def waiter(self, read_timeout: int) -> "Server":
        """A dedicated session for bounded waits, opened once and kept: a handshake costs
        milliseconds, which must not be spent inside a fenced window. Closed with this server."""
        self._waiter = self._kept_twin(self._waiter, read_timeout)
        return self._waiter

    def watcher(self, read_timeout: int) -> "Server":
        """A dedicated session for a watchdog beside a statement that may block (the fence's),
        kept like the wait session. Its own, because a watchdog's read may still be in flight
        when the watched statement returns, and the window after it must not wait for that."""
        self._watcher = self._kept_twin(self._watcher, read_timeout)
        return self._watcher

    def _kept_twin(self, twin: "Server | None", read_timeout: int) -> "Server":
        if twin is not None and twin.read_timeout < read_timeout:
            twin.close()  # an open connection keeps the read timeout it was opened with
            twin = None
        if twin is None:
            twin = self.dedicated()
            twin.read_timeout = max(twin.read_timeout, read_timeout)
        twin._deadline = self._deadline  # the bound in force holds for the side session too
        return twin

    def dedicated(self) -> "Server":
        """A second handle on the same server with its own session (locks, long waits)."""
        twin = Server(self.name, self.host, self.port, self.credentials, self.connect_timeout,
                      self.read_timeout, self.retries, self.unix_socket, self.ledger)
        twin._version = self._version  # the same server: no second VERSION() round trip
        self._twins.append(twin)  # this process's own sessions there (the seal spares them)
        return twin

    @property
    def connected(self) -> bool:
        """Has this handle a session open (without asking the server)?"""
        return self._conn is not None

    def own_handles(self) -> list["Server"]:
        """This handle and every session this process keeps beside it on the same server: the wait
        and watch sessions, and the dedicated ones (the cluster lease's, a window's reader)."""
        return [self, *(h for h in (self._waiter, self._watcher) if h is not None), *self._twins]


def _first_value(rows: list[dict[str, Any]]) -> Any:
    """The first column of the first row, None when there is no row."""
    return next(iter(rows[0].values())) if rows else None
