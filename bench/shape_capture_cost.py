#!/usr/bin/env python3
"""What `shape capture` costs the primary: write throughput and the longest write stall.

A throwaway sandbox (a primary and one replica) gets the fixture schema with every hazard
(tests/fixtures/shapes/ca.sql) and TABLES copies of its tables grown to ROWS rows; a writer
inserts on the primary as fast as one session can, from a process of its own. Each capture is paired with
windows of the same length with no capture right before and right after it (a shared host's
load drifts), and repeated --rounds times: writes per second against its paired window, and the longest
gap between two acknowledged writes, for `shape capture` read from the primary itself
(--server, the worst case), read from the replica (the default), and with a digested query
window of --seconds on the primary. Medians of the ratios, worst of the stalls; the host's load
average is printed with them.

    python bench/shape_capture_cost.py [--rows 20000] [--tables 20] [--seconds 5] [--rounds 3] [--share F] [--json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import multiprocessing
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


def _write(inventory_file: str, server: str, stop, acks_file: str) -> None:
    inv = load_inventory(Path(inventory_file))
    with inv.open(server) as srv, open(acks_file, "a", buffering=1) as out:
        while not stop.is_set():
            srv.execute("INSERT INTO ca.audit_log VALUES (NOW(6), 'bench', 'w')")
            out.write(f"{time.monotonic():.6f}\n")  # a line at a time: a file never waits on a reader


class Writer:
    """The primary's writer in a process of its own, so that the capture's own Python work
    (column statistics) cannot hold it back through this process's GIL: what is measured is the
    server's and the host's share. Its ack times (CLOCK_MONOTONIC, one clock for every process)
    go to a file that is read when a window is measured."""

    def __init__(self, inventory_file: Path, server: str):
        self.acks_file = HOME / "writer-acks.txt"
        self.stop_flag = multiprocessing.Event()
        self.proc = multiprocessing.Process(target=_write, args=(str(inventory_file), server, self.stop_flag,
                                                                 str(self.acks_file)), daemon=True)

    def start(self) -> None:
        self.proc.start()

    def join(self, timeout: float) -> None:
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()

    def window(self, t0: float, t1: float) -> tuple[float, float]:
        time.sleep(0.1)  # the last line before t1 written
        acks = [float(x) for x in self.acks_file.read_text().split()]
        times = [t for t in acks if t0 <= t <= t1]
        gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
        return len(times) / max(t1 - t0, 1e-9), gap * 1000


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the servers' processes used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def tool_cpu_s() -> float:
    """CPU seconds of this process's capture thread and the programs it ran (pt-query-digest)."""
    import resource

    return time.thread_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + \
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--share", type=float, default=None, help="the capture's --share (default: its own)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    # A capture that can sample its slow-log window (log_slow_rate_limit) is also measured so.
    sampling = "sample" in inspect.signature(shape_use.capture).parameters
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
        w = Writer(state.inventory_file, primary)
        servers = boxes.pids(NAME)
        w.start()
        results: dict[str, list] = {}
        try:
            time.sleep(1)
            took: dict[str, float] = {}
            for _ in range(args.rounds):
                for label, kw in (("capture read from the primary", {"server": primary}),
                                  ("capture read from the replica", {}),
                                  (f"capture + {args.seconds:g}s digest window", {"seconds": args.seconds}),
                                  *([(f"capture + {args.seconds:g}s window 1 in 10",
                                      {"seconds": args.seconds, "sample": 10})] if sampling else [])):
                    # A window of no capture right before and one right after, each as long as the
                    # capture (its length from the previous round): a shared host's load drifts.
                    pre = took.get(label, 5.0)
                    c_pre = cpu_s(servers)
                    time.sleep(pre)
                    c0, k0 = cpu_s(servers), tool_cpu_s()
                    t0 = time.monotonic()
                    if args.share is not None:
                        kw = {**kw, "share": args.share}
                    shape, _ = shape_use.capture(state.inventory_file, NAME, HOME / label.replace(" ", "-"), **kw)
                    t1 = time.monotonic()
                    c1, k1 = cpu_s(servers), tool_cpu_s()
                    took[label] = t1 - t0
                    time.sleep(0.5)
                    b0, c_b0 = time.monotonic(), cpu_s(servers)
                    time.sleep(t1 - t0)
                    c_b1 = cpu_s(servers)
                    # The servers' CPU beyond what they used per second without a capture (the writer's share).
                    idle_rate = ((c0 - c_pre) + (c_b1 - c_b0)) / (pre + (t1 - t0))
                    server_extra = (c1 - c0) - idle_rate * (t1 - t0)
                    before, after = w.window(t0 - pre, t0 - 0.05), w.window(b0, time.monotonic())
                    during = w.window(t0, t1)
                    results.setdefault(label, []).append({
                        "writes_per_s": during[0], "stall_ms": during[1],
                        "paired_writes_per_s": (before[0] + after[0]) / 2, "paired_stall_ms": max(before[1], after[1]),
                        "took_s": t1 - t0, "paced": getattr(shape, "paced", None), "window": shape.digest_source,
                        "tool_cpu_s": k1 - k0, "server_cpu_extra_s": server_extra})
        finally:
            w.stop_flag.set()
            w.join(5)
    finally:
        boxes.down(NAME)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"load_average_before": load_before, "load_average": load, "results": results}, indent=2))
        return
    print(f"host load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores "
          f"(before the sandbox: {load_before[0]:.1f}); {args.rounds} round(s)")
    for label, rounds in results.items():
        ratios = sorted(r["writes_per_s"] / max(r["paired_writes_per_s"], 1e-9) for r in rounds)
        print(f"{label:<34} writes/s {statistics.median(ratios):.2f} of the paired no-capture window "
              f"(rounds {', '.join(f'{x:.2f}' for x in ratios)}); longest write stall "
              f"{max(r['stall_ms'] for r in rounds):.0f} ms (no capture: {max(r['paired_stall_ms'] for r in rounds):.0f} ms); "
              f"capture took {statistics.median(r['took_s'] for r in rounds):.1f} s")
        if "tool_cpu_s" in rounds[0]:
            tool = statistics.median(r["tool_cpu_s"] for r in rounds)
            extra = statistics.median(r["server_cpu_extra_s"] for r in rounds)
            took = statistics.median(r["took_s"] for r in rounds)
            print(f"{'':<34} CPU: the tool {tool:.2f} s, the servers {extra:+.2f} s beyond their no-capture rate; "
                  f"together {(tool + max(extra, 0)) / took * 100:.0f}% of one core over the capture")
        if rounds[0].get("paced"):
            p = rounds[0]["paced"]
            print(f"{'':<34} paced: {p['reads']} reads, {p['busy_s']:.1f} s reading and {p['paused_s']:.1f} s paused "
                  f"(share {p['share']:g})")
        if rounds[0].get("window"):
            print(f"{'':<34} query window: {rounds[0]['window']}")


if __name__ == "__main__":
    main()
