#!/usr/bin/env python3
"""One old server's application for the fleet benchmark, in a process of its own: a writer that
follows the DSN file (rehearsal's ShardWriter) and a reader timing point reads on the old
server itself (what that server's other readers feel while it is copied).

In a process of its own so that neither the tool nor the other servers' applications share
its interpreter lock: a 5 ms switch interval would be counted as the server's latency.

Protocol: one JSON line on stdin (routes, shard, app and admin credentials, the old server's
address, reads per second, write interval); it prints `ready` once 10 writes were acknowledged
on the old server; a line `stop` on stdin ends it, and it prints one JSON line: acks
(id, address, epoch s), reads (epoch s, ms) and error counts. Credentials come through stdin,
never argv.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import threading
import time
from pathlib import Path


class Reader(threading.Thread):
    def __init__(self, server, schema: str, hi: int, per_s: float):
        super().__init__(daemon=True, name="reader")
        self.server, self.schema, self.hi, self.interval = server, schema, hi, 1 / per_s
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        from dbmigrate.db.inspector import Inspector

        insp = Inspector(self.server)
        while not self.stop_flag.is_set():
            t = time.perf_counter()
            try:
                insp.point_read(self.schema, "items", "id", random.randint(1, self.hi))
            except Exception:  # counted; the reader reconnects on its next read
                self.errors += 1
                self.stop_flag.wait(0.05)
                continue
            self.samples.append((time.time(), (time.perf_counter() - t) * 1000))
            self.stop_flag.wait(self.interval)


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    from dbmigrate.db.connection import Server
    from dbmigrate.db.credentials import Credentials
    from dbmigrate.rehearsal.verify.shard_writer import ShardWriter

    gc.freeze()
    gc.disable()  # a full collection over thousands of acks would be counted as a gap
    writer = ShardWriter(Path(cfg["routes"]), cfg["shard"], Credentials(*cfg["app"]),
                         interval_s=cfg["write_interval_s"])
    admin = Server(cfg["source"], cfg["host"], cfg["port"], Credentials(*cfg["admin"]), connect_timeout=2,
                   read_timeout=5)
    reader = Reader(admin, cfg["shard"], cfg["rows"], cfg["reads_per_s"])
    writer.start()
    reader.start()
    ok = writer.wait_acks_on(f"{cfg['host']}:{cfg['port']}", 10, timeout_s=60)
    print("ready" if ok else f"not ready: {writer.errors}", flush=True)
    sys.stdin.readline()  # `stop`, or the bench went away
    writer.stop_flag.set()
    reader.stop_flag.set()
    writer.join(10)
    reader.join(10)
    print(json.dumps({"acks": writer.acks, "reads": reader.samples, "write_errors": writer.errors,
                      "read_errors": reader.errors}), flush=True)


if __name__ == "__main__":
    main()
