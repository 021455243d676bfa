#!/usr/bin/env python3
"""Physical seeding's speed against a raw copy, and what the throttle does for the source.

On a throwaway sandbox (an old server with ROWS rows of shard data, and an empty
instance), over the same path (the host layer's relayed stream: local, or over
each instance's own sshd with --remote):

1. raw copy: `tar` of the old server's data files (no binlogs) into a directory
   on the instance's host;
   before every round of either copy the old server's files are dropped from
   the page cache (`dd iflag=nocache`, per file): the server reads and writes its
   data with O_DIRECT, and so does mariadb-backup, so on a real host neither copy
   finds the files cached; a tar of files still cached from the last round would
   compare a memory copy with a disk copy;
2. seeding copy: `mariadb-backup --backup --stream=xbstream | mbstream -x`, the
   command physical seeding runs (prepare timed apart, it is not a copy);
   ratio = seeding MB/s / raw MB/s (target >= 0.8);
3. under load (a writer committing every 5 ms and an application reader on the
   old server): the reader's p99.9 point-read latency and the writer's longest
   stall (its longest gap between two acknowledged commits) with no copy, during an
   unthrottled copy, and during a copy paced by the seeding watcher with the
   playbook's limit (`seed.max_source_p999_ms`, default 50 ms; --limit-ms to change
   it) and --cap-mb-s (default 20), side by side, with how long the backup held the
   source's commits (BACKUP STAGE BLOCK_COMMIT, read from its stderr), and whether
   the throttled copy stayed within the limit and the stall within 100 ms. On a
   shared machine the quiet figure alone can exceed a limit, and no throttle can go
   below it: the output says so when that happens.

The reader that measures is not the watcher's probe: it is a separate
connection doing what an application does.

    python bench/seeding.py [--rows 600000] [--rounds 2] [--remote] [--limit-ms MS] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import statistics
import threading
import time

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import option_file_text
from dbmigrate.db.inspector import Inspector
from dbmigrate.hosts import stream
from dbmigrate.hosts.resolve import host_for
from dbmigrate.procedures.consolidate.context import SeedSettings
from dbmigrate.procedures.consolidate.backup_phases import BackupPhases
from dbmigrate.procedures.consolidate.physical_seed import backup_command, extract_command, prepare_command
from dbmigrate.procedures.consolidate.throttle import MB, Limits, Meter, Valve, Watcher, percentile, relay
from dbmigrate.rehearsal.sandbox.manager import Sandboxes
from dbmigrate.rehearsal.verify.shard_writer import ShardWriterProcess, create_shard


class Reader(threading.Thread):
    """An application's point reads on the old server, timed one by one."""

    def __init__(self, server: Server, lo: int, hi: int, per_s: float = 300):
        super().__init__(daemon=True)
        self.server, self.lo, self.hi, self.interval = server, lo, hi, 1 / per_s
        self.samples: list[tuple[float, float]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        insp = Inspector(self.server)
        while not self.stop_flag.is_set():
            t = time.perf_counter()
            insp.point_read("bench_data", "items", "id", random.randint(self.lo, self.hi))
            self.samples.append((time.monotonic(), (time.perf_counter() - t) * 1000))
            self.stop_flag.wait(self.interval)

    def p999_between(self, t0: float, t1: float) -> float | None:
        return percentile([ms for t, ms in self.samples if t0 <= t <= t1], 99.9)

    def count_between(self, t0: float, t1: float) -> int:
        return sum(1 for t, _ in self.samples if t0 <= t <= t1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=600_000, help="rows of shard data (about 230 bytes each)")
    ap.add_argument("--rounds", type=int, default=2, help="raw and seeding copies, alternating; best of each")
    ap.add_argument("--remote", action="store_true", help="both instances behind their own sshd")
    ap.add_argument("--limit-ms", type=float, default=SeedSettings().max_source_p999_ms,
                    help="throttle's p99.9 limit (default: the playbook's seed.max_source_p999_ms default)")
    ap.add_argument("--cap-mb-s", type=float, default=20, help="the throttled copy's cap (MB/s): the relay is "
                    "pacing when the backup reaches its locking stages")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    boxes = Sandboxes()
    name = f"bench-seed-{secrets.token_hex(2)}"
    reader = writer = None
    try:
        boxes.up(name, replicas=0)
        boxes.add_instance(name, f"{name}-dst")
        if args.remote:
            from dbmigrate.rehearsal.sandbox import sshd

            sshd.start_for_sandbox(boxes, name)
        state = boxes.find(name)
        inv = load_inventory(state.inventory_file)
        src_name, dst_name = f"{name}-1", f"{name}-dst"
        app = inv.app_credentials(name)
        with inv.open(src_name) as s:
            create_shard(s, "bench_data", args.rows, app.user)
            create_shard(s, "bench_writes", 10, app.user)
        src, dst = host_for(inv, src_name), host_for(inv, dst_name)
        src_srv = inv.open(src_name)
        datadir = Inspector(src_srv).datadir().rstrip("/")
        size = None  # information_schema's sizes lag behind a fresh load; the watcher shows no ETA here
        work = src.run(["mktemp", "-d", "/tmp/dbmigrate-bench.XXXXXXXX"]).text.strip()
        spec = inv.find_server(src_name)[1]
        cnf = f"{work}/backup.cnf"
        src.write_bytes(cnf, option_file_text(src_srv.credentials, spec.host, spec.port).encode(), mode=0o600)
        target = f"{state.path}/copy"

        def fresh() -> None:
            dst.run(["rm", "-rf", "--", target])
            dst.run(["mkdir", "-p", "--", target])

        def uncache() -> None:
            src.run(["sh", "-c", 'sync; find "$1" -type f -exec dd if={} iflag=nocache count=0 status=none \\;',
                     "sh", datadir], timeout=300)

        def raw() -> tuple[int, float]:
            fresh()
            uncache()
            meter, t = Meter(), time.monotonic()
            # tar exits 1 when a live file changed while read: the bytes still crossed.
            stream(src, ["sh", "-c", 'tar -C "$1" --exclude="./mysql-bin.*" --exclude="./relay-bin.*" '
                                     '--warning=no-file-changed -cf - .; [ $? -le 1 ]', "sh", datadir],
                   dst, ["tar", "-C", target, "-xf", "-"], timeout=1800, relay=relay(Valve(None), meter))
            return meter.bytes, time.monotonic() - t

        def seed(valve: Valve | None = None, meter: Meter | None = None,
                 phases: BackupPhases | None = None, lock_aware: bool = True) -> tuple[int, float]:
            fresh()
            uncache()
            meter, t = meter or Meter(), time.monotonic()
            valve = valve or Valve(None)
            phases = phases or BackupPhases()
            argv = backup_command(cnf, f"{work}/target", datadir)
            if lock_aware:
                phases.on_change = lambda ph: valve.set(None) if ph.locking else None  # as physical seeding does
            else:  # as it was: paced through the locks, the redo copy polled once a second
                argv = [a for a in argv if not a.startswith("--log-copy-interval")]
            copy_wall[0] = time.time()  # after the page cache was dropped (its sync is no part of the copy)
            stream(src, argv, dst, extract_command(target), timeout=1800, relay=relay(valve, meter),
                   on_stderr_line=phases.feed)
            copy_wall[1] = time.time()
            return meter.bytes, time.monotonic() - t

        copy_wall = [0.0, 0.0]

        def stall_ms(t0: float | None = None, t1: float | None = None) -> float | None:
            """The writer's longest gap between commits from t0 to t1 (default: the last copy)."""
            t0, t1 = (copy_wall[0], copy_wall[1]) if t0 is None else (t0, t1)
            writer.refresh()
            times = [t for _, _, t in list(writer.acks) if t0 <= t <= t1]
            gaps = [((b - a) * 1000, a - t0) for a, b in zip(times, times[1:])]
            if not gaps:
                return None
            worst, at = max(gaps)
            stall_at.append(round(at, 2))
            return round(worst, 1)

        stall_at: list[float] = []

        raws, seeds = [], []
        for _ in range(max(1, args.rounds)):
            raws.append(raw())
            seeds.append(seed())
        t = time.monotonic()
        dst.run(prepare_command(target), timeout=1800)
        prepare_s = time.monotonic() - t
        raw_rate = max(b / s for b, s in raws)
        seed_rate = max(b / s for b, s in seeds)
        # Rounds alternate, so neighbours' load hits both alike; the median says how typical the best is.
        median_ratio = statistics.median(sb / ss / (rb / rs) for (rb, rs), (sb, ss) in zip(raws, seeds))

        # Under load: a writer and an application reader on the old server.
        lo, hi = Inspector(src_srv).key_range("bench_data", "items", "id")
        reader = Reader(inv.open(src_name), int(lo), int(hi))
        routes = state.path / "routes.json"
        from dbmigrate.routing.dsn_file import DsnFileRouter

        DsnFileRouter("bench_writes", routes).switch_writer(f"{spec.host}:{spec.port}")
        writer = ShardWriterProcess(routes, "bench_writes", app, interval_s=0.005)
        reader.start()
        time.sleep(10)
        quiet = reader.p999_between(time.monotonic() - 10, time.monotonic())
        quiet_stall = stall_ms(time.time() - 10, time.time())
        limit = args.limit_ms

        t0 = time.monotonic()
        free_phases = BackupPhases()
        unthrottled_bytes, unthrottled_s = seed(phases=free_phases)
        during_free = reader.p999_between(t0, time.monotonic())
        samples_free = reader.count_between(t0, time.monotonic())
        stall_free = stall_ms()
        time.sleep(2)

        cap = args.cap_mb_s * MB if args.cap_mb_s else None
        unaware = BackupPhases()
        seed(Valve(cap), phases=unaware, lock_aware=False)
        stall_unaware = stall_ms()
        time.sleep(2)

        valve, meter = Valve(), Meter()
        probe_srv, write_srv = inv.open(src_name), inv.open(src_name)
        from dbmigrate.lag import write_heartbeat

        phases = BackupPhases()
        watcher = Watcher(valve, meter, probe=lambda: Inspector(probe_srv).point_read(
            "bench_data", "items", "id", random.randint(int(lo), int(hi))), lag=lambda: None, cap=lambda: cap,
            limits=Limits(cap, limit, None), total_bytes=size, probe_per_s=100, window_s=2, progress_every_s=3600,
            report=lambda text, fig: None, write_probe=lambda: write_heartbeat(write_srv), locked=phases.reason)
        watcher.start()
        t0 = time.monotonic()
        try:
            throttled_bytes, throttled_s = seed(valve, meter, phases)
        finally:
            watcher.stop()
        during_throttled = reader.p999_between(t0, time.monotonic())
        samples_throttled = reader.count_between(t0, time.monotonic())
        stall_throttled = stall_ms()
        src.run(["rm", "-rf", "--", work])
        dst.run(["rm", "-rf", "--", target])

        out = {
            "path": "ssh (each instance behind its own sshd)" if args.remote else "local",
            "rows": args.rows,
            "raw_copy": {"mb": round(raws[0][0] / MB, 1), "best_mb_s": round(raw_rate / MB, 1),
                         "rounds_s": [round(s, 2) for _, s in raws]},
            "seeding_copy": {"mb": round(seeds[0][0] / MB, 1), "best_mb_s": round(seed_rate / MB, 1),
                             "rounds_s": [round(s, 2) for _, s in seeds], "prepare_s": round(prepare_s, 2)},
            "seeding_vs_raw": round(seed_rate / raw_rate, 2),
            "seeding_vs_raw_median_round": round(median_ratio, 2),
            "target_ratio": 0.8,
            "source_p999_ms": {"quiet": quiet, "unthrottled_copy": during_free, "throttled_copy": during_throttled,
                               "limit": limit, "samples": {"unthrottled": samples_free, "throttled": samples_throttled},
                               "throttled_within_limit": during_throttled is not None and during_throttled <= limit,
                               "quiet_above_limit": quiet is not None and quiet > limit},
            "writer_stall_ms": {"quiet": quiet_stall, "unthrottled_copy": stall_free,
                                "capped_copy_paced_through_the_locks": stall_unaware,
                                "commit_lock_ms_paced_through_the_locks": round(unaware.commit_lock_s * 1000, 1),
                                "throttled_copy": stall_throttled, "bound": 100,
                                "worst_at_s": dict(zip(("quiet", "unthrottled", "paced_through_the_locks",
                                                        "throttled"), stall_at)),
                                "throttled_within_bound": stall_throttled is not None and stall_throttled <= 100},
            "unthrottled_copy_under_load": {"s": round(unthrottled_s, 2),
                                            "mb_s": round(unthrottled_bytes / unthrottled_s / MB, 1),
                                            "commit_lock_ms": round(free_phases.commit_lock_s * 1000, 1)},
            "throttled_copy_under_load": {"s": round(throttled_s, 2), "mb_s": round(throttled_bytes / throttled_s / MB, 1),
                                          "cap_mb_s": args.cap_mb_s, "pauses": watcher.pauses,
                                          "paused_s": round(valve.paused_s, 1),
                                          "commit_lock_ms": round(phases.commit_lock_s * 1000, 1),
                                          "watcher_worst_p999_ms": watcher.worst_p999_ms,
                                          "watcher_worst_write_p999_ms": watcher.worst_write_p999_ms},
        }
        if args.json:
            print(json.dumps(out, indent=2))
            return
        f = out
        print(f"path: {f['path']}; {args.rows:,} rows of shard data")
        print(f"raw copy (tar, no binlogs): {f['raw_copy']['mb']} MB, best {f['raw_copy']['best_mb_s']} MB/s "
              f"(rounds {f['raw_copy']['rounds_s']} s)")
        print(f"seeding copy (mariadb-backup | mbstream): {f['seeding_copy']['mb']} MB, best "
              f"{f['seeding_copy']['best_mb_s']} MB/s (rounds {f['seeding_copy']['rounds_s']} s); prepare "
              f"{f['seeding_copy']['prepare_s']} s")
        print(f"seeding / raw: {f['seeding_vs_raw']} best vs best, {f['seeding_vs_raw_median_round']} median of the "
              f"rounds' ratios (target >= 0.8)")
        p = f["source_p999_ms"]

        def ms(v):
            return "n/a" if v is None else f"{v:.2f} ms"

        print(f"source p99.9 point read: quiet {ms(p['quiet'])} | unthrottled copy {ms(p['unthrottled_copy'])} "
              f"({f['unthrottled_copy_under_load']['mb_s']} MB/s, {f['unthrottled_copy_under_load']['s']} s) | "
              f"throttled copy {ms(p['throttled_copy'])} ({f['throttled_copy_under_load']['mb_s']} MB/s, "
              f"{f['throttled_copy_under_load']['s']} s, paused {f['throttled_copy_under_load']['pauses']}x for "
              f"{f['throttled_copy_under_load']['paused_s']} s); limit {ms(p['limit'])}; "
              f"throttled/limit {p['throttled_copy'] / p['limit']:.2f}" if p["throttled_copy"] else "")
        st, u, th = f["writer_stall_ms"], f["unthrottled_copy_under_load"], f["throttled_copy_under_load"]
        print(f"writer's longest stall (gap between commits every 5 ms): quiet {ms(st['quiet'])} | unthrottled copy "
              f"{ms(st['unthrottled_copy'])} (commits held by the backup {u['commit_lock_ms']} ms) | capped copy paced "
              f"through the backup's locks, as before {ms(st['capped_copy_paced_through_the_locks'])} (commits held "
              f"{st['commit_lock_ms_paced_through_the_locks']} ms) | throttled copy "
              f"{ms(st['throttled_copy'])} (cap {th['cap_mb_s']:g} MB/s; commits held by the backup "
              f"{th['commit_lock_ms']} ms); bound 100 ms: {'within' if st['throttled_within_bound'] else 'OVER'}; "
              f"each longest stall at (s into the window): {st['worst_at_s']}")
        print(f"throttled copy within the limit: {'yes' if p['throttled_within_limit'] else 'NO'}"
              + ("; the source is above the limit with no copy at all (other load sets it)"
                 if p["quiet_above_limit"] else ""))
    finally:
        if writer is not None:
            writer.stop()
        if reader is not None:
            reader.stop_flag.set()
            reader.join(5)
        boxes.down(name)


if __name__ == "__main__":
    main()
