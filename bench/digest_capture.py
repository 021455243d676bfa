#!/usr/bin/env python3
"""What a digest capture costs the primary: its throughput and the application's longest write
stall, with no capture, with a full capture (long_query_time=0, every statement logged) and
with a sampled one (log_slow_rate_limit: 1 in N statements logged), on one primary; with
--performance-schema the primary starts with performance_schema on and a fourth kind reads its
statement digests at the start and end of the window (nothing logged, no setting changed). What
performance_schema costs by being on is the "none" figure of such a run against one without it.

The load: sysbench oltp_write_only, 2 threads, unthrottled (its transactions per second are
the throughput figure), and the application's writer in a process of its own through HAProxy
(one write every ~1 ms; its longest gap between acknowledgements is the stall figure).
Phases alternate (none, full, sampled, none, full, sampled, ...) so that drift of a shared
machine spreads over all of them. The digest itself (pt-query-digest of the captured log)
runs after each phase, not during it: it runs where the tool runs, and its time is reported
beside.

With --wire a fifth kind reads the wire (tcpdump of the primary's port, dissected by tshark; no
setting changed), and the prepared-statement application of the tests (binary protocol, its own
long_query_time=11.2 per connection, unqualified tables) runs beside the load: each window's
classes seen, the application's classes seen and its prepared executions seen are reported.

Targets: a capture costs <= 5% of the throughput and no write stall over 10 ms. --rate TPS throttles
sysbench to the rehearsal's load (300 tps there) instead: its throughput is then fixed, and what a
capture costs shows as sysbench's p95 latency and the writer's stalls.

    python bench/digest_capture.py [--seconds 10] [--repeat 2] [--sample 10] [--performance-schema] [--wire] [--rate TPS] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_THROUGHPUT_COST_PCT, TARGET_STALL_MS = 5.0, 10.0


def longest_gap_ms(acks, start: float, end: float) -> float:
    best = 0.0
    for prev, cur in zip(acks, acks[1:]):
        if cur.mono >= start and prev.mono <= end:
            best = max(best, (cur.mono - prev.mono) * 1000)
    return best


def app_seen(digest, source: dict | None = None) -> dict:
    """What a window saw of the prepared-statement application (its table is pa_orders)."""
    mine = [c for c in digest.classes if "pa_orders" in c.fingerprint.lower()]
    prepared = (source or {}).get("prepared_executions")
    return {"classes_seen": len(digest.classes), "app_classes_seen": len(mine),
            "prepared_executions_seen": prepared if prepared is not None else sum(c.count for c in mine)}


def run_bench(seconds: float, repeat: int, sample: int, say, performance_schema: bool = False,
              rate: int | None = None, wire: bool = False) -> dict:
    from dbmigrate.config import load_inventory
    from dbmigrate.digest.statement_window import capture_statement_window
    from dbmigrate.digest.window import SlowLogWindow, digest_slow_log, LocalFileReader
    from dbmigrate.rehearsal.sandbox import haproxy
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes
    from dbmigrate.rehearsal.sysbench import Sysbench
    from writer_process import WriterProcess

    boxes = Sandboxes()
    name = f"digcap{os.getpid() % 10000}"
    extra = {"performance_schema": "ON",
             "performance_schema_consumer_events_statements_history": "ON"} if performance_schema else None
    boxes.up(name, 0, buffer_pool_mb=128, extra=extra)
    writer = app = None
    try:
        haproxy.start(boxes, name)
        state = boxes.find(name)
        inv = load_inventory(state.inventory_file)
        load = Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=2, table_size=2000, threads=2)
        load.prepare()
        writer = WriterProcess(state.inventory_file, name, interval_s=0.001, retry_pause_s=0.0005)
        writer.start()
        writer.wait_for_acks(50)
        if wire:
            from dbmigrate.digest.wire_window import capture_wire_window
            from dbmigrate.hosts import host_for
            from tests.fixtures.prepared_app import PreparedApp

            spec = inv.cluster(name).servers[f"{name}-1"]
            creds = inv.app_credentials(name)
            app = PreparedApp(spec.host, spec.port, creds.user, creds.password or "", rows=5000, threads=1,
                              pause_s=0.005)
            app.setup()
            app.start()
        kinds = ["none", "full", f"sampled 1/{sample}"] + (["performance_schema"] if performance_schema else []) \
            + (["wire"] if wire else [])
        phases: list[dict] = []
        work = Path(os.environ["DBMIGRATE_HOME"]) / "digest-bench"
        work.mkdir(parents=True, exist_ok=True)
        for r in range(repeat):
            for kind in kinds:
                server = inv.open(f"{name}-1")
                window = None
                if kind == "wire":
                    import threading

                    box: dict = {}
                    reader = threading.Thread(target=lambda: box.update(w=capture_wire_window(
                        server, host_for(inv, f"{name}-1"), seconds, work / "wire.digest.json")), daemon=True)
                    t0 = time.monotonic()
                    reader.start()
                    result = load.run(time_s=int(seconds), rate=rate)
                    t1 = time.monotonic()
                    reader.join(timeout=seconds + 60)
                    got = box.get("w")
                    server.close()
                    time.sleep(0.3)
                    stall = longest_gap_ms(writer.acks, t0, t1)
                    seen = app_seen(got.digest, got.source) if got else {}
                    if got:
                        seen.update(dropped_by_kernel=got.source.get("dropped_by_kernel"),
                                    dissection_unfinished=got.source.get("dissection_unfinished"))
                    phases.append({"kind": kind, "round": r + 1, "tps": round(result.tps, 1),
                                   "sysbench_p95_ms": result.latency_p95_ms, "longest_write_stall_ms": round(stall, 1),
                                   "statements_logged": got.digest.query_count if got else None, "digest_s": 0.0,
                                   **seen})
                    say(f"{kind:>16} (round {r + 1}): {result.tps:.0f} tps, longest write stall {stall:.1f} ms, {seen}")
                    continue
                if kind == "performance_schema":
                    # The window reads the digests at its start and end while the load runs.
                    import threading

                    box: dict = {}
                    reader = threading.Thread(target=lambda: box.update(w=capture_statement_window(
                        server, seconds, work / "ps.digest.json")), daemon=True)
                    t0 = time.monotonic()
                    reader.start()
                    result = load.run(time_s=int(seconds), rate=rate)
                    t1 = time.monotonic()
                    reader.join(timeout=seconds + 30)
                    logged = box["w"].digest.query_count if "w" in box else None
                    server.close()
                    time.sleep(0.3)
                    stall = longest_gap_ms(writer.acks, t0, t1)
                    seen = app_seen(box["w"].digest) if "w" in box else {}
                    if seen and "w" in box:  # MariaDB: prepared executions are in no digest
                        seen["prepared_executions_seen"] = 0 if box["w"].unseen_prepared else seen["prepared_executions_seen"]
                    phases.append({"kind": kind, "round": r + 1, "tps": round(result.tps, 1),
                                   "sysbench_p95_ms": result.latency_p95_ms, "longest_write_stall_ms": round(stall, 1), "statements_logged": logged,
                                   "digest_s": 0.0, **(seen if wire else {})})
                    say(f"{kind:>16} (round {r + 1}): {result.tps:.0f} tps, longest write stall {stall:.1f} ms, "
                        f"{logged} statements in the digests' difference")
                    continue
                if kind != "none":
                    window = SlowLogWindow(server, sample=1 if kind == "full" else sample)
                    window.open()
                t0 = time.monotonic()
                result = load.run(time_s=int(seconds), rate=rate)
                t1 = time.monotonic()
                logged = digest_s = None
                seen = {}
                if window is not None:
                    window.close()
                    local = LocalFileReader().fetch(window.log_file, work)
                    started = time.monotonic()
                    digest = digest_slow_log(local, work / "capture.digest.json", duration_s=t1 - t0)
                    digest_s = round(time.monotonic() - started, 2)
                    logged = digest.query_count
                    seen = app_seen(digest) if wire else {}
                    local.unlink(missing_ok=True)
                server.close()
                time.sleep(0.3)
                stall = longest_gap_ms(writer.acks, t0, t1)
                phases.append({"kind": kind, "round": r + 1, "tps": round(result.tps, 1),
                               "sysbench_p95_ms": result.latency_p95_ms, "longest_write_stall_ms":
                               round(stall, 1), "statements_logged": logged, "digest_s": digest_s, **seen})
                say(f"{kind:>16} (round {r + 1}): {result.tps:.0f} tps, longest write stall {stall:.1f} ms"
                    + (f", {logged} statements logged, digested in {digest_s} s" if logged is not None else ""))
        if app is not None:
            app.stop()
            app_total = app.total()
        report = writer.check(catch_up_timeout_s=30)
        writer = None
        by_kind = {}
        for kind in kinds:
            mine = [p for p in phases if p["kind"] == kind]
            p95s = [p["sysbench_p95_ms"] for p in mine if p["sysbench_p95_ms"] is not None]
            by_kind[kind] = {"tps": round(statistics.median(p["tps"] for p in mine), 1),
                             "sysbench_p95_ms": round(statistics.median(p95s), 2) if p95s else None,
                             "longest_write_stall_ms": max(p["longest_write_stall_ms"] for p in mine),
                             "statements_logged": ([p["statements_logged"] for p in mine]
                                                   if kind != "none" else None),
                             "digest_s": [p["digest_s"] for p in mine] if kind != "none" else None,
                             **({k: [p.get(k) for p in mine] for k in ("classes_seen", "app_classes_seen",
                                                                     "prepared_executions_seen")}
                                if wire and kind != "none" else {})}
        base = by_kind["none"]["tps"]
        for kind in kinds[1:]:
            by_kind[kind]["throughput_cost_pct"] = round((base - by_kind[kind]["tps"]) / base * 100, 1) if base else None
        return {"seconds": seconds, "repeat": repeat, "sample": sample, "performance_schema": performance_schema,
                "rate": rate, "wire": wire, "app_executions": app_total if wire else None,
                "by_kind": by_kind, "phases": phases,
                "lost_writes": report.lost_total, "load_average_1min": round(os.getloadavg()[0], 2)}
    finally:
        if app is not None:
            app.stop()
        if writer is not None:
            writer.kill()
        boxes.down(name)


def render(out: dict) -> None:
    for kind, k in out["by_kind"].items():
        cost = k.get("throughput_cost_pct")
        print(f"{kind:>16}: {k['tps']} tps (median), sysbench p95 {k.get('sysbench_p95_ms')} ms"
              + (f", {cost}% below no capture (target <= {TARGET_THROUGHPUT_COST_PCT}%)" if cost is not None else "")
              + f"; longest write stall {k['longest_write_stall_ms']} ms (target <= {TARGET_STALL_MS} ms)"
              + (f"; logged {k['statements_logged']}, digested in {k['digest_s']} s" if k["statements_logged"] else "")
              + (f"; classes seen {k['classes_seen']}, the prepared application's classes {k['app_classes_seen']}, "
                 f"its prepared executions {k['prepared_executions_seen']}" if "classes_seen" in k else ""))
    print(f"lost writes: {out['lost_writes']}; load average at the end: {out['load_average_1min']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sample", type=int, default=10)
    ap.add_argument("--performance-schema", action="store_true",
                    help="start the primary with performance_schema on and measure its digest window too")
    ap.add_argument("--wire", action="store_true",
                    help="also a wire window, with the prepared-statement application running beside the load")
    ap.add_argument("--rate", type=int, default=None, help="throttle sysbench to this many tps")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if "DBMIGRATE_HOME" not in os.environ:  # a private home, removed at the end
        os.environ["DBMIGRATE_HOME"] = tempfile.mkdtemp(prefix="dbm-bench-")
        import atexit

        atexit.register(shutil.rmtree, os.environ["DBMIGRATE_HOME"], ignore_errors=True)
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    out = run_bench(args.seconds, args.repeat, args.sample, say, args.performance_schema, args.rate, args.wire)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        render(out)
    return 0 if out["lost_writes"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
