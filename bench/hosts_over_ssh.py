#!/usr/bin/env python3
"""What ssh adds to the local path, for the two file features that move data:

1. digesting a slow-log window: fetch the file and digest it here, or run
   pt-query-digest on the server's host and bring back its report;
2. a buffer pool dump: fetch the source's ib_buffer_pool, install it in the
   target's datadir (atomic write with owner and mode).

Starts its own sshd on loopback, writes a synthetic slow log of N events, and
times both ways (plus the local path as the baseline), best of --rounds. On
one machine the CPU is the same for both; what differs is what crosses the
connection (the whole log vs the report) and where the digest's CPU is spent,
which on real hosts is the database server's.

    python bench/hosts_over_ssh.py [--events 30000] [--pages 65536] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from types import SimpleNamespace

from dbmigrate.hosts import LocalHost, SshHost, SshSettings
from dbmigrate.rehearsal.sandbox.sshd import Sshd
from dbmigrate.tools import percona
from dbmigrate.warm.copier import HostCopier


def write_slow_log(path: Path, events: int) -> None:
    rng = random.Random(5)
    t0 = 1_700_000_000
    with path.open("w") as f:
        f.write("/usr/sbin/mariadbd, Version: 10.11 (Debian). started with:\nTcp port: 3306  Unix socket: x\n"
                "Time\t\t    Id Command\tArgument\n")
        for i in range(events):
            q = rng.choice(["SELECT c FROM app.t1 WHERE id = {}", "SELECT id, k FROM app.t2 WHERE k BETWEEN {} AND {}",
                            "UPDATE app.t1 SET k = k + 1 WHERE id = {}"])
            f.write(f"# Time: {time.strftime('%y%m%d %H:%M:%S', time.gmtime(t0 + i // 500))}\n"
                    f"# User@Host: app[app] @ localhost [127.0.0.1]\n# Thread_id: {i % 50}  Schema: app  QC_hit: No\n"
                    f"# Query_time: {rng.random() / 1000:.6f}  Lock_time: 0.000010  Rows_sent: 1  Rows_examined: 1\n"
                    f"# Rows_affected: 0  Bytes_sent: 100\nSET timestamp={t0 + i // 500};\n"
                    + q.format(rng.randint(1, 99999), rng.randint(1, 99999)) + ";\n")


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=30000)
    ap.add_argument("--pages", type=int, default=65536, help="buffer pool dump entries (65536 = a 1 GiB pool)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dbm-bench-digest-"))
    daemon = Sshd(work / "sshd")
    try:
        ep = daemon.start()
        host = SshHost("bench", SshSettings(address=ep.address, port=ep.port, user=ep.user,
                                            identity_file=ep.identity_file, known_hosts_file=ep.known_hosts_file,
                                            strict_host_key_checking="yes"))
        log = work / "window.slow.log"
        write_slow_log(log, a.events)
        host.run(["true"])  # the connection is shared; a capture opens it for the window anyway

        def local():
            percona.run_query_digest(log)

        def fetch_then_digest():
            dest = work / "fetched.slow.log"
            host.fetch(str(log), dest)
            percona.run_query_digest(dest)

        def digest_on_host():
            r = host.run(percona.query_digest_argv(log), timeout=900)
            json.loads(r.stdout or b"{}")

        res = {"events": a.events, "slow_log_mb": round(log.stat().st_size / 2**20, 1),
               "local_s": round(best(local, a.rounds), 3),
               "fetch_then_digest_s": round(best(fetch_then_digest, a.rounds), 3),
               "digest_on_host_s": round(best(digest_on_host, a.rounds), 3),
               "fetch_only_s": round(best(lambda: host.fetch(str(log), work / "f2"), a.rounds), 3)}
        src_dir, dst_dir = work / "src-data", work / "dst-data"
        src_dir.mkdir()
        dst_dir.mkdir()
        (src_dir / "ib_buffer_pool").write_text("".join(f"{5 + i % 40},{i}\n" for i in range(a.pages)))
        server = SimpleNamespace(name="bench")

        def pool_through(copier: HostCopier):
            def go():
                tmp = work / "pool-work"
                tmp.mkdir(exist_ok=True)
                got = copier.fetch(server, str(src_dir / "ib_buffer_pool"), tmp)
                copier.push(got, server, str(dst_dir / "ib_buffer_pool"))
            return go

        res["pool_pages"] = a.pages
        res["pool_local_s"] = round(best(pool_through(HostCopier(lambda s: LocalHost("bench"))), a.rounds), 3)
        res["pool_ssh_s"] = round(best(pool_through(HostCopier(lambda s: host)), a.rounds), 3)
        host.close()
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(res))
        return
    print(f"{res['events']} events, {res['slow_log_mb']} MB slow log (best of {a.rounds})")
    print(f"  {'':34s} {'local':>8s} {'over ssh':>9s} {'added':>8s}")
    rows = [("slow-log window: fetch + digest here", res["local_s"], res["fetch_then_digest_s"]),
            ("slow-log window: digest on the host", res["local_s"], res["digest_on_host_s"]),
            (f"buffer pool dump ({a.pages} pages)", res["pool_local_s"], res["pool_ssh_s"])]
    for label, loc, rem in rows:
        print(f"  {label:34s} {loc:7.3f}s {rem:8.3f}s {rem - loc:+7.3f}s")
    print(f"  (fetching the window alone: {res['fetch_only_s']:.3f} s)")


if __name__ == "__main__":
    main()
