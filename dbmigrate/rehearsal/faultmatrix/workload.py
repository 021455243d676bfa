"""What the fault matrix asks of the application's schema: a statement that holds its locks
for a while (what a fence meets in production: a long UPDATE, a batch job; `SET GLOBAL
read_only=ON` has to wait for it), and the schema change its schema swaps make.

These stand in for the application, like the zero-loss verifier, so their statements stay here.
"""

from __future__ import annotations

import threading
import time

import pymysql

from dbmigrate.db.credentials import Credentials


class LongStatement:
    """Runs one UPDATE that sleeps `seconds` while holding its row and metadata locks."""

    def __init__(self, host: str, port: int, credentials: Credentials, seconds: float,
                 table: str = "sbtest.sbtest1"):
        self.host, self.port, self.credentials, self.seconds, self.table = host, port, credentials, seconds, table
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    def start(self) -> "LongStatement":
        self._thread = threading.Thread(target=self._run, name="long-statement", daemon=True)
        self._thread.start()
        self._running.wait(5)
        return self

    def _run(self) -> None:
        c = self.credentials
        try:
            conn = pymysql.connect(host=self.host, port=self.port, user=c.user, password=c.password or "",
                                   autocommit=True, ssl_disabled=True, read_timeout=int(self.seconds) + 30)
            try:
                with conn.cursor() as cur:
                    self._running.set()
                    cur.execute(f"UPDATE {self.table} SET k = k + SLEEP(%s) WHERE id = 1", (self.seconds,))
            finally:
                conn.close()
        except BaseException as e:  # reported by join(); the scenario goes on
            self.error = e
            self._running.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)


def swap_ddl(index: str, table: str = "sbtest.sbtest1") -> tuple[str, str]:
    """(DDL, undo) of a schema swap scenario: a secondary index of its own name."""
    return f"ALTER TABLE {table} ADD INDEX {index} (c)", f"ALTER TABLE {table} DROP INDEX {index}"


BIG_TABLE = "sbtest.fm_big"
BIG_ROWS = 200_000


class BigStatement:
    """What an application may have in flight at the fence that takes seconds to apply on a
    replica: a table-copying DDL (`kind="ddl"`) or one transaction changing every row of a
    200,000-row table (`kind="trx"`). The table is made (and replicated) the first time."""

    def __init__(self, host: str, port: int, credentials: Credentials, kind: str):
        if kind not in ("ddl", "trx"):
            raise ValueError(f"kind must be ddl or trx, not {kind!r}")
        self.host, self.port, self.credentials, self.kind = host, port, credentials, kind
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    def _connect(self):
        c = self.credentials
        return pymysql.connect(host=self.host, port=self.port, user=c.user, password=c.password or "",
                               autocommit=True, ssl_disabled=True, read_timeout=300)

    def prepare(self) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE TABLE IF NOT EXISTS {BIG_TABLE} "
                            "(id INT PRIMARY KEY, k INT NOT NULL, pad CHAR(100) NOT NULL) ENGINE=InnoDB")
                cur.execute(f"SELECT COUNT(*) FROM {BIG_TABLE}")
                if cur.fetchone()[0] < BIG_ROWS:
                    cur.execute(f"INSERT IGNORE INTO {BIG_TABLE} SELECT seq, seq, REPEAT('x', 100) "
                                f"FROM sbtest.seq_1_to_{BIG_ROWS}")
        finally:
            conn.close()

    def start(self, replicated_within_s: float = 20) -> "BigStatement":
        self.prepare()
        time.sleep(min(replicated_within_s, 5))  # the replicas apply the table before the statement starts
        self._thread = threading.Thread(target=self._run, name=f"big-{self.kind}", daemon=True)
        self._thread.start()
        self._running.wait(5)
        return self

    def _run(self) -> None:
        try:
            conn = self._connect()
            try:
                with conn.cursor() as cur:
                    self._running.set()
                    if self.kind == "ddl":
                        cur.execute(f"ALTER TABLE {BIG_TABLE} FORCE, ALGORITHM=COPY")
                    else:
                        cur.execute(f"UPDATE {BIG_TABLE} SET k = k + 1")
            finally:
                conn.close()
        except BaseException as e:  # e.g. refused by the fence: reported, the scenario goes on
            self.error = e
            self._running.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
