#!/usr/bin/env python3
"""Query latency on a source server while a background copy reads it, beside the same load without.

The copy is the one consolidation seeds an instance with: `mariadb-dump --single-transaction`
of the data set piped into `mariadb` on a second instance (credentials in private
defaults files). The load is point lookups by a secondary index from two client
threads, measured per query. Windows alternate (without, with, without, with ...)
so both cases see the same background noise of the machine; p99.9, p99 and the
average are over all queries of each case. The buffer pool is smaller than the
data set, so the copy's scan competes with the lookups for it, as on a real source.

    python bench/background_copy.py [--rows 300000] [--tables 3] [--seconds 10] [--rounds 2]
                                    [--json] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.credentials import private_defaults_file
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.procedures.consolidate.seed import dump_command, import_command
from dbmigrate.rehearsal.readload import ReadLoad, create_orders
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.report import model as m
from dbmigrate.report.model import from_evidence
from dbmigrate.report.series import per_second_latency, summarize_ms
from dbmigrate.report.tables import background_copy, rich_table
from dbmigrate.report.write import check_report_path, write_report

NAME = "copybench"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.home = Path(tempfile.mkdtemp(prefix="dbm-copybench-"))
        os.environ["DBMIGRATE_HOME"] = str(self.home)
        self.boxes = Sandboxes(progress=log)
        self.source, self.target = f"{NAME}-1", f"{NAME}-t"

    def setup(self) -> None:
        a = self.args
        self.boxes.up(NAME, 0, buffer_pool_mb=a.pool_mb)
        self.boxes.add_instance(NAME, self.target, buffer_pool_mb=a.pool_mb)
        self.state = self.boxes.find(NAME)
        self.inv = load_inventory(self.state.inventory_file)
        with self.inv.open(self.source) as p:
            create_orders(p)
            for i in range(1, a.tables + 1):
                p.execute(f"CREATE TABLE sbtest.bulk{i} (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, "
                          "c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k))")
                p.execute(f"INSERT INTO sbtest.bulk{i} SELECT seq, FLOOR(1 + RAND({i}) * {a.rows}), "
                          f"CONCAT(LPAD(seq, 11, '0'), REPEAT('-', 109)), REPEAT(CHAR(97 + seq % 26), 60) "
                          f"FROM sbtest.seq_1_to_{a.rows}")
            self.data_mb = round(float(p.scalar(
                "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) / 1048576 FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA IN ('sbtest', 'app')")), 1)
        log(f"data set {self.data_mb} MB, buffer pool {a.pool_mb} MB")

    def window(self, with_copy: bool, samples: list, bands: list) -> dict:
        a = self.args
        src = self.inv.cluster(NAME).servers[self.source]
        reads = ReadLoad(src.host, src.port, self.inv.app_credentials(NAME), threads=2)
        reads.start()
        time.sleep(1.0)  # connections settled before the window counts
        t0 = time.time()
        copied = None
        if with_copy:
            copied = self.copy_for(a.seconds)
        else:
            time.sleep(a.seconds)
        t1 = time.time()
        reads.stop()
        got = [(t, ms) for t, ms in reads.samples_wall() if t0 <= t <= t1]
        samples.extend(got)
        if with_copy:
            bands.append({"phase": "copy", "name": "background copy", "action": "run", "status": "done",
                          "start": t0, "end": t1, "duration_ms": (t1 - t0) * 1000, "sentence": copied or ""})
        return {"values": [ms for _, ms in got], "copied": copied}

    def copy_for(self, seconds: float) -> str:
        """Dump the source into the target, again and again, for `seconds` (a copy that ends early
        starts over, so the whole window is under copy)."""
        src_srv, dst_srv = self.inv.open(self.source), self.inv.open(self.target)
        deadline, rounds = time.monotonic() + seconds, 0
        try:
            with private_defaults_file(src_srv.credentials, src_srv.host, src_srv.port) as src_cnf, \
                    private_defaults_file(dst_srv.credentials, dst_srv.host, dst_srv.port) as dst_cnf:
                while time.monotonic() < deadline:
                    dump = subprocess.Popen(dump_command(src_cnf, ["sbtest", "app"]), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
                    load = subprocess.Popen(import_command(dst_cnf), stdin=dump.stdout, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE)
                    dump.stdout.close()
                    while load.poll() is None and time.monotonic() < deadline:
                        time.sleep(0.05)
                    if load.poll() is None:  # the window is over: stop this copy mid-way
                        dump.kill()
                        load.kill()
                    dump.wait()
                    load.wait()
                    rounds += 1
        finally:
            src_srv.close()
            dst_srv.close()
        return f"{rounds} dump-and-load pass(es) of up to {self.data_mb} MB started"

    def run(self) -> dict:
        without: list[float] = []
        with_: list[float] = []
        samples: list = []
        bands: list = []
        copies = []
        for r in range(self.args.rounds):
            without += self.window(False, samples, bands)["values"]
            w = self.window(True, samples, bands)
            with_ += w["values"]
            copies.append(w["copied"])
            log(f"round {r + 1}: {len(without)} queries without, {len(with_)} during the copy so far")
        return {"copy": f"mariadb-dump --single-transaction of {self.data_mb} MB piped into mariadb on a second "
                        f"instance (consolidation's seed), buffer pool {self.args.pool_mb} MB; load: point lookups "
                        f"by a secondary index, 2 threads; {self.args.rounds} alternating windows of "
                        f"{self.args.seconds} s per case",
                "without": summarize_ms(without), "with": summarize_ms(with_), "copies": copies,
                "_samples": samples, "_bands": bands}

    def close(self) -> None:
        try:
            self.boxes.down(NAME)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000, help="rows per bulk table (about 230 bytes each)")
    ap.add_argument("--tables", type=int, default=3)
    ap.add_argument("--pool-mb", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10, help="length of each window")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of windows (without, with)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--report", type=Path, help="write an HTML report (and its JSON) to this file")
    args = ap.parse_args()
    try:
        if args.report:
            check_report_path(args.report)
    except DbmigrateError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    bench = Bench(args)
    try:
        bench.setup()
        result = bench.run()
    finally:
        bench.close()
    samples, bands = result.pop("_samples"), result.pop("_bands")
    model = from_evidence("Query latency beside a background copy", {
        m.BACKGROUND_COPY: result,
        m.LATENCY: {"source": "point lookups on the source; the shaded bands are the copy windows",
                    "points": per_second_latency(samples)}})
    model.steps = bands
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        from rich.console import Console

        Console().print(rich_table(background_copy(model)))
    if args.report:
        html_path, json_path = write_report(model, args.report)
        print(f"report: {html_path} (numbers: {json_path})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
