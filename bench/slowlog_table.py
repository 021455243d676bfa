#!/usr/bin/env python3
"""What a slow-log window costs the primary's throughput, written to a file
(hosts the tool can enter) or to mysql.slow_log (hosts it cannot: managed
services, read back over SQL).

Brings up its own one-server sandbox, fills sysbench tables, then runs the same
sysbench load (oltp_read_write, fixed threads) in rounds: no window, a file
window, a table window, each for --seconds, interleaved so that drift hits all
three alike. A window is the real one (digest capture's SlowLogWindow with
long_query_time=0); after each window the log is read and digested the way the
tool does, and that time is printed too (the table is read over SQL and emptied).

    python bench/slowlog_table.py [--seconds 10] [--rounds 3] [--threads 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.digest import window as capture
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.sysbench import Sysbench

NAME = "slowlogbench"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="dbm-bench-slowlog-"))
    os.environ["DBMIGRATE_HOME"] = str(home)
    boxes = Sandboxes()
    tps: dict[str, list[float]] = {"none": [], "file": [], "table": []}
    p95: dict[str, list[float]] = {"none": [], "file": [], "table": []}
    digest_s: dict[str, list[float]] = {"file": [], "table": []}
    statements: dict[str, list[int]] = {"file": [], "table": []}
    try:
        state = boxes.up(NAME, 0, buffer_pool_mb=256)
        inv = load_inventory(state.inventory_file)
        primary_name = f"{NAME}-1"
        spec = inv.find_server(primary_name)[1]
        load = Sysbench(spec.host, spec.port, inv.app_credentials(NAME), workload="oltp_read_write",
                        tables=4, table_size=20_000, threads=a.threads)
        load.prepare()
        load.run(3)  # warm the pool before the first measured round
        for _ in range(a.rounds):
            for mode in ("none", "file", "table"):
                server = inv.open(primary_name)
                window = None
                if mode != "none":
                    window = capture.SlowLogWindow(server, source=mode)
                    window.open()
                try:
                    r = load.run(a.seconds)
                finally:
                    if window is not None:
                        window.close()
                tps[mode].append(r.tps)
                p95[mode].append(r.latency_p95_ms or 0.0)
                if window is not None:
                    t = time.perf_counter()
                    saved = window.saved_settings or {}
                    if mode == "table":
                        log, n = capture.read_table_window(server, saved["since"], saved.get("until"),
                                                           home / "table.slow.log")
                        capture.release_table_window(server, saved)
                    else:
                        log = Path(window.log_file or "")
                        n = sum(1 for line in log.open() if line.startswith("# Query_time"))
                    capture.digest_slow_log(log)
                    digest_s[mode].append(time.perf_counter() - t)
                    statements[mode].append(n)
                    log.unlink(missing_ok=True)
                server.close()
    finally:
        boxes.down(NAME)
        shutil.rmtree(home, ignore_errors=True)
    med = {m: statistics.median(v) for m, v in tps.items()}
    res = {"seconds": a.seconds, "rounds": a.rounds, "threads": a.threads,
           "tps": {m: round(v, 1) for m, v in med.items()},
           "p95_ms": {m: round(statistics.median(v), 2) for m, v in p95.items()},
           "tps_ratio_to_none": {m: round(med[m] / med["none"], 3) for m in ("file", "table")},
           "read_and_digest_s": {m: round(statistics.median(v), 2) for m, v in digest_s.items()},
           "statements_per_window": {m: int(statistics.median(v)) for m, v in statements.items()}}
    if a.json:
        print(json.dumps(res))
        return
    print(f"sysbench oltp_read_write, {a.threads} threads, {a.seconds}s per window, median of {a.rounds} rounds")
    print(f"  {'':22s} {'tps':>9s} {'p95 ms':>8s} {'vs none':>8s} {'statements':>11s} {'read+digest':>12s}")
    for m, label in (("none", "no window"), ("file", "window to a file"), ("table", "window to the table")):
        ratio = "" if m == "none" else f"{res['tps_ratio_to_none'][m]:8.3f}"
        n = "" if m == "none" else f"{res['statements_per_window'][m]:11d}"
        d = "" if m == "none" else f"{res['read_and_digest_s'][m]:11.2f}s"
        print(f"  {label:22s} {res['tps'][m]:9.1f} {res['p95_ms'][m]:8.2f} {ratio:>8s} {n:>11s} {d:>12s}")


if __name__ == "__main__":
    main()
