"""Three application connection pools, as production drivers behave, writing through the router.

What an application sees of a switchover is not the write gap: it is the errors its driver and
pool hand it, and how long one of its calls waits. Each pool here runs one application's loop
(a prepared INSERT, a short pause, again) and counts what its caller would see, by class:

- `go_pool` (Go's database/sql over go-sql-driver/mysql): a kept connection is checked before
  it is reused (the driver's connection check; here a ping, which sends no statement); a
  connection found dead before anything was sent is thrown away and the call retried on another
  (database/sql's driver.ErrBadConn: two tries on kept connections, then a new one). An error
  after the statement was sent reaches the caller; 1290 (read-only) is treated as a dead
  connection (closed, not kept).
- `hikari_pool` (JDBC with HikariCP): a kept connection is checked only when it was idle for
  more than 500 ms (HikariCP's aliveBypassWindowMs); every error reaches the caller; a
  connection whose error is a lost connection is evicted, one with an SQL error is kept.
- `naive_pool`: no check, no retry; a lost connection is dropped after its error, any other
  error keeps the connection.

Every pool uses server-side prepared statements (binary protocol, as Go's and Java's drivers
do), mysql-connector-python in pure Python, TLS off on loopback, Nagle's algorithm off as Go's
net package, Connector/J and the C client libraries set it (see `_open`). The statements are
the application's workload, so they stay here, not in dbmigrate.db.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import mysql.connector

from dbmigrate.db.credentials import Credentials

CLASSES = ("1290", "2013", "2006", "gone", "other")
LOST = {2013, 2055, 2006, 2003, 2027, 1927, 4031, 1053}  # the connection is gone (or never came)
TABLE = "client_writes"
SCHEMA = ("CREATE TABLE IF NOT EXISTS {db}.client_writes (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
          "kind VARCHAR(16) NOT NULL, ts DATETIME(6) NOT NULL) ENGINE=InnoDB")
Address = Callable[[], tuple[str, int]]


@dataclass(frozen=True)
class FixedAddress:
    """A router's port: the same address for every new connection."""

    host: str
    port: int

    def __call__(self) -> tuple[str, int]:
        return self.host, self.port

    @classmethod
    def of(cls, address: str) -> "FixedAddress":
        """From "HOST:PORT" (a relay's address)."""
        host, _, port = address.rpartition(":")
        return cls(host, int(port))


@dataclass(frozen=True)
class DsnAddress:
    """A cluster's writer read from a DSN file for every new connection, as such applications do."""

    path: str
    cluster: str

    def __call__(self) -> tuple[str, int]:
        host, _, port = json.loads(Path(self.path).read_text())["clusters"][self.cluster]["writer"].rpartition(":")
        return host, int(port)


def classify(code: int, found_dead: bool) -> str:
    """The class of a client-visible error: a connection found dead when the call used it is
    'gone' (the caller's statement never ran), else its error number."""
    if found_dead:
        return "gone"
    if code == 1290:
        return "1290"
    if code in (2013, 2055):  # 2055: lost while sending (the pure-Python driver's 2013)
        return "2013"
    if code == 2006:
        return "2006"
    return "other"


@dataclass
class Call:
    """One call of the application: when it began (wall clock), how long it waited, and the
    class of the error it got (None: it succeeded)."""

    at: float
    ms: float
    error: str | None = None
    code: int = 0


@dataclass
class Conn:
    conn: Any
    cursor: Any
    last_used: float = field(default_factory=time.monotonic)


