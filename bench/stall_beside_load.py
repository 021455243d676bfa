#!/usr/bin/env python3
"""What the writer sees while a short process runs beside the switchover bench's load.

The sandbox, load and writer of bench/switchover.py (sysbench oltp_write_only unthrottled on the
primary, the zero-loss writer through HAProxy every ~1 ms), and instead of promotions, short
processes started one after the other, each kind in turn:

- idle: nothing (0.6 s of sleep), the reference;
- cpu: a Python loop that burns about as much CPU as the tool's start-up and sends no statement;
- imports: `dbmigrate run --help` (the command's imports, no server touched);
- dryrun: `dbmigrate run PLAYBOOK --dry-run --yes --json` (imports, preflight reads, no change);
- nice-imports: the imports at nice +10;
- idle-cpu, idle-imports: the loop and the imports under SCHED_IDLE (`chrt --idle 0`): the kernel
  runs them only on a core nothing else wants and preempts them at once for any other task that
  wakes, which a nice value does not promise.

Per kind: the process's CPU and wall time, the writer's p99 gap while it ran, and the longest gap
per process. It tells whether the writer's stalls during the tool's start-up come from what the
tool sends or from its CPU alone.

    python bench/stall_beside_load.py [--rounds 8] [--kinds idle,cpu,imports,dryrun,nice-imports,idle-cpu,idle-imports] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CPU_LOOP_S = 0.35  # about the tool's start-up on this machine
KINDS = ("idle", "cpu", "imports", "dryrun", "nice-imports", "idle-cpu", "idle-imports", "paced20-cpu", "paced10-cpu", "fsync",
         "sqlite", "true", "python", "alloc")


def commands(pb: Path, dbmigrate: list[str]) -> dict[str, list[str]]:
    burn = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {CPU_LOOP_S}: pass"
    def paced(burst_ms: float, pause_ms: float) -> str:  # the same CPU in short bursts, a pause after each
        return (f"import time\nt = time.process_time()\nwhile time.process_time() - t < {CPU_LOOP_S}:\n"
                f"    b = time.process_time()\n    while time.process_time() - b < {burst_ms / 1000}: pass\n"
                f"    time.sleep({pause_ms / 1000})")
    scratch = Path(os.environ["DBMIGRATE_HOME"])
    fsync = (f"import os\nf = open({str(scratch / 'fsync.bin')!r}, 'wb')\nf.write(os.urandom(65536))\n"
             f"f.flush()\nos.fsync(f.fileno())\nf.close()")
    sqlite = (f"import sqlite3\ndb = sqlite3.connect({str(scratch / 'wal.sqlite')!r})\n"
              f"db.execute('PRAGMA journal_mode=WAL')\ndb.execute('PRAGMA synchronous=NORMAL')\n"
              f"db.execute('CREATE TABLE IF NOT EXISTS t (v BLOB)')\n"
              f"for _ in range(20):\n    db.execute('INSERT INTO t VALUES (randomblob(2000))')\n    db.commit()\n"
              f"db.close()")
    alloc = "b = bytearray(80 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"
    return {"cpu": [sys.executable, "-c", burn],
            "true": ["/bin/true"],  # a process and nothing else
            "python": [sys.executable, "-c", "pass"],  # the interpreter's start alone
            "alloc": [sys.executable, "-c", alloc],  # 80 MB of fresh memory touched, little CPU
            "fsync": [sys.executable, "-c", fsync],  # a small write and its fsync, no CPU to speak of
            "sqlite": [sys.executable, "-c", sqlite],  # the journal's kind of writes, and its close
            "paced20-cpu": [sys.executable, "-c", paced(2, 8)],
            "paced10-cpu": [sys.executable, "-c", paced(1, 9)],
            "imports": dbmigrate + ["run", "--help"],
            "dryrun": dbmigrate + ["run", str(pb), "--dry-run", "--yes", "--json"]}


def measure(rounds: int, kinds: list[str], say) -> dict:
    import switchover as sw
    from writer_process import WriterProcess

    from dbmigrate.config import load_inventory
    from dbmigrate.rehearsal.sandbox import haproxy
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes
    from dbmigrate.rehearsal.sysbench import Sysbench

    boxes = Sandboxes()
    name = f"stall{os.getpid() % 10000}"
    boxes.up(name, 2)
    verifier = None
    try:
        boxes.add_instance(name, f"{name}-new", replica_of=f"{name}-1", buffer_pool_mb=sw.BUFFER_POOL_MB)
        haproxy.start(boxes, name)
        state = boxes.find(name)
        inv = load_inventory(state.inventory_file)
        load = Sysbench.for_cluster(inv, name, workload="oltp_write_only", tables=2, table_size=2000, threads=2)
        load.prepare()
        verifier = WriterProcess(state.inventory_file, name, interval_s=sw.WRITER_INTERVAL_S,
                                 retry_pause_s=sw.WRITER_RETRY_PAUSE_S)
        verifier.start()
        verifier.wait_for_acks(50)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(os.environ["DBMIGRATE_HOME"]) / "pycache")
        cmds = commands(sw.playbook(state, name, f"{name}-new", "dbmigrate"), sw.dbmigrate_cmd())
        for cmd in cmds.values():  # fills the cache of compiled modules; not counted
            subprocess.run(cmd, env=env, capture_output=True)
        bg = load.start_background(time_s=3600)
        try:
            time.sleep(2)
            spans: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
            for i in range(rounds):
                for kind in kinds:
                    time.sleep(0.7)
                    t0 = time.monotonic()
                    cpu = 0.0
                    if kind == "idle":
                        time.sleep(0.6)
                    else:
                        prefix = (["nice", "-n", "10"] if kind.startswith("nice-") else
                                  ["chrt", "--idle", "0"] if kind.startswith("idle-") else [])
                        cmd = prefix + cmds[kind.removeprefix("nice-").removeprefix("idle-")]
                        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        _, _, usage = os.wait4(p.pid, 0)
                        cpu = usage.ru_utime + usage.ru_stime
                    spans[kind].append((t0, time.monotonic(), cpu))
                say(f"round {i + 1} of {rounds} done")
            time.sleep(0.5)
        finally:
            bg.stop()
        acks = verifier.acks
        out: dict = {}
        for kind, ss in spans.items():
            gaps, longest = [], []
            for start, end, _ in ss:
                g = [(b.mono - a.mono) * 1000 for a, b in zip(acks, acks[1:]) if b.mono >= start and a.mono <= end]
                gaps += g
                longest.append(round(max(g), 1) if g else None)
            seen = [m for m in longest if m is not None]
            out[kind] = {"n": len(ss), "cpu_p50_s": round(statistics.median(c for *_, c in ss), 3),
                         "wall_p50_s": round(statistics.median(e - s for s, e, _ in ss), 3),
                         "gap_p50_ms": round(statistics.median(gaps), 2) if gaps else None,
                         "gap_p99_ms": round(sw.pct(gaps, 99), 1) if gaps else None,
                         "longest_p50_ms": statistics.median(seen) if seen else None,
                         "longest_max_ms": max(seen) if seen else None, "longest_ms": longest}
        return out
    finally:
        try:
            if verifier is not None:
                verifier.kill()
        finally:
            boxes.down(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    if "DBMIGRATE_HOME" not in os.environ:  # a private home, removed at the end
        os.environ["DBMIGRATE_HOME"] = tempfile.mkdtemp(prefix="dbm-bench-")
        import atexit

        atexit.register(shutil.rmtree, os.environ["DBMIGRATE_HOME"], ignore_errors=True)
    os.environ.setdefault("DBMIGRATE_JOURNAL", str(Path(os.environ["DBMIGRATE_HOME"]) / "journal.sqlite"))
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    out = measure(args.rounds, kinds, say)
    out["load_average_1min"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"load average (1 min): {out['load_average_1min']}")
        for kind in kinds:
            r = out[kind]
            print(f"{kind:>13}: CPU p50 {r['cpu_p50_s']} s, wall p50 {r['wall_p50_s']} s; writer's p99 gap "
                  f"{r['gap_p99_ms']} ms; longest gap per process p50 {r['longest_p50_ms']} ms, max {r['longest_max_ms']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
