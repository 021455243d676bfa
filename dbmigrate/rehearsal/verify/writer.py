"""The zero-loss verifier: writes sequence numbers through the router, as the
application would, and later proves that every acknowledged one survived.

The client rules it follows are the ones a correct application needs during a
switchover (measured, see the project's facts):
- error 1290 (read-only) means "this server is fenced": close and reconnect, since
  a ping would not notice a demoted primary;
- a lost connection *during* a write leaves the outcome unknown: retry the same
  id, and count a duplicate key (1062) on that retry as success;
- no TLS on loopback: PyMySQL's TLS handshake on every reconnect (~18 ms) would
  be measured as switchover downtime.

Ids are contiguous: an id is retried until acknowledged, so ids first..last were
all acknowledged and are all expected on every server checked.

It acts as the application, so its statements (its table, its inserts and the
check that reads the ids back) stay here: they are the workload under test, not
dbmigrate's own reads or writes of server state, which go through `dbmigrate.db`.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

import pymysql
from pymysql.constants import CR, ER

from dbmigrate.db.connection import QueryError, Server
from dbmigrate.db.credentials import Credentials
from dbmigrate.exceptions import ConnectionFailed, DbmigrateError, UsageError
from dbmigrate.rehearsal.verify.report import Ack, VerifyReport, longest_gap

DEFAULT_TABLE = "app.dbmigrate_verify"
LOST = {CR.CR_SERVER_LOST, CR.CR_SERVER_GONE_ERROR, CR.CR_SERVER_LOST_EXTENDED}


class VerifierError(DbmigrateError):
    """The verifier could not start or could not check."""


def _errno(e: BaseException) -> int | None:
    args = getattr(e, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _check_table_name(table: str) -> str:
    schema, _, name = table.partition(".")
    if not name or not all(p.replace("_", "").isalnum() for p in (schema, name)):
        raise UsageError(f"verifier table must be schema.table (letters, digits, _): {table!r}")
    return f"`{schema}`.`{name}`"


class ZeroLossVerifier:
    """Background writer of sequence numbers plus the check of where they ended up.

    Use: prepare() (creates the table, picks the first id), start(), ... switchover ...,
    stop(), then check([new_primary, *replicas]).
    """

    def __init__(self, host: str, port: int, credentials: Credentials, *, table: str = DEFAULT_TABLE,
                 interval_s: float = 0.003, connect_timeout_s: float = 1.0, io_timeout_s: float = 2.0,
                 retry_pause_s: float = 0.002):
        self.host, self.port = host, port
        self.credentials = credentials
        self.table = _check_table_name(table)
        self.interval_s = interval_s
        self.connect_timeout_s = connect_timeout_s
        self.io_timeout_s = io_timeout_s
        self.retry_pause_s = retry_pause_s
        self._acks: list[Ack] = []
        self._errors: dict[str, int] = {}
        self._error_times: list[tuple[float, str]] = []  # (monotonic, kind): where a gap's time went
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_id: int | None = None
        self._started = self._stopped = 0.0
        self._crash: BaseException | None = None

    @classmethod
    def for_cluster(cls, inventory, cluster: str, host: str | None = None, **kw) -> "ZeroLossVerifier":
        """Writes through the cluster's HAProxy writer port (or its relay), as the cluster's application user."""
        address = inventory.cluster(cluster).write_address()
        if address is None:
            raise UsageError(f"cluster {cluster} has no HAProxy writer_port nor relay in {inventory.path}",
                             hint="construct ZeroLossVerifier(host, port, credentials) with the address applications write to")
        creds = inventory.app_credentials(cluster)
        if creds is None:
            raise UsageError(f"cluster {cluster} has no app_credentials in {inventory.path}",
                             hint="the verifier writes as the application user, so that read_only fences it")
        return cls(host or address[0], address[1], creds, **kw)

    # -- connection ----------------------------------------------------------
    def _connect(self) -> tuple[Any, int | None]:
        c = self.credentials
        conn = pymysql.connect(host=self.host, port=self.port, user=c.user, password=c.password or "",
                               connect_timeout=self.connect_timeout_s, read_timeout=self.io_timeout_s,
                               write_timeout=self.io_timeout_s, autocommit=True, ssl_disabled=True)
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            server_id = int(cur.fetchone()[0])
        return conn, server_id

    def prepare(self) -> int:
        """Create the table if needed (through the router, as the app user) and pick the
        first id after any left by earlier runs. Returns that id."""
        try:
            conn, _ = self._connect()
        except pymysql.MySQLError as e:
            raise ConnectionFailed(f"verifier cannot connect to {self.host}:{self.port} as {self.credentials.user}: {e}",
                                   hint="is the router up and does it send writes to a writable primary?") from None
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                            "(id BIGINT NOT NULL PRIMARY KEY, ts DATETIME(6) NOT NULL) ENGINE=InnoDB")
                cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM {self.table}")
                self._next_id = int(cur.fetchone()[0]) + 1
        except pymysql.MySQLError as e:
            raise VerifierError(f"verifier cannot prepare {self.table}: {e}",
                                hint="the application user needs CREATE, INSERT and SELECT on that schema") from None
        finally:
            conn.close()
        return self._next_id

    # -- writing -------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise VerifierError("verifier already started")
        if self._next_id is None:
            self.prepare()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="zero-loss-verifier", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise VerifierError(f"verifier writer did not stop within {timeout_s:g}s")
        self._stopped = time.monotonic()
        if self._crash is not None:
            raise VerifierError(f"verifier writer crashed: {self._crash!r}")

    def _count(self, kind: str) -> None:
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1
            self._error_times.append((time.monotonic(), kind))

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # surfaced by stop(); a silent dead writer would prove nothing
            self._crash = e

    def _loop(self) -> None:
        conn = None
        server_id: int | None = None
        uncertain = False  # the current id may already be written (lost connection mid-write)
        assert self._next_id is not None
        next_due = time.monotonic()
        sql = f"INSERT INTO {self.table} (id, ts) VALUES (%s, NOW(6))"
        while not self._stop.is_set():
            if conn is None:
                try:
                    conn, server_id = self._connect()
                except (pymysql.MySQLError, OSError):
                    self._count("connect_failed")
                    self._stop.wait(self.retry_pause_s)
                    continue
            id_ = self._next_id
            acked = False
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, (id_,))
                acked = True
            except pymysql.MySQLError as e:
                errno = _errno(e)
                if errno == ER.DUP_ENTRY and uncertain:
                    self._count("duplicate_after_retry")  # the lost write had landed: success
                    acked = True
                elif errno == ER.OPTION_PREVENTS_STATEMENT:
                    self._count("read_only")  # fenced: not written, reconnect to find the writer
                    conn = self._close(conn)
                elif errno in LOST or isinstance(e, pymysql.err.InterfaceError) or errno is None:
                    self._count("lost_connection")
                    uncertain = True
                    conn = self._close(conn)
                elif errno == ER.DUP_ENTRY:
                    # Someone else wrote this id (another verifier on the same table): skip it.
                    self._count("duplicate_unexpected")
                    self._next_id += 1
                else:
                    self._count(f"error_{errno}")
                    conn = self._close(conn)
            except OSError:
                self._count("lost_connection")
                uncertain = True
                conn = self._close(conn)
            if acked:
                now = time.monotonic()
                with self._lock:
                    self._acks.append(Ack(id_, now, time.time(), server_id))
                self._next_id += 1
                uncertain = False
                next_due = max(next_due + self.interval_s, now)  # no burst after an outage
                pause = next_due - time.monotonic()
            else:
                pause = self.retry_pause_s
            if pause > 0:
                self._stop.wait(pause)
        self._close(conn)

    @staticmethod
    def _close(conn) -> None:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        return None

    # -- observing -----------------------------------------------------------
    @property
    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    @property
    def errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._errors)

    def error_times(self, since: int = 0) -> list[tuple[float, str]]:
        """Each error as (monotonic time, kind), from the `since`-th on."""
        with self._lock:
            return self._error_times[since:]

    def wait_for_acks(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until at least `count` writes in total were acknowledged (bounded)."""
        deadline = time.monotonic() + timeout_s
        while len(self.acks) < count:
            if self._crash is not None:
                raise VerifierError(f"verifier writer crashed: {self._crash!r}")
            if time.monotonic() > deadline:
                raise VerifierError(f"only {len(self.acks)} of {count} writes acknowledged within {timeout_s:g}s",
                                    hint=f"errors so far: {self.errors}")
            time.sleep(0.005)

    # -- checking ------------------------------------------------------------
    def check(self, servers: Sequence[Server], catch_up_timeout_s: float = 10.0) -> VerifyReport:
        """Every acknowledged id must exist on every server given (the final primary and
        its replicas). Replicas get up to catch_up_timeout_s to apply what they lag behind."""
        if self._thread is not None and self._thread.is_alive():
            raise VerifierError("stop() the verifier before check()")
        acks = self.acks
        ids = sorted(a.id for a in acks)
        lost: dict[str, list[int]] = {}
        caught_up: dict[str, bool] = {}
        for server in servers:
            missing = self.missing_on(server, ids, catch_up_timeout_s)
            lost[server.name] = missing
            caught_up[server.name] = not missing
        by_server: dict[int, int] = {}
        for a in acks:
            if a.server_id is not None:
                by_server[a.server_id] = by_server.get(a.server_id, 0) + 1
        end = self._stopped or time.monotonic()
        return VerifyReport(acknowledged=len(acks), first_id=ids[0] if ids else None, last_id=ids[-1] if ids else None,
                            lost=lost, caught_up=caught_up, errors=self.errors, gap=longest_gap(acks),
                            duration_s=(end - self._started) if self._started else 0.0, acks_by_server_id=by_server)

    def missing_on(self, server: Server, ids: Sequence[int], timeout_s: float = 0.0) -> list[int]:
        """Which of `ids` are not in the table on `server`, waiting up to timeout_s for them."""
        ids = sorted(ids)
        if not ids:
            return []
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                rows = server.query(f"SELECT id FROM {self.table} WHERE id BETWEEN %s AND %s", (ids[0], ids[-1]))
                present = {int(r["id"]) for r in rows}
                missing = [i for i in ids if i not in present]
            except QueryError as e:
                if e.errno != 1146:  # table not replicated there yet: keep waiting
                    raise
                missing = list(ids)
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.05)
