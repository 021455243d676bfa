#!/usr/bin/env python3
"""Instances per host: TPC-C-like throughput and latency with 1, 5 and 10 MariaDB instances
on one host (the counts a fleet consolidates to), each under its own concurrent go-tpc load.

It brings up its own sandbox of as many instances as the largest count (the first loads
the TPC-C data set and the others get it through replication, then are detached so that
every instance is independent), then for each instance count runs go-tpc on that many
instances at once and prints TPM (New-Order per minute, as tpmC), the average and
p99.9 of New-Order latency per count, the ratio of the count's total TPM to one instance
alone, the per-instance efficiency (TPM per instance at N over TPM of one alone), and
what limits it on this host: the CPU's busy and iowait shares sampled from /proc/stat
during the run, against its cores, and the buffer pools against the memory available.
Averages are weighted by transactions over the instances; p99.9 is the worst instance's
(percentiles of separate processes cannot be merged exactly).

go-tpc takes its password only on argv, so it connects as a passwordless account
limited to the `tpcc` database on this throwaway loopback sandbox. Everything it
started is stopped at the end.

    python bench/scaling.py [--counts 1,5,10] [--seconds 30] [--threads 2] [--warehouses 1]
                            [--json] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.rehearsal.tpcc import GO_TPC_VERSION, GoTpc, TpccResult, find_go_tpc, scaling_row
from dbmigrate.report import model as m
from dbmigrate.report.model import from_evidence
from dbmigrate.report.tables import rich_table, scaling
from dbmigrate.report.write import check_report_path, write_report

NAME = "scalebench"
USER = "tpcc"
MAX_REPLICAS_AT_UP = 8


def cpu_times() -> list[int]:
    """The machine's CPU counters (user, nice, system, idle, iowait, ...) in ticks."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def cpu_share(before: list[int], after: list[int]) -> dict:
    d = [b - a for a, b in zip(before, after)]
    total = sum(d[:8]) or 1
    idle, iowait = d[3], d[4]
    return {"busy_pct": round(100 * (total - idle - iowait) / total, 1), "iowait_pct": round(100 * iowait / total, 1),
            "cores": os.cpu_count()}