class PoolClient(threading.Thread):
    """One application pool writing through `address()` (read again for every new connection)."""

    kind = "abstract"
    check_idle_after_s: float | None = None  # check a kept connection idle longer than this (0: always)
    retries_dead: bool = False  # a connection found dead before the statement: retry elsewhere
    closes_on: frozenset[int] = frozenset()  # SQL errors that make the pool close the connection

    def __init__(self, address: Address, creds: Credentials, database: str = "app", *, size: int = 3,
                 interval_s: float = 0.004, read_only: bool = False, connect_timeout_s: int = 2):
        super().__init__(daemon=True, name=f"{self.kind}-{'reads' if read_only else 'writes'}")
        self.address, self.creds, self.database, self.size = address, creds, database, size
        self.interval_s, self.read_only, self.connect_timeout_s = interval_s, read_only, connect_timeout_s
        self.calls: list[Call] = []
        self.stop_flag = threading.Event()
        self._idle: list[Conn] = []
        self._lock = threading.Lock()

    # -- connections -----------------------------------------------------------------
    def _open(self) -> Conn:
        host, port = self.address()
        conn = mysql.connector.connect(host=host, port=port, user=self.creds.user,
                                       password=self.creds.password or "", database=self.database,
                                       connection_timeout=self.connect_timeout_s, autocommit=True,
                                       use_pure=True, ssl_disabled=True)
        no_delay(conn)
        return Conn(conn, conn.cursor(prepared=True))

    def _alive(self, c: Conn) -> bool:
        """HikariCP's check: a ping (it sends no statement of the caller)."""
        try:
            return bool(c.conn.is_connected())
        except Exception:
            return False

    def _kept(self) -> tuple[Conn | None, bool]:
        """A kept connection (most recently used first, as database/sql hands them out) and
        whether the pool's check found it dead (it is then closed)."""
        if not self._idle:
            return None, False
        c = self._idle.pop()
        due = self.check_idle_after_s is not None and time.monotonic() - c.last_used >= self.check_idle_after_s
        if due and not self._check(c):
            _close(c)
            return None, True
        return c, False

    def _check(self, c: Conn) -> bool:
        return self._alive(c)

    def _statement(self, c: Conn) -> None:
        if self.read_only:
            c.cursor.execute(f"SELECT id, kind FROM {TABLE} WHERE id = ?", (1,))
            c.cursor.fetchall()
        else:
            c.cursor.execute(f"INSERT INTO {TABLE} (kind, ts) VALUES (?, NOW(6))", (self.kind,))

    def _call(self) -> Call:
        """One call of the application, with the pool's own retries; the result its caller sees."""
        at, t0 = time.time(), time.monotonic()
        kept_tries = 0
        while True:
            c, found_dead = (None, False)
            if kept_tries < 2 or not self.retries_dead:
                kept_tries += 1
                c, found_dead = self._kept()
            if found_dead and self.retries_dead:
                continue  # ErrBadConn before anything was sent: database/sql tries again
            # For the count only (the pool's behaviour does not depend on it): was the connection
            # already closed by the server before the caller's statement went out?
            dead_before = c is not None and peer_closed(c.conn)
            try:
                if c is None:
                    c = self._open()
                self._statement(c)
            except (mysql.connector.Error, OSError) as e:
                code = getattr(e, "errno", None) or 0
                lost = code in LOST or code < 1000
                if c is not None and (lost or code in self.closes_on):
                    _close(c)
                elif c is not None:
                    self._give_back(c)
                return Call(at, (time.monotonic() - t0) * 1000, classify(code, dead_before and lost), code)
            self._give_back(c)
            return Call(at, (time.monotonic() - t0) * 1000)

    def _give_back(self, c: Conn) -> None:
        c.last_used = time.monotonic()
        self._idle.append(c)
        while len(self._idle) > self.size:
            _close(self._idle.pop(0))

    def run(self) -> None:
        while not self.stop_flag.is_set():
            call = self._call()
            with self._lock:
                self.calls.append(call)
            if call.error is not None:
                time.sleep(0.005)  # an application's error path, not a busy loop
            time.sleep(self.interval_s)
        for c in self._idle:
            _close(c)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=10)

    # -- what the application saw ----------------------------------------------------
    def tally(self, since: float | None = None, until: float | None = None) -> dict[str, Any]:
        with self._lock:
            calls = [c for c in self.calls if (since is None or c.at >= since) and (until is None or c.at <= until)]
        classes = {k: 0 for k in CLASSES}
        codes: dict[str, int] = {}
        for c in calls:
            if c.error is not None:
                classes[c.error] += 1
                codes[str(c.code)] = codes.get(str(c.code), 0) + 1
        longest = max(calls, key=lambda c: c.ms, default=None)
        return {"calls": len(calls), "errors": sum(classes.values()), "classes": classes, "codes": codes,
                "stall_max_ms": round(longest.ms, 1) if longest else 0.0,
                "stall_at": round(longest.at, 3) if longest else None,
                "error_at": [[round(c.at, 3), c.error, c.code] for c in calls if c.error is not None][:20],
                "ok": sum(1 for c in calls if c.error is None)}


