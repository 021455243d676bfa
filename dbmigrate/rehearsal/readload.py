"""A read workload the latency guard can judge: point lookups by a secondary index.

Threads query `app.orders` by `customer_id` through an address (normally the
router's writer port) as the application user. Connections are short-lived
(reconnect every `queries_per_connection`), like a PHP fleet's, which also means
slow-log windows opened mid-run see them (long_query_time is per session).
Errors (a fence, a flip) only make a thread reconnect.

It acts as the application, so its statements (the schema it reads, its seed
rows and lookups) stay here: they are the workload, not dbmigrate's own reads
or writes of server state, which go through `dbmigrate.db`.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import pymysql

from dbmigrate.db.credentials import Credentials

SCHEMA = """CREATE TABLE IF NOT EXISTS app.orders (
  id INT AUTO_INCREMENT PRIMARY KEY,
  customer_id INT NOT NULL,
  amount DECIMAL(10,2) NOT NULL,
  note VARCHAR(64) NOT NULL,
  KEY idx_customer (customer_id)
) ENGINE=InnoDB"""


def create_orders(server, rows: int = 20000, customers: int = 2000) -> None:
    """Create and fill app.orders on the primary (it replicates everywhere)."""
    server.execute(SCHEMA)
    have = int(server.scalar("SELECT COUNT(*) FROM app.orders") or 0)
    batch = []
    for i in range(have, rows):
        batch.append(f"({i % customers + 1},{(i * 37) % 1000 + 0.5},'order-{i}')")
        if len(batch) == 1000:
            server.execute("INSERT INTO app.orders (customer_id, amount, note) VALUES " + ",".join(batch))
            batch = []
    if batch:
        server.execute("INSERT INTO app.orders (customer_id, amount, note) VALUES " + ",".join(batch))


@dataclass
class ReadLoad:
    host: str
    port: int
    credentials: Credentials
    threads: int = 2
    customers: int = 2000
    queries_per_connection: int = 20
    pause_s: float = 0.002
    latencies_ms: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, ms)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"readload-{i}")
            t.start()
            self._workers.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(10)

    def _connect(self):
        c = self.credentials
        return pymysql.connect(host=self.host, port=self.port, user=c.user, password=c.password or "",
                               connect_timeout=2, read_timeout=5, autocommit=True, ssl_disabled=True)

    def _loop(self, n: int) -> None:
        rnd = random.Random(n)
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except pymysql.MySQLError:
                with self._lock:
                    self.errors += 1
                time.sleep(0.05)
                continue
            try:
                with conn.cursor() as cur:
                    for _ in range(self.queries_per_connection):
                        if self._stop.is_set():
                            break
                        t0 = time.perf_counter()
                        cur.execute("SELECT id, amount FROM app.orders WHERE customer_id = %s",
                                    (rnd.randint(1, self.customers),))
                        cur.fetchall()
                        with self._lock:
                            self.latencies_ms.append((time.monotonic(), (time.perf_counter() - t0) * 1000))
                        time.sleep(self.pause_s)
            except pymysql.MySQLError:
                with self._lock:
                    self.errors += 1
            finally:
                try:
                    conn.close()
                except Exception:
                    pass

    def samples_wall(self) -> list[tuple[float, float]]:
        """(epoch, ms) per query: the monotonic times moved onto the wall clock, to line up with other series."""
        offset = time.time() - time.monotonic()
        with self._lock:
            return [(t + offset, ms) for t, ms in self.latencies_ms]

    def summary(self, since: float | None = None) -> dict[str, float]:
        """Queries answered (since `since`), their average and p95, and the errors of the whole run
        (a connection refused or lost)."""
        with self._lock:
            values = sorted(ms for t, ms in self.latencies_ms if since is None or t >= since)
            errors = self.errors
        if not values:
            return {"queries": 0, "errors": errors}
        return {"queries": len(values), "avg_ms": round(sum(values) / len(values), 3),
                "p95_ms": round(values[int(0.95 * (len(values) - 1))], 3), "errors": errors}
