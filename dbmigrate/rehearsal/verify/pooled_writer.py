"""An application writer that behaves like a pooled client (Go's database/sql), not like a
polite one.

- Connections are kept in a pool and reused, most recently used first. A connection that
  returned an SQL error (1290 read-only, 1176 unknown key, ...) goes back into the pool and is
  used again: only a connection that is gone (killed, lost) is thrown away.
- New connections are opened lazily, when no idle one is left, and only then is the writer's
  address read from the DSN file: a pool whose connections are never ended keeps writing to
  where it first connected.
- Each connection sets its own session variables (sql_mode, long_query_time) and writes
  through a server-side prepared statement.

An outcome lost with its connection is retried with the same id (a duplicate key on that
retry means it did commit), so every acknowledged id must be on the server that serves the
shard in the end. Its statements stay here, like the zero-loss verifier's.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import mysql.connector

from dbmigrate.db.credentials import Credentials
from dbmigrate.rehearsal.verify.shard_writer import AckedWrites

TABLE = "seq"
GONE = {2006, 2013, 2055, 1927, 4031, 2003}  # the connection is gone: the pool discards it
SESSION = ("SET SESSION sql_mode='STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'", "SET SESSION long_query_time=11.2")


class PooledWriter(AckedWrites, threading.Thread):
    """Writes ids 1, 2, ... into SHARD.seq through a pool of up to `size` connections."""

    def __init__(self, routes: Path, shard: str, creds: Credentials, *, size: int = 4, interval_s: float = 0.005):
        super().__init__(daemon=True, name=f"pooled-{shard}")
        self.routes, self.shard, self.creds, self.size, self.interval_s = routes, shard, creds, size, interval_s
        self.acks: list[tuple[int, str, float]] = []  # (id, address that acknowledged it, when)
        self.errors: dict[str, list[float]] = {}  # error code -> when each happened
        self.opened: list[tuple[str, float]] = []  # (address, when) of every connection the pool opened
        self.stop_flag = threading.Event()
        self._idle: list[tuple[object, object, str]] = []  # (connection, prepared cursor, address)
        self._rotate = 0

    def writer(self) -> str:
        return json.loads(self.routes.read_text())["clusters"][self.shard]["writer"]

    def _open(self) -> tuple[object, object, str]:
        addr = self.writer()
        host, _, port = addr.rpartition(":")
        conn = mysql.connector.connect(host=host, port=int(port), user=self.creds.user,
                                       password=self.creds.password or "", connection_timeout=2, autocommit=True,
                                       use_pure=True, ssl_disabled=True)
        cur = conn.cursor()
        for statement in SESSION:
            cur.execute(statement)
        cur.close()
        prepared = conn.cursor(prepared=True)
        self.opened.append((addr, time.time()))
        return conn, prepared, addr

    def _get(self) -> tuple[object, object, str]:
        # database/sql hands out the most recently returned idle connection; a pool that is
        # busy has several: take them in turn so that every kept connection is used.
        if self._idle:
            self._rotate = (self._rotate + 1) % len(self._idle)
            return self._idle.pop(self._rotate)
        return self._open()

    def _fill(self) -> None:
        while len(self._idle) < self.size:
            self._idle.append(self._open())

    def run(self) -> None:
        next_id, unknown = None, False
        try:
            self._fill()
        except mysql.connector.Error:
            pass
        while not self.stop_flag.is_set():
            got = None
            try:
                got = self._get()
                conn, cur, addr = got
                if next_id is None:  # continue after the ids of an earlier load
                    cur.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM `{self.shard}`.`{TABLE}`")
                    next_id = int(cur.fetchone()[0])
                cur.execute(f"INSERT INTO `{self.shard}`.`{TABLE}` (id, ts) VALUES (?, NOW(6))", (next_id,))
                self.acks.append((next_id, addr, time.time()))
                next_id, unknown = next_id + 1, False
                self._idle.append(got)
                time.sleep(self.interval_s)
            except (mysql.connector.Error, OSError, KeyError, ValueError) as e:
                code = getattr(e, "errno", None) or 0
                self.errors.setdefault(str(code), []).append(time.time())
                if code == 1062 and unknown and got is not None:  # the lost attempt did commit
                    self.acks.append((next_id, got[2], time.time()))
                    next_id, unknown = next_id + 1, False
                if got is not None:
                    if code in GONE or code == 0 or code < 1000:
                        unknown = unknown or code in (2013, 2006, 2055)
                        _close(got[0])
                    else:
                        self._idle.append(got)  # an SQL error: the pool keeps the connection
                time.sleep(0.005)
        for conn, _cur, _addr in self._idle:
            _close(conn)

    def first_ack_on(self, address: str) -> float | None:
        return next((t for _, a, t in list(self.acks) if a == address), None)

    def longest_gap_s(self) -> float:
        times = [t for _, _, t in list(self.acks)]
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)

    def error_counts(self) -> dict[str, int]:
        return {code: len(at) for code, at in self.errors.items()}



def _close(conn: object) -> None:
    try:
        conn.close()  # type: ignore[attr-defined]
    except Exception:
        pass
