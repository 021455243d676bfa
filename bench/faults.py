#!/usr/bin/env python3
"""Fault matrix: dbmigrate cutovers on a real sandbox under load, with a fault injected.

Per scenario (`--list` shows them): a 3-server sandbox behind HAProxy, sysbench (2 threads),
the zero-loss verifier writing through HAProxy, a monitor polling @@read_only on every server
every 10 ms over its unix socket; `dbmigrate run` paused at a named point (kill -9, SIGTERM, SIGINT at every step
boundary and inside fence, catch-up, open, flip, repoint and reverse; the candidate frozen; the
old primary killed; HAProxy killed; a long statement at the fence; bad settings), then at most
one `dbmigrate resume` or `rollback`, then the health check. Printed per scenario: lost writes
per server, moments with two writable servers (2w), the longest time with no writable server
(ms), the application's longest wait for an acknowledged write through HAProxy (app gap, ms),
the bound the playbook allows for both (ms), healthy, the operator's action, how the run ended
(done, rolled_back, refused), verdict.

Faults of the network and of the tool's process (rows `*/partition-*`, `*/freeze-tool/*`):
for each statement that changes a role (promote: fence, open; schema swap: fence, open and
the switch back's fence and open), the old primary's port, the candidate's port, or only
the connection that carried the statement dropped with iptables from that statement's first
packet for 0.5x, 1x and 1.5x its bound, then healed; the tool frozen (SIGSTOP) right after
the statement for 2x its bound, then continued; the candidate's replication connection cut
before the fence; a table-copying DDL and a 200,000-row transaction in flight at the fence.
Consolidation (`consolidate/*`): the first old server's fence and the open of its new instance, the
old server's port, the instance's port or only the tool's connection dropped for 0.5x, 1x, 1.5x the
statement's bound, the tool frozen right after it for 2x; old servers built once and reused, each row
on fresh instances and ended rolled back. `promote/disk-full-candidate/after-open/rollback`: the
candidate's datadir on a tmpfs of its own, filled right after the open.
kill -9 with a statement in flight (`*/kill9-in-flight/*`): at every mutating step of promote (fence,
open, router flip, reset, repoint, reverse), the schema swap (DDL, fence, open, the switch back's fence
and open) and consolidation's per-server cutover (fence, route change, open, reverse), the run paused
right before the step's statement, its target cut off (port dropped both ways; HAProxy frozen for the
flip), the statement sent into the cut, the tool killed 1.5 s later, the cut healed 7 s after the send,
then `rollback`, `resume` or a new `run` of the same playbook.
The relay in the path (`promote/kill-relay/*`, `promote/freeze-relay/*`): the cluster's router is the
relay (relay/, router kind `relay`), sysbench and the verifier write through it, promote holds its
sessions (hold_new_connections); the relay is killed -9 after the hold, inside the fence, with the move in
flight (frozen with the move in its socket, then killed), after the move, after the open, and started
again with the same flags (its -state file keeps the backend of its last move) at once or 5 s later; or
frozen at the move for 2.5 s or 10 s. Needs Go (the relay is built once per version of its sources).
The watcher reads @@read_only every 10 ms over unix sockets (a partition does not blind it)
and every row is judged until --after-exit seconds after the tool and the operator's
command exited (default 30): a statement given up on may still land.

    python bench/faults.py [--list] [--only PATTERNS] [--fast] [--json] [--rows-file F] [--after-exit S]

--only takes comma-separated ids or globs: `--only 'promote/kill9/*'`, `--only '*/in-fence/*'`,
`--only '*/partition-*,*/freeze-tool/*'`. The whole matrix takes about three hours on 2 cores
(mostly the 30 s after each exit); --fast is the test suite's subset of the process faults.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time

from dbmigrate.rehearsal.faultmatrix import FaultCluster, all_scenarios, netfault, run_scenario, select
from dbmigrate.rehearsal.faultmatrix.consolidate_rows import run_consolidate_scenario, shard_cluster
from dbmigrate.rehearsal.faultmatrix.disk import run_disk_full_scenario
from dbmigrate.rehearsal.sandbox.manager import Sandboxes


def lost_cell(r) -> str:
    shown = {n.rsplit("-", 1)[-1]: k for n, k in r.lost.items()}
    return " ".join(f"{n}:{k}" for n, k in sorted(shown.items())) or "-"


def table(results) -> str:
    head = (f"{'scenario':<56} {'lost/server':<12} {'2w':>2} {'no-writer':>9} {'app gap':>7} {'bound':>6} "
            f"{'healthy':>7} {'operator':<8} {'end':<12} verdict")
    rows = [head, "-" * len(head)]
    for r in results:
        gap = f"{r.writer_gap_ms:.0f}" if r.writer_gap_ms is not None else "-"
        rows.append(f"{r.id:<56} {lost_cell(r):<12} {r.two_writable:>2} {r.longest_no_writer_ms:>9.0f} {gap:>7} "
                    f"{r.bound_ms:>6.0f} {'yes' if r.healthy else 'NO':>7} {r.action:<8} {r.end or '-':<12} {r.verdict}")
        if r.verdict == "FAIL":
            rows.append(f"{'':<4}why: {'; '.join(r.why)[:400]}")
        elif r.verdict == "SAFE":
            rows.append(f"{'':<4}resume ended rolled back: {r.details.get('recovery_summary', '')[:300]}")
    failed = sum(r.verdict == "FAIL" for r in results)
    safe = sum(r.verdict == "SAFE" for r in results)
    rows.append(f"{len(results) - failed} passed, {failed} failed" + (f" ({safe} of the passed: SAFE)" if safe else ""))
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the scenario ids and exit")
    ap.add_argument("--only", help="comma-separated scenario ids or glob patterns")
    ap.add_argument("--fast", action="store_true", help="only the subset the test suite runs")
    ap.add_argument("--json", action="store_true", help="one JSON document with every result")
    ap.add_argument("--rows-file", help="append each row's result to this file as one JSON line as soon as it is "
                                        "judged (kept when the matrix is stopped part way)")
    ap.add_argument("--after-exit", type=float, default=30.0,
                    help="seconds each row is still judged after the tool and the operator's command exited")
    args = ap.parse_args()
    picked = select(all_scenarios(), args.only, args.fast)
    if args.list:
        for s in picked:
            print(s.id + ("  (fast)" if s.fast else ""))
        return 0
    if not picked:
        print(f"no scenario matches {args.only!r} (see --list)", file=sys.stderr)
        return 2
    if "DBMIGRATE_HOME" not in os.environ:  # a private home, removed at the end
        os.environ["DBMIGRATE_HOME"] = tempfile.mkdtemp(prefix="dbm-faults-")
        atexit.register(shutil.rmtree, os.environ["DBMIGRATE_HOME"], ignore_errors=True)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    boxes = Sandboxes()
    cluster = FaultCluster(boxes, f"faults{os.getpid() % 10000}", say)
    shards = shard_cluster(boxes, f"cfaults{os.getpid() % 10000}", say)  # consolidation's old servers
    results = []
    t0 = time.monotonic()
    try:
        for sc in picked:
            if sc.procedure == "consolidate":
                r = run_consolidate_scenario(shards, sc, say, after_exit_s=args.after_exit)
            elif sc.fault == "disk-full-candidate":
                r = run_disk_full_scenario(cluster, sc, say, after_exit_s=args.after_exit)
            else:
                r = run_scenario(cluster, sc, say, after_exit_s=args.after_exit)
            results.append(r)
            if args.rows_file:
                with open(args.rows_file, "a") as f:
                    f.write(json.dumps(r.to_dict()) + "\n")
            say(f"  {r.verdict} in {r.duration_s:.0f}s: lost {r.lost_total}, two-writable {r.two_writable}, "
                f"no-writer {r.longest_no_writer_ms:.0f} ms, app gap {r.writer_gap_ms} ms, bound {r.bound_ms:.0f} ms, healthy {r.healthy}, "
                f"operator {r.action}" + (f"; {'; '.join(r.why)[:300]}" if r.why else ""))
    finally:
        cluster.down()
        shards.down()
        left = netfault.remove_leftovers()
        if left:
            say(f"removed {left} fault rule(s) a scenario left behind")
    if args.json:
        print(json.dumps({"results": [r.to_dict() for r in results], "seconds": round(time.monotonic() - t0),
                          "judged_after_exit_s": args.after_exit}, indent=2))
    else:
        print(table(results))
        print(f"{len(results)} scenario(s) in {time.monotonic() - t0:.0f} s")
    return 0 if all(r.verdict != "FAIL" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
