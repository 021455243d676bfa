#!/usr/bin/env python3
"""Steady-state cost of the relay (relay/) against HAProxy, on the same server and load.

One MariaDB sandbox server with the sandbox's HAProxy in front of it (TCP mode, as the
rehearsals run it) and the relay beside it, both pointing at the same server. The load is
sysbench (Debian's 1.0.20, libmariadb) with a script of its own: each event is one prepared
INSERT and one prepared point SELECT (server-side prepared statements: COM_STMT_EXECUTE), from
--threads connections, unthrottled. Runs alternate HAProxy / relay (the order swapped every round,
so that drift on the machine hits both alike), --seconds each, after a warm-up through each.

Per side, the median over the rounds of: p50 and p99 event latency (from sysbench's
latency histogram: buckets about 1.6% wide), statements per second, and the router's CPU per 1,000
statements (utime + stime from /proc/PID/stat over the run) and its context switches per 1,000
statements (voluntary + involuntary, summed over its threads: the figure that shows a router's
scheduling cost, little moved by the machine's other load). Then the relay's added p50 and p99
and its throughput ratio, and whether it meets the bar to ship: added p50 <= 10% and throughput >=
0.9x HAProxy's. HAProxy, the relay and sysbench run at the priority this script runs at.

    python bench/relay.py [--seconds 10] [--rounds 3] [--threads 4] [--relay-binary PATH]
                          [--relay-gomaxprocs N] [--json]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dbmigrate.config import load_inventory  # noqa: E402
from dbmigrate.rehearsal.sandbox import haproxy  # noqa: E402
from dbmigrate.rehearsal.sandbox import relay as sandbox_relay  # noqa: E402
from dbmigrate.rehearsal.sandbox.manager import Sandboxes  # noqa: E402
from dbmigrate.rehearsal.sandbox.ports import free_port  # noqa: E402
from dbmigrate.rehearsal.sysbench import parse_report  # noqa: E402

NAME = "relaybench"
ROWS = 10_000
MAX_ADDED_P50 = 0.10
MIN_THROUGHPUT = 0.90
CLK_TCK = os.sysconf("SC_CLK_TCK")

LUA = f"""
-- one prepared INSERT and one prepared point SELECT per event (server-side prepared statements)
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
  ins = con:prepare("INSERT INTO relay_bench (k, pad) VALUES (?, ?)")
  ins_k = ins:bind_create(sysbench.sql.type.INT)
  ins_pad = ins:bind_create(sysbench.sql.type.CHAR, 60)
  ins:bind_param(ins_k, ins_pad)
  sel = con:prepare("SELECT id, k, pad FROM relay_bench WHERE id = ?")
  sel_id = sel:bind_create(sysbench.sql.type.INT)
  sel:bind_param(sel_id)
end

function event()
  ins_k:set(sysbench.rand.uniform(1, 1000000))
  ins_pad:set("relay-bench")
  ins:execute()
  sel_id:set(sysbench.rand.uniform(1, {ROWS}))
  sel:execute()
end

function thread_done()
  ins:close()
  sel:close()
  con:disconnect()