class GoPool(PoolClient):
    kind = "go_pool"
    check_idle_after_s = 0.0
    retries_dead = True
    closes_on = frozenset({1290})

    def _check(self, c: Conn) -> bool:
        """go-sql-driver's connection check: a read that does not wait, nothing sent."""
        return not peer_closed(c.conn)


class HikariPool(PoolClient):
    kind = "hikari_pool"
    check_idle_after_s = 0.5


class NaivePool(PoolClient):
    kind = "naive_pool"


KINDS: dict[str, type[PoolClient]] = {k.kind: k for k in (GoPool, HikariPool, NaivePool)}


def no_delay(conn: Any) -> None:
    """TCP_NODELAY on the connection's socket, as the drivers the pools stand for set it. The
    pure-Python connector leaves Nagle's algorithm on: through HAProxy a prepared INSERT then
    waited ~40 ms for a delayed ACK (measured, 44 ms p50 against 1 ms), its bytes partly sent,
    while the server listed the session as idle."""
    try:
        conn._socket.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (AttributeError, OSError):
        pass  # a unix socket, or no socket kept there: nothing to set


def peer_closed(conn: Any) -> bool:
    """Has the server (or the router) closed this connection? A non-blocking peek on its
    socket, as go-sql-driver's connCheck does: end of file (or an error) means closed; pending
    bytes on an idle connection mean it is not usable either."""
    try:
        sock = conn._socket.sock  # the connector keeps its socket there (pure Python)
    except AttributeError:
        return False
    timeout = sock.gettimeout()
    try:
        sock.setblocking(False)
        sock.recv(1, socket.MSG_PEEK)
        return True  # end of file, or bytes nobody asked for: either way not usable
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        try:
            sock.settimeout(timeout)
        except OSError:
            pass


def _close(c: Conn) -> None:
    try:
        c.conn.close()
    except Exception:
        pass


def create_table(server, database: str = "app") -> None:
    """The pools' table, created on the primary before they start (it replicates)."""
    server.execute(SCHEMA.format(db=database))


