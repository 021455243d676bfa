#!/usr/bin/env python3
"""Warm-up benchmark: read throughput in the first seconds after traffic moves to
a target that is cold, or warmed by dump-load or by replay, as a ratio of the
same target's warm steady state.

It brings up its own sandbox (a primary and a replica with a 512 MB pool,
O_DIRECT and no buffer pool load at startup), fills a few hundred MB of
sysbench-style tables, restarts the replica before each case so that its pool
is really empty, and runs sysbench oltp_read_only with uniformly random keys
(point and range selects over the whole data set) against it. The sysbench
password goes through MYSQL_PWD in its environment, never argv. Everything it
started is stopped at the end.

    python bench/warmup.py [--json] [--rows 350000] [--tables 4] [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


from dbmigrate.config import load_inventory
from dbmigrate.db.inspector import Inspector
from dbmigrate.warm import methods as warm
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.report import model as m
from dbmigrate.report.model import from_evidence
from dbmigrate.report.write import check_report_path, write_report
from dbmigrate.warm.measure import hit_ratio_between, snapshot

NAME = "warmbench"
COLD = {"innodb_flush_method": "O_DIRECT", "innodb_buffer_pool_load_at_startup": "OFF",
        "innodb_buffer_pool_dump_at_shutdown": "OFF"}
_QPS = re.compile(r"queries:\s+\d+\s+\(([\d.]+) per sec\.\)")
_QPS_AT = re.compile(r"^\[ *(\d+)s \].* qps: ([\d.]+)", re.M)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.home = Path(tempfile.mkdtemp(prefix="dbm-warmbench-"))
        os.environ["DBMIGRATE_HOME"] = str(self.home)
        self.boxes = Sandboxes(progress=log)
        self.primary_name, self.target_name = f"{NAME}-1", f"{NAME}-t"

    # -- setup ---------------------------------------------------------------------
    def setup(self) -> None:
        a = self.args
        self.boxes.up(NAME, 0, buffer_pool_mb=a.pool_mb)
        self.boxes.add_instance(NAME, self.target_name, replica_of=self.primary_name, buffer_pool_mb=a.pool_mb,
                                extra=COLD)
        self.state = self.boxes.find(NAME)
        self.inv = load_inventory(self.state.inventory_file)
        self.app = self.inv.app_credentials(NAME)
        t0 = time.monotonic()
        with self.inv.open(self.primary_name) as p:
            for i in range(1, a.tables + 1):
                p.execute(f"CREATE TABLE sbtest.sbtest{i} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
                          "k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '', "
                          "pad CHAR(60) NOT NULL DEFAULT '', KEY k_1 (k))")
                p.execute(f"INSERT INTO sbtest.sbtest{i} SELECT seq, FLOOR(1 + RAND({i}) * {a.rows}), "
                          f"CONCAT(LPAD(seq, 11, '0'), REPEAT('-', 109)), REPEAT(CHAR(97 + seq % 26), 60) "
                          f"FROM sbtest.seq_1_to_{a.rows}")
                log(f"filled sbtest{i} ({a.rows} rows)")
            pos = Inspector(p).gtid_binlog_pos()
        with self.inv.open(self.target_name) as t:
            t.read_timeout = 600
            if not Inspector(t).wait_for_gtid(pos, 600):
                raise SystemExit("the replica did not catch up within 600 s")
            self.data_mb = round(float(t.scalar(
                "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) / 1048576 FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA='sbtest'")), 1)
        self.tables = [f"sbtest.sbtest{i}" for i in range(1, a.tables + 1)]
        log(f"data set {self.data_mb} MB in {a.tables} tables, replicated in {time.monotonic() - t0:.1f}s; "
            f"buffer pool {a.pool_mb} MB")

    def capture_digest(self) -> None:
        """A slow log of the primary serving the same read mix, for replay."""
        with self.inv.open(self.primary_name) as p:
            p.execute("SET GLOBAL long_query_time=0")
            p.execute("SET GLOBAL slow_query_log=ON")
            try:
                self.sysbench(self.primary_name, 3)  # only the slow log matters here
            finally:
                p.execute("SET GLOBAL slow_query_log=OFF")
                p.execute("SET GLOBAL long_query_time=10")
            self.plan = warm.replay_plan_from_server(p)
        log(f"digest: {len(self.plan.classes)} SELECT classes to replay, {len(self.plan.refused)} refused")

    # -- pieces --------------------------------------------------------------------
    def restart_cold(self) -> None:
        self.boxes.stop_instance(NAME, self.target_name)
        self.boxes.start_instance(NAME, self.target_name)

    def sysbench(self, server: str, seconds: int) -> tuple[float, list[float]]:
        port = self.state.instances[server].port
        cmd = ["timeout", str(seconds + 30), "sysbench", "oltp_read_only", "--db-driver=mysql",
               "--mysql-host=127.0.0.1", f"--mysql-port={port}", f"--mysql-user={self.app.user}",
               "--mysql-db=sbtest", f"--tables={self.args.tables}", f"--table-size={self.args.rows}",
               "--rand-type=uniform", f"--threads={self.args.threads}", f"--time={seconds}",
               "--report-interval=1", "run"]
        env = dict(os.environ, MYSQL_PWD=self.app.password or "")  # the password stays off argv
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        m = _QPS.search(proc.stdout)
        if proc.returncode != 0 or not m:
            raise SystemExit(f"sysbench failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-600:]}")
        return float(m.group(1)), [float(q) for _, q in _QPS_AT.findall(proc.stdout)]

    def traffic(self, seconds: int) -> dict:
        """Read traffic on the target: QPS, and the pool's hit ratio during it, overall and per second."""
        stop = threading.Event()
        per_second: list[float | None] = []

        def sample() -> None:  # its own session: the counters' delta over each second
            with self.inv.open(self.target_name) as s:
                prev = snapshot(Inspector(s))
                while not stop.wait(1.0):
                    cur = snapshot(Inspector(s))
                    per_second.append(hit_ratio_between(prev, cur).ratio)
                    prev = cur

        with self.inv.open(self.target_name) as t:
            insp = Inspector(t)
            before = snapshot(insp)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                qps, by_second = self.sysbench(self.target_name, seconds)
            finally:
                stop.set()
                sampler.join(10)
            hr = hit_ratio_between(before, snapshot(insp))
        curve = [[i + 1, round(q), None if i >= len(per_second) or per_second[i] is None else round(per_second[i], 5)]
                 for i, q in enumerate(by_second)]
        return {"qps": qps, "hit_ratio": round(hr.ratio or 0.0, 4), "by_second": [round(q) for q in by_second],
                "curve": curve}

    def steady_state(self, seconds: int) -> dict:
        """Make sure every page is resident, then measure: this target's warm steady state.
        Measured right after each case, so that both figures of a ratio see the same
        background load on the machine."""
        with self.inv.open(self.target_name) as t:
            warm.scan(t, self.tables, threads=2, probe_queries=0)
        return self.traffic(seconds)

    # -- cases ---------------------------------------------------------------------
    def one_case(self, case: str) -> dict:
        """Restart the target cold, warm it by `case`, move the reads to it; then its steady state."""
        s = self.args.seconds
        self.restart_cold()
        t0 = time.monotonic()
        rec: dict = {}
        with self.inv.open(self.target_name) as t:
            if case == "dump_load":
                with self.inv.open(self.primary_name) as p:
                    result = warm.dump_load(p, t, plan=self.plan, probe_queries=0)
                rec.update(space_ids_match=result.details["space_ids_match"],
                           pages_loaded=result.details["pages_loaded"])
            elif case == "replay":
                result = warm.replay(t, self.plan, threads=2, probe_queries=0)
                rec.update(scanned=result.details["scanned"], replayed=result.details["replay"]["done"])
            else:
                result = None
        if result is not None:
            rec.update(warm_seconds=round(time.monotonic() - t0, 1), pages_before=result.before.pages_data,
                       pages_after=result.after.pages_data)
        first = self.traffic(s)
        steady = self.steady_state(s)
        rec.update(qps=first["qps"], steady_qps=steady["qps"], ratio=round(first["qps"] / steady["qps"], 3),
                   hit_ratio=first["hit_ratio"], qps_by_second=first["by_second"], curve=first["curve"])
        log(f"{case}: {'warmed in %.1fs, then ' % rec['warm_seconds'] if result else ''}{first['qps']:.0f} qps in "
            f"the first {s}s (hit ratio {first['hit_ratio']:.4f}) vs {steady['qps']:.0f} warm: ratio "
            f"{rec['ratio']:.2f}; per second {first['by_second']}")
        return rec

    def run(self) -> dict:
        out: dict = {"data_mb": self.data_mb, "buffer_pool_mb": self.args.pool_mb, "rows_per_table": self.args.rows,
                     "tables": self.args.tables, "threads": self.args.threads, "window_s": self.args.seconds,
                     "rounds": self.args.rounds}
        runs: dict[str, list[dict]] = {"cold": [], "dump_load": [], "replay": []}
        for r in range(self.args.rounds):
            log(f"round {r + 1} of {self.args.rounds}")
            for case in runs:  # interleaved, so that every case sees the same background load
                runs[case].append(self.one_case(case))
        for case, recs in runs.items():
            out[f"{case}_ratio"] = round(statistics.median(x["ratio"] for x in recs), 3)
            out[f"{case}_qps"] = round(statistics.median(x["qps"] for x in recs), 1)
            out[f"{case}_steady_qps"] = round(statistics.median(x["steady_qps"] for x in recs), 1)
            out[f"{case}_hit_ratio"] = statistics.median(x["hit_ratio"] for x in recs)
            if case != "cold":
                out[f"{case}_warm_seconds"] = statistics.median(x["warm_seconds"] for x in recs)
            out[f"{case}_runs"] = recs
        out["target_met"] = out["dump_load_ratio"] >= 0.9 and out["replay_ratio"] >= 0.9
        # The curve of each case's median round (by ratio): QPS and hit ratio per second after the move.
        out["curves"] = {case: sorted(recs, key=lambda x: x["ratio"])[len(recs) // 2]["curve"]
                         for case, recs in runs.items()}
        return out

    def close(self) -> None:
        try:
            self.boxes.down(NAME)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def show(r: dict) -> None:
    print(f"warm-up benchmark: {r['data_mb']} MB of data, {r['buffer_pool_mb']} MB buffer pool, "
          f"sysbench oltp_read_only uniform, {r['threads']} threads, first {r['window_s']} s after the move; "
          f"medians of {r['rounds']} rounds")
    print(f"  {'case':<10} {'first qps':>10} {'warm qps':>10} {'ratio':>6} {'hit ratio':>10}  warm-up")
    for key, label in (("cold", "cold"), ("dump_load", "dump-load"), ("replay", "replay")):
        warmed = f"{r[key + '_warm_seconds']:.1f} s" if key != "cold" else "-"
        print(f"  {label:<10} {r[key + '_qps']:>10.0f} {r[key + '_steady_qps']:>10.0f} {r[key + '_ratio']:>6.2f} "
              f"{r[key + '_hit_ratio']:>10.4f}  {warmed}")
    verdict = "met" if r["target_met"] else "NOT met"
    print(f"target (warmed >= 0.90 of steady state): {verdict}; cold ratio {r['cold_ratio']:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--rows", type=int, default=350_000, help="rows per table (about 230 bytes each on disk)")
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--pool-mb", type=int, default=512)
    ap.add_argument("--seconds", type=int, default=10, help="measurement window after the move")
    ap.add_argument("--threads", type=int, default=4, help="sysbench threads")
    ap.add_argument("--rounds", type=int, default=3, help="repetitions (medians are reported)")
    ap.add_argument("--report", type=Path, help="write an HTML report (warm-up curves) and its JSON to this file")
    args = ap.parse_args()
    if args.report:
        check_report_path(args.report)
    bench = Bench(args)
    try:
        bench.setup()
        bench.capture_digest()
        result = bench.run()
    finally:
        bench.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    if args.report:
        labels = {"cold": "cold", "dump_load": "warmed by dump-load", "replay": "warmed by replay"}
        model = from_evidence("Warm-up: the first seconds after traffic moves", {m.WARMUP: {
            "source": (f"sysbench oltp_read_only (uniform keys, {args.threads} threads) on the target after it was "
                       f"restarted cold and warmed by each method; {result['data_mb']} MB of data, "
                       f"{args.pool_mb} MB buffer pool; the median round of {args.rounds} by first-window ratio"),
            "cases": {labels[c]: curve for c, curve in result["curves"].items()}}})
        html_path, json_path = write_report(model, args.report)
        print(f"report: {html_path} (numbers: {json_path})", file=sys.stderr)
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
