"""One application writer per shard that finds its writer in the DSN file, as a
sharded application must: it re-reads the file on every reconnect, treats error
1290 (fenced) like a lost connection, and retries an unknown outcome with the
same id (a duplicate key on that retry means it did commit). Or, for a shard
whose route is a relay of its own (RelayShardWriter), one that always connects
to that relay, as its application does.

It stands in for the application, so its statements (its table, its inserts and
the read-back of ids) stay here, like the zero-loss verifier's.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pymysql

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials

TABLE = "seq"


def create_shard(server: Server, shard: str, rows: int, app_user: str) -> None:
    """A small shard as an application would have it: a data table, the writer's table, and
    the application account's rights on it."""
    server.execute(f"CREATE DATABASE IF NOT EXISTS `{shard}`")
    server.execute(f"CREATE TABLE `{shard}`.items (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(40), "
                   "qty INT, note VARCHAR(200))")
    for start in range(0, rows, 1000):
        n = min(1000, rows - start)
        server.execute(f"INSERT INTO `{shard}`.items (name, qty, note) SELECT CONCAT(%s, seq), seq, REPEAT('x', 180) "
                       f"FROM `{shard}`.seq_1_to_{n}", (f"{shard}-item",))
    server.execute(f"CREATE TABLE `{shard}`.`{TABLE}` (id BIGINT PRIMARY KEY, ts DATETIME(6) NOT NULL)")
    server.execute(f"GRANT ALL PRIVILEGES ON `{shard}`.* TO %s@%s", (app_user, "%"))


def ids_on(server: Server, shard: str) -> set[int]:
    return {int(r["id"]) for r in server.query(f"SELECT id FROM `{shard}`.`{TABLE}`")}


class AckedWrites:
    """What a writer thread acknowledged: `acks` holds (id, address that acknowledged it, when);
    `stop_flag` ends its loop."""

    acks: list[tuple[int, str, float]]
    stop_flag: threading.Event

    def acked_on(self, address: str) -> int:
        return sum(1 for _, a, _ in list(self.acks) if a == address)

    def wait_acks_on(self, address: str, n: int, timeout_s: float = 30) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.acked_on(address) < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(10)  # type: ignore[attr-defined]  # a threading.Thread


class ShardWriter(AckedWrites, threading.Thread):
    """Writes ids 1, 2, ... into SHARD.seq at whatever the DSN file names as the shard's writer."""

    def __init__(self, routes: Path | None, shard: str, creds: Credentials, interval_s: float = 0.01):
        super().__init__(daemon=True, name=f"writer-{shard}")
        self.routes, self.shard, self.creds, self.interval_s = routes, shard, creds, interval_s
        self.acks: list[tuple[int, str, float]] = []  # (id, address that acknowledged it, when)
        self.errors: dict[str, int] = {}
        self.stop_flag = threading.Event()

    def writer(self) -> str:
        """The server that takes the shard's writes now."""
        assert self.routes is not None
        return str(json.loads(self.routes.read_text())["clusters"][self.shard]["writer"])

    def connect_to(self) -> str:
        """Where a new connection goes: the DSN file's writer."""
        return self.writer()

    def acked_by(self, connected_to: str) -> str:
        """The address an acknowledgement is counted on: the server connected to."""
        return connected_to

    def run(self) -> None:
        conn, addr, next_id, unknown = None, None, None, False
        while not self.stop_flag.is_set():
            try:
                if conn is None:
                    addr = self.connect_to()
                    host, _, port = addr.rpartition(":")
                    conn = pymysql.connect(host=host, port=int(port), user=self.creds.user,
                                           password=self.creds.password or "", connect_timeout=1, read_timeout=2,
                                           write_timeout=2, autocommit=True, ssl_disabled=True)
                if next_id is None:  # continue after the ids of an earlier load
                    with conn.cursor() as cur:
                        cur.execute(f"SELECT COALESCE(MAX(id), 0) + 1 FROM `{self.shard}`.`{TABLE}`")
                        next_id = int(cur.fetchone()[0])
                with conn.cursor() as cur:
                    cur.execute(f"INSERT INTO `{self.shard}`.`{TABLE}` (id, ts) VALUES (%s, NOW(6))", (next_id,))
                self.acks.append((next_id, self.acked_by(addr), time.time()))
                next_id, unknown = next_id + 1, False
                time.sleep(self.interval_s)
            except (pymysql.MySQLError, OSError, KeyError, ValueError) as e:
                code = e.args[0] if e.args and isinstance(e.args[0], int) else 0
                self.errors[str(code)] = self.errors.get(str(code), 0) + 1
                if code == 1062 and unknown:  # the lost attempt did commit
                    self.acks.append((next_id, self.acked_by(str(addr)), time.time()))
                    next_id, unknown = next_id + 1, False
                    continue
                unknown = unknown or code in (2013, 2006)
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None  # 1290 (fenced) or a lost connection: reconnect through the DSN file
                time.sleep(0.01)
        if conn is not None:
            conn.close()

    def longest_gap_ms(self) -> float:
        times = [t for _, _, t in list(self.acks)]
        return max(((b - a) * 1000 for a, b in zip(times, times[1:])), default=0.0)


