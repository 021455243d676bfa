#!/usr/bin/env python3
"""Instances per host: TPC-C-like throughput and latency with 1, 2 and 4 MariaDB instances
on one host, each under its own concurrent go-tpc load.

It brings up its own sandbox of four instances (the first loads the TPC-C data set
and the three others get it through replication, then are detached so that every
instance is independent), then for each instance count runs go-tpc on that many
instances at once and prints TPM (New-Order per minute, as tpmC), the average and
p99.9 of New-Order latency per count, and the per-instance efficiency: TPM per
instance at N instances over TPM of one instance alone. Averages are weighted by
transactions over the instances; p99.9 is the worst instance's (percentiles of
separate processes cannot be merged exactly).

go-tpc takes its password only on argv, so it connects as a passwordless account
limited to the `tpcc` database on this throwaway loopback sandbox. Everything it
started is stopped at the end.

    python bench/scaling.py [--counts 1,2,4] [--seconds 30] [--threads 2] [--warehouses 1]
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
        self.state = self.boxes.up(NAME, replicas=need - 1, buffer_pool_mb=a.pool_mb)
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

    def run_count(self, count: int) -> list[TpccResult]:
        s = self.args.seconds
        procs = [self.tpc(n).start(s, self.args.threads) for n in self.names[:count]]
        return [GoTpc.finish(p, s + 120) for p in procs]

    def run(self) -> dict:
        rows = []
        base = None
        for count in self.counts:
            results = self.run_count(count)
            row = scaling_row(count, results, base)
            if count == 1:
                base = row["tpm"]
                row["efficiency"] = 1.0
            rows.append(row)
            log(f"{count} instance(s): {row['tpm']:.0f} tpmC in total, {row['tpm_per_instance']:.0f} each, "
                f"New-Order avg {row['avg_ms']} ms, p99.9 {row['p999_ms']} ms")
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
    ap.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
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
    if args.report:
        html_path, json_path = write_report(model, args.report)
        print(f"report: {html_path} (numbers: {json_path})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