end
"""


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the whole line)


def context_switches(pid: int) -> int:
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread gone meanwhile
            continue
        total += sum(int(v) for v in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)$", text, re.M))
    return total


def histogram_percentiles(text: str, *ps: float) -> list[float | None]:
    """Percentiles (ms) from sysbench's `--histogram` table: each bucket's upper value and count."""
    buckets = [(float(v), int(c)) for v, c in re.findall(r"^\s*([\d.]+)\s*\|\**\s+(\d+)\s*$", text, re.M)]
    total = sum(c for _, c in buckets)
    out: list[float | None] = []
    for p in ps:
        seen, found = 0, None
        for value, count in buckets:
            seen += count
            if total and seen >= p * total:
                found = value
                break
        out.append(found)
    return out


def run_load(port: int, user: str, password: str, script: Path, threads: int, seconds: int) -> dict:
    cmd = ["timeout", "--kill-after=5", str(seconds + 30), "sysbench", str(script), "--db-driver=mysql",
           "--mysql-host=127.0.0.1", f"--mysql-port={port}", f"--mysql-user={user}", "--mysql-db=app",
           f"--threads={threads}", f"--time={seconds}", "--histogram=on", "--percentile=99", "run"]
    env = {k: v for k, v in os.environ.items() if k != "MYSQL_PWD"}
    env["MYSQL_PWD"] = password  # read by libmariadb; never on argv
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=script.parent)
    rep = parse_report(r.stdout)
    if r.returncode != 0 or not rep.complete:
        raise RuntimeError(f"sysbench failed ({r.returncode}): {(r.stderr or r.stdout)[-1500:]}")
    p50, p99 = histogram_percentiles(r.stdout, 0.50, 0.99)
    return {"p50_ms": p50, "p99_ms": p99, "qps": rep.qps, "queries": rep.queries, "events_per_s": rep.tps}


class RelayProcess:
    def __init__(self, binary: Path, workdir: Path, backend: str, user: str, stored_hash: str,
                 gomaxprocs: int | None = None):
        users = workdir / "users"
        fd = os.open(users, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{user} {stored_hash}\n")
        self.port = free_port()
        self.log = workdir / "relay.log"
        self.proc = subprocess.Popen([str(binary), "-listen", f"127.0.0.1:{self.port}", "-backend", backend,
                                      "-users", str(users), "-control", str(workdir / "relay.sock"),
                                      *(["-gomaxprocs", str(gomaxprocs)] if gomaxprocs else [])],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"relay did not start: {self.log.read_text()[-1500:]}")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=10, help="length of each measured run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each one run through HAProxy and one through the relay")
    ap.add_argument("--threads", type=int, default=4, help="client connections")
    ap.add_argument("--relay-binary", type=Path, help="a built relay (default: built from relay/ as the sandbox builds it)")
    ap.add_argument("--relay-gomaxprocs", type=int, help="the relay's -gomaxprocs (default: the relay's own default)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not shutil.which("sysbench"):
        sys.exit("sysbench is not installed (apt-get install sysbench)")
    work = Path(tempfile.mkdtemp(prefix="dbm-bench-relay-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    os.environ["DBMIGRATE_HOME"] = str(work / "home")
    binary = a.relay_binary or sandbox_relay.relay_binary()  # built once per version of its sources
    script = work / "relay_bench.lua"
    script.write_text(LUA)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    boxes = Sandboxes()
    relay = None
    runs: dict[str, list[dict]] = {"haproxy": [], "relay": []}
    load_before = os.getloadavg()
    try:
        state = boxes.up(NAME, 0, buffer_pool_mb=128)
        h = haproxy.start(boxes, NAME)
        inv = load_inventory(state.inventory_file)
        server = state.instances[f"{NAME}-1"]
        creds = inv.app_credentials(NAME)
        with inv.open(f"{NAME}-1") as admin:
            stored = admin.query("SELECT authentication_string AS h FROM mysql.user WHERE User=%s", (creds.user,))[0]["h"]
            admin.execute("CREATE TABLE app.relay_bench (id INT AUTO_INCREMENT PRIMARY KEY, k INT NOT NULL, "
                          "pad CHAR(60) NOT NULL, KEY (k))")
            admin.execute(f"INSERT INTO app.relay_bench (k, pad) SELECT seq, 'x' FROM app.seq_1_to_{ROWS}")
        relay = RelayProcess(binary, work, f"127.0.0.1:{server.port}", creds.user, stored, a.relay_gomaxprocs)
        ports = {"haproxy": (h["writer_port"], h["pid"]), "relay": (relay.port, relay.proc.pid)}
        for side in ports:  # warm-up: connections, buffer pool, both routers
            run_load(ports[side][0], creds.user, creds.password or "", script, a.threads, 2)
        for rnd in range(a.rounds):
            order = ("haproxy", "relay") if rnd % 2 == 0 else ("relay", "haproxy")
            for side in order:
                port, pid = ports[side]
                before, switches = cpu_ticks(pid), context_switches(pid)
                r = run_load(port, creds.user, creds.password or "", script, a.threads, a.seconds)
                cpu_ms = (cpu_ticks(pid) - before) * 1000 / CLK_TCK
                switches = context_switches(pid) - switches
                r["cpu_ms_per_1k"] = round(cpu_ms * 1000 / r["queries"], 2) if r["queries"] else None
                r["ctx_switches_per_1k"] = round(switches * 1000 / r["queries"]) if r["queries"] else None
                r["loadavg_1m"] = round(os.getloadavg()[0], 2)
                runs[side].append(r)
                if not a.json:
                    print(f"round {rnd + 1} {side:>7}: p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  "
                          f"{r['qps']:.0f} statements/s  CPU {r['cpu_ms_per_1k']} ms and "
                          f"{r['ctx_switches_per_1k']} context switches per 1k statements  (load {r['loadavg_1m']})")
    finally:
        if relay is not None:
            relay.stop()
        try:
            boxes.down(NAME)
        except Exception as e:  # the temp home goes anyway
            print(f"sandbox teardown: {e}", file=sys.stderr)
    summary = {side: {k: round(median([r[k] for r in rs if r[k] is not None]), 3)
                      for k in ("p50_ms", "p99_ms", "qps", "cpu_ms_per_1k", "ctx_switches_per_1k")}
               for side, rs in runs.items()}
    hp, rl = summary["haproxy"], summary["relay"]
    added_p50 = (rl["p50_ms"] - hp["p50_ms"]) / hp["p50_ms"]
    added_p99 = (rl["p99_ms"] - hp["p99_ms"]) / hp["p99_ms"]
    ratio = rl["qps"] / hp["qps"]
    meets = added_p50 <= MAX_ADDED_P50 and ratio >= MIN_THROUGHPUT
    result = {"commit": commit, "threads": a.threads, "relay_gomaxprocs": a.relay_gomaxprocs, "seconds": a.seconds, "rounds": a.rounds,
              "nice": os.nice(0), "cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()], "haproxy": hp, "relay": rl,
              "added_p50_pct": round(added_p50 * 100, 1), "added_p99_pct": round(added_p99 * 100, 1),
              "throughput_ratio": round(ratio, 3), "meets": meets, "runs": runs}
    if a.json:
        print(json.dumps(result, indent=2))
        return
    procs = f", relay -gomaxprocs {a.relay_gomaxprocs}" if a.relay_gomaxprocs else ""
    print(f"\ncommit {commit}{procs}, {a.threads} connections, {a.rounds} x {a.seconds} s per side, nice {os.nice(0)}, "
          f"{os.cpu_count()} CPUs, load average {result['loadavg_before'][0]} before, {result['loadavg_after'][0]} after")
    print("median of the rounds  (an event = 1 prepared INSERT + 1 prepared point SELECT)")
    for side in ("haproxy", "relay"):
        s = summary[side]
        print(f"  {side:>7}: p50 {s['p50_ms']} ms  p99 {s['p99_ms']} ms  {s['qps']:.0f} statements/s  "
              f"CPU {s['cpu_ms_per_1k']} ms and {s['ctx_switches_per_1k']:.0f} context switches per 1k statements")
    print(f"  relay vs HAProxy: added p50 {rl['p50_ms'] - hp['p50_ms']:+.3f} ms ({added_p50 * 100:+.1f}%), "
          f"added p99 {rl['p99_ms'] - hp['p99_ms']:+.3f} ms ({added_p99 * 100:+.1f}%), throughput {ratio:.2f}x, "
          f"CPU {rl['cpu_ms_per_1k'] / hp['cpu_ms_per_1k'] if hp['cpu_ms_per_1k'] else float('nan'):.2f}x")
    print(f"  meets the bar (added p50 <= {MAX_ADDED_P50:.0%}, throughput >= {MIN_THROUGHPUT}x): {'yes' if meets else 'NO'}")


if __name__ == "__main__":
    main()