class RelayShardWriter(ShardWriter):
    """A shard's writer through the shard's relay (the cluster's `shard_routers`): every connection
    goes to the relay, which moves it between servers. An acknowledgement is counted on the relay's
    backend when the relay's generation (it grows with each move) is the same after the insert as
    it was after the write before (or before this one): no move came in between, so the insert ran
    there. Otherwise, or when the control socket does not answer, it is counted on the relay's own
    address: through the relay, the server not known."""

    def __init__(self, address: str, control_socket: str, shard: str, creds: Credentials,
                 interval_s: float = 0.01):
        from dbmigrate.routing.relay import RelayRouter

        super().__init__(None, shard, creds, interval_s)
        self.address = address
        self.relay = RelayRouter(shard, control_socket, address, timeout=2.0)
        self._last: tuple[int, str] | None = None  # (generation, backend) read after the last write

    def _read(self) -> tuple[int, str] | None:
        from dbmigrate.routing.base import RouterError

        try:
            st = self.relay.status()
        except RouterError:
            return None
        return int(st.get("generation") or 0), str(st.get("backend") or "")

    def writer(self) -> str:
        now = self._read()
        return now[1] if now is not None else self.address

    def connect_to(self) -> str:
        self._last = self._read()  # the bracket's start for the first write of this connection
        return self.address

    def acked_by(self, connected_to: str) -> str:
        before, now = self._last, self._read()
        self._last = now
        if before is None or now is None or before[0] != now[0] or not now[1]:
            return self.address
        return now[1]



def _serve_writer(conn, routes: str, shard: str, user: str, password: str, interval_s: float) -> None:
    import gc

    gc.disable()  # a full collection over many acks would be a stall of the writer's own
    w = ShardWriter(Path(routes), shard, Credentials(user, password), interval_s=interval_s)
    w.start()
    while True:
        cmd = conn.recv()
        if cmd == "stop":
            w.stop()
        conn.send(([(i, a, t) for i, a, t in list(w.acks)], dict(w.errors)))
        if cmd == "stop":
            return


class ShardWriterProcess:
    """A ShardWriter in a process of its own, as an application is: in the tool's process it would
    share the interpreter lock with the copy's relay and watcher, and time their turns as stalls.
    `refresh()` fetches its acknowledgements so far; `stop()` ends it and fetches them all."""

    def __init__(self, routes: Path, shard: str, creds: Credentials, interval_s: float = 0.01):
        import multiprocessing as mp

        self.conn, child = mp.Pipe()
        self.proc = mp.get_context("fork").Process(
            target=_serve_writer, args=(child, str(routes), shard, creds.user, creds.password or "", interval_s),
            daemon=True)
        self.proc.start()
        self.acks: list[tuple[int, str, float]] = []
        self.errors: dict[str, int] = {}

    def refresh(self) -> None:
        if self.proc.is_alive():
            self.conn.send("acks")
            self.acks, self.errors = self.conn.recv()

    def wait_acks_on(self, address: str, n: int, timeout_s: float = 30) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            self.refresh()
            if sum(1 for _, a, _ in self.acks if a == address) >= n:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.is_alive():
            self.conn.send("stop")
            self.acks, self.errors = self.conn.recv()
        self.proc.join(10)