def mem_available_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def limit_of(cpu: dict, count: int, threads: int, pool_mb: int) -> str:
    """What bounds this count on this host, from what was measured during its run."""
    load = f"{count * threads} go-tpc threads and {count} mariadbd on {cpu['cores']} cores"
    if cpu["busy_pct"] >= 85:
        return f"CPU ({cpu['busy_pct']:.0f}% busy: {load}, go-tpc's own processes on the same cores)"
    if cpu["iowait_pct"] >= 20:
        return f"disk (iowait {cpu['iowait_pct']:.0f}%, CPU {cpu['busy_pct']:.0f}% busy; {load})"
    if count * pool_mb > 0.8 * mem_available_mb():
        return f"memory ({count} x {pool_mb} MB buffer pools against {mem_available_mb()} MB available)"
    return (f"neither CPU ({cpu['busy_pct']:.0f}% busy) nor disk (iowait {cpu['iowait_pct']:.0f}%) saturated: "
            "commit and lock waits inside each instance")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.go_tpc = find_go_tpc()  # before anything starts: a missing binary is one line
        self.home = Path(tempfile.mkdtemp(prefix="dbm-scalebench-"))
        os.environ["DBMIGRATE_HOME"] = str(self.home)
        self.boxes = Sandboxes(progress=log)
        self.counts = args.counts

    def setup(self) -> None:
        a = self.args
        need = max(self.counts)
        t0 = time.monotonic()
        # A sandbox starts with at most 8 replicas: the others are added as replicas of the first.
        self.state = self.boxes.up(NAME, replicas=min(need - 1, MAX_REPLICAS_AT_UP), buffer_pool_mb=a.pool_mb)
        for i in range(min(need - 1, MAX_REPLICAS_AT_UP) + 1, need):
            self.boxes.add_instance(NAME, f"{NAME}-{i + 1}", replica_of=f"{NAME}-1", buffer_pool_mb=a.pool_mb)
        self.state = self.boxes.find(NAME)
        self.inv = load_inventory(self.state.inventory_file)
        self.names = [f"{NAME}-{i + 1}" for i in range(need)]
        with self.inv.open(self.names[0]) as p:
            p.execute(f"CREATE DATABASE IF NOT EXISTS {USER}")
            p.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1'")
            p.execute(f"GRANT ALL ON {USER}.* TO '{USER}'@'127.0.0.1'")
        log(f"loading {a.warehouses} warehouse(s) with go-tpc on {self.names[0]}")
        self.tpc(self.names[0]).prepare(threads=2)
        with self.inv.open(self.names[0]) as p:
            pos = Inspector(p).gtid_binlog_pos()
        for name in self.names[1:]:  # replicas got the data set: detach them, each is on its own now
            with self.inv.open(name) as r:
                r.read_timeout = 900
                if not Inspector(r).wait_for_gtid(pos, 900):
                    raise SystemExit(f"{name} did not apply the data set within 900 s")
                r.execute("STOP SLAVE")
                r.execute("RESET SLAVE ALL")
                r.execute("SET GLOBAL read_only=OFF")
        log(f"{need} instances with the TPC-C data set in {time.monotonic() - t0:.0f}s")

    def tpc(self, name: str) -> GoTpc:
        return GoTpc("127.0.0.1", self.state.instances[name].port, USER, USER, self.args.warehouses, self.go_tpc)

    def run_count(self, count: int) -> tuple[list[TpccResult], dict]:
        s = self.args.seconds
        before = cpu_times()
        procs = [self.tpc(n).start(s, self.args.threads) for n in self.names[:count]]
        results = [GoTpc.finish(p, s + 120) for p in procs]
        return results, cpu_share(before, cpu_times())

    def run(self) -> dict:
        rows = []
        base = None
        for count in self.counts:
            results, cpu = self.run_count(count)
            row = scaling_row(count, results, base)
            if count == 1:
                base = row["tpm"]
                row["efficiency"] = 1.0
            row["ratio_to_one"] = round(row["tpm"] / base, 2) if base else None
            row["cpu"] = cpu
            row["limited_by"] = limit_of(cpu, count, self.args.threads, self.args.pool_mb)
            rows.append(row)
            log(f"{count} instance(s): {row['tpm']:.0f} tpmC in total ({row['ratio_to_one']}x one instance), "
                f"{row['tpm_per_instance']:.0f} each, New-Order avg {row['avg_ms']} ms, p99.9 {row['p999_ms']} ms; "
                f"{row['limited_by']}")
        return {"workload": f"go-tpc tpcc ({GO_TPC_VERSION}), {self.args.warehouses} warehouse(s) per "
                            f"instance, {self.args.threads} threads per instance, {self.args.seconds} s per count, "
                            f"{self.args.pool_mb} MB buffer pool each, {os.cpu_count()} cores; TPM is New-Order "
                            "per minute (tpmC); latency is New-Order's; p99.9 is the worst instance's",
                "rows": rows}

    def close(self) -> None:
        try:
            self.boxes.down(NAME)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[1, 5, 10])
    ap.add_argument("--seconds", type=int, default=30, help="go-tpc run time per instance count")
    ap.add_argument("--threads", type=int, default=2, help="go-tpc threads per instance")
    ap.add_argument("--warehouses", type=int, default=1)
    ap.add_argument("--pool-mb", type=int, default=256)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--report", type=Path, help="write an HTML report (and its JSON) to this file")
    args = ap.parse_args()
    if args.counts[0] != 1:
        ap.error("--counts must start with 1: efficiency is relative to one instance alone")
    try:
        if args.report:
            check_report_path(args.report)
        bench = Bench(args)
    except DbmigrateError as e:
        print(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""), file=sys.stderr)
        return 2
    try:
        bench.setup()
        result = bench.run()
    finally:
        bench.close()
    model = from_evidence("Instances per host: TPC-C-like scaling", {m.SCALING: result})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        from rich.console import Console

        Console().print(rich_table(scaling(model)))
        print(f"{'instances':>9}  {'TPM':>9}  {'x one':>6}  {'avg ms':>7}  {'p99.9 ms':>8}  limited by")
        for r in result["rows"]:
            print(f"{r['instances']:>9}  {r['tpm']:>9,.0f}  {r['ratio_to_one'] or 0:>6.2f}  {r['avg_ms'] or 0:>7.1f}  "
                  f"{r['p999_ms'] or 0:>8.1f}  {r['limited_by']}")
    if args.report:
        html_path, json_path = write_report(model, args.report)
        print(f"report: {html_path} (numbers: {json_path})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
