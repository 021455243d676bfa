#!/usr/bin/env python3
"""What `shape capture` costs the primary: write throughput and the longest write stall.

A throwaway sandbox (a primary and one replica) gets the fixture schema with every hazard
(tests/fixtures/shapes/ca.sql) and TABLES copies of its tables grown to ROWS rows; a writer
inserts on the primary as fast as one session can. Measured over equal windows: writes per
second and the longest gap between two acknowledged writes with no capture, then during
`shape capture` read from the primary itself (--server, the worst case), then read from the
replica (the default), then with a digested query window of --seconds on the primary.

    python bench/shape_capture_cost.py [--rows 20000] [--tables 20] [--seconds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HOME = Path(tempfile.mkdtemp(prefix="dbm-bench-shape-"))
os.environ["DBMIGRATE_HOME"] = str(HOME)
os.environ.setdefault("DBMIGRATE_JOURNAL", str(HOME / "journal.sqlite"))

from dbmigrate.app import shape as shape_use  # noqa: E402
from dbmigrate.config import load_inventory  # noqa: E402
from dbmigrate.db.credentials import private_defaults_file  # noqa: E402
from dbmigrate.rehearsal.sandbox.manager import Sandboxes  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "shapes" / "ca.sql"
NAME = "bshape"


class Writer(threading.Thread):
    def __init__(self, inv, server: str):
        super().__init__(daemon=True)
        self.srv = inv.open(server)
        self.acks: list[float] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.srv.execute("INSERT INTO ca.audit_log VALUES (NOW(6), 'bench', 'w')")
            self.acks.append(time.monotonic())

    def window(self, t0: float, t1: float) -> tuple[float, float]:
        times = [t for t in self.acks if t0 <= t <= t1]
        gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
        return len(times) / max(t1 - t0, 1e-9), gap * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    boxes = Sandboxes()
    state = boxes.up(NAME, 1)
    try:
        inv = load_inventory(state.inventory_file)
        primary = f"{NAME}-1"
        spec = inv.cluster(NAME).servers[primary]
        with private_defaults_file(inv.credentials_for(spec), spec.host, spec.port) as cnf:
            subprocess.run(["mariadb", f"--defaults-file={cnf}"], stdin=FIXTURE.open("rb"), check=True)
        with inv.open(primary) as s:
            for i in range(args.tables):
                s.execute(f"CREATE TABLE ca.orders_{i} LIKE ca.orders")
                s.execute(f"INSERT INTO ca.orders_{i} (account_id, status, created) "
                          f"SELECT 1 + seq % 2, 'valid', NOW(6) FROM ca.seq_1_to_{args.rows}")
        w = Writer(inv, primary)
        w.start()
        results = {}
        try:
            time.sleep(1)
            t0 = time.monotonic()
            time.sleep(3)
            results["no capture"] = w.window(t0, time.monotonic())
            for label, kw in (("capture read from the primary", {"server": primary}),
                              ("capture read from the replica", {}),
                              (f"capture + {args.seconds:g}s digest window", {"seconds": args.seconds})):
                t0 = time.monotonic()
                shape, _ = shape_use.capture(state.inventory_file, NAME, HOME / label.replace(" ", "-"), **kw)
                results[label] = (*w.window(t0, time.monotonic()), shape.took_s)
        finally:
            w.stop_flag.set()
            w.join(5)
    finally:
        boxes.down(NAME)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    base = results["no capture"][0]
    for label, r in results.items():
        took = f", capture took {r[2]:.1f}s" if len(r) > 2 else ""
        print(f"{label:<34} {r[0]:8.0f} writes/s ({r[0] / base:.2f} of no capture), longest write stall "
              f"{r[1]:.0f} ms{took}")


if __name__ == "__main__":
    main()
