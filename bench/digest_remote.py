#!/usr/bin/env python3
"""Digesting a server's slow-log window over ssh: fetch the file and digest it
here, or run pt-query-digest on the server's host and bring back its report.

Starts its own sshd on loopback, writes a synthetic slow log of N events, and
times both ways (plus the local path as the baseline), best of --rounds. On
one machine the CPU is the same for both; what differs is what crosses the
connection (the whole log vs the report) and where the digest's CPU is spent,
which on real hosts is the database server's.

    python bench/digest_remote.py [--events 30000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from dbmigrate.hosts import SshHost, SshSettings
from dbmigrate.rehearsal.sandbox.sshd import Sshd
from dbmigrate.tools import percona


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
        host.close()
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        print(json.dumps(res))
        return
    print(f"{res['events']} events, {res['slow_log_mb']} MB slow log (best of {a.rounds})")
    for k in ("local_s", "fetch_then_digest_s", "digest_on_host_s", "fetch_only_s"):
        print(f"  {k:22s} {res[k]:7.3f} s")
    print(f"  over ssh, fetch+digest adds {res['fetch_then_digest_s'] - res['local_s']:+.3f} s to the local path; "
          f"digesting on the host adds {res['digest_on_host_s'] - res['local_s']:+.3f} s")


if __name__ == "__main__":
    main()