class ClientSet:
    """The three pools side by side (writes through the writer route), and optionally a Go-like
    pool reading through the readers' route."""

    def __init__(self, writer: Address, creds: Credentials, database: str = "app", *,
                 reader: Address | None = None, kinds: Sequence[str] = tuple(KINDS), size: int = 3,
                 interval_s: float = 0.004):
        self.pools = [KINDS[k](writer, creds, database, size=size, interval_s=interval_s) for k in kinds]
        self.reads = GoPool(reader, creds, database, size=2, interval_s=interval_s, read_only=True) if reader else None
        self.started_at: float | None = None

    def start(self) -> "ClientSet":
        self.started_at = time.time()
        for p in self.everyone():
            p.start()
        return self

    def everyone(self) -> list[PoolClient]:
        return [*self.pools, *([self.reads] if self.reads else [])]

    def wait_for_calls(self, n: int = 5, timeout_s: float = 10.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if all(p.tally()["ok"] >= n for p in self.everyone()):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        for p in self.everyone():
            p.stop_flag.set()
        for p in self.everyone():
            p.join(timeout=10)

    def summary(self, since: float | None = None, until: float | None = None) -> dict[str, Any]:
        """`client_errors` (count per pool kind), `client_error_classes` (per kind, by class),
        `client_stall_max_ms` (the longest call of any writing pool), per-kind stalls, and the
        reads' own counts when a reading pool ran."""
        tallies = {p.kind: p.tally(since, until) for p in self.pools}
        out: dict[str, Any] = {
            "client_errors": {k: t["errors"] for k, t in tallies.items()},
            "client_error_classes": {k: {c: n for c, n in t["classes"].items() if n} for k, t in tallies.items()},
            "client_stall_max_ms": max((t["stall_max_ms"] for t in tallies.values()), default=0.0),
            "client_stalls_ms": {k: t["stall_max_ms"] for k, t in tallies.items()},
            "client_calls": {k: t["calls"] for k, t in tallies.items()},
            # when (wall clock) each error came and the longest call began: to place them among the steps
            "client_error_times": {k: t["error_at"] for k, t in tallies.items() if t["error_at"]},
            "client_stall_at": {k: t["stall_at"] for k, t in tallies.items()},
        }
        if self.reads is not None:
            r = self.reads.tally(since, until)
            out["client_reads"] = {"kind": self.reads.kind, "errors": r["errors"],
                                   "classes": {c: n for c, n in r["classes"].items() if n},
                                   "stall_max_ms": r["stall_max_ms"], "calls": r["calls"]}
        return out


class ClientProcess:
    """A ClientSet in a process of its own, as an application is: in the tool's process its
    threads would wait on the tool's interpreter lock and send their statements in step with
    the tool's own (measured: a kept connection ended while idle was then reused before its
    end reached the client, nearly every time). Same interface as ClientSet."""

    def __init__(self, writer: Address, creds: Credentials, database: str = "app", *,
                 reader: Address | None = None, kinds: Sequence[str] = tuple(KINDS), size: int = 3,
                 interval_s: float = 0.004):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, writer, creds, database, reader, tuple(kinds), size,
                                                      interval_s), daemon=True, name="application-pools")
        self.started_at: float | None = None

    def start(self) -> "ClientProcess":
        self._proc.start()
        self.started_at = time.time()
        return self

    def _ask(self, *request: Any, timeout_s: float = 60.0) -> Any:
        self._conn.send(request)
        if not self._conn.poll(timeout_s):
            raise TimeoutError(f"the application pools' process did not answer {request[0]!r}")
        return self._conn.recv()

    def wait_for_calls(self, n: int = 5, timeout_s: float = 10.0) -> bool:
        return bool(self._ask("wait", n, timeout_s, timeout_s=timeout_s + 30))

    def summary(self, since: float | None = None, until: float | None = None) -> dict[str, Any]:
        if not self._proc.is_alive():
            # Said, not hidden: a result without the pools' counts must say why.
            return getattr(self, "_final", None) or {
                "client_pools_failed": f"the pools' process ended early (exit code {self._proc.exitcode})"}
        return self._ask("summary", since, until)

    def stop(self) -> None:
        if self._proc.is_alive():
            try:
                self._final = self._ask("stop")
            except (OSError, EOFError, TimeoutError):
                self._proc.kill()
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()


def _serve(conn, writer, creds, database, reader, kinds, size, interval_s) -> None:
    clients = ClientSet(writer, creds, database, reader=reader, kinds=kinds, size=size, interval_s=interval_s).start()
    while True:
        request = conn.recv()
        if request[0] == "wait":
            conn.send(clients.wait_for_calls(request[1], request[2]))
        elif request[0] == "summary":
            conn.send(clients.summary(request[1], request[2]))
        elif request[0] == "stop":
            clients.stop()
            conn.send(clients.summary())
            return


def console_line(summary: dict[str, Any]) -> str:
    """One line for a console: errors per pool kind (classes beside) and the longest stall."""
    if not summary or "client_errors" not in summary:
        return ""
    parts = []
    for kind, n in summary["client_errors"].items():
        classes = summary.get("client_error_classes", {}).get(kind) or {}
        parts.append(f"{kind} {n}" + (f" ({', '.join(f'{c}: {k}' for c, k in classes.items())})" if classes else ""))
    reads = summary.get("client_reads")
    if reads:
        parts.append(f"reads {reads['errors']}")
    return f"client errors: {'; '.join(parts)}; longest client stall {summary['client_stall_max_ms']:.0f} ms"
