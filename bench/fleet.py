#!/usr/bin/env python3
"""Fleet moves against their size: N old servers consolidated in one run, N = 4, 8, 16.

For each N a throwaway sandbox holds N old servers (one small shard each, small mariadbd:
32 MB buffer pool, 16 MB redo log, performance_schema off) and target hosts of four instances
each. Every old server has its application in a process of its own (bench/fleet_app.py): a
writer following the DSN file and a reader timing point reads on the old server. The plan
gives each old server its own instance, so every seed is physical (mariadb-backup streamed
through the throttle: the playbook's p99.9 limit on the source, and a byte cap if given), and
`dbmigrate run` (a process of its own, as an operator runs it) seeds and cuts over the fleet
`fleet.concurrency` servers at a time. Printed per N:

- wall: the run, exec to exit; and its provision, seed and cutover steps;
- data moved: the bytes the physical copies moved (MB), and wall time per MB;
- seeding MB/s against a raw copy (tar of the same old servers' files, no binlogs, through the
  same relay, page cache dropped first, the same concurrency), per copy and for the fleet;
- each server's cutover write gap: the longest pause of its writer that overlaps its cutover
  (p50 and max over the servers; also beyond the writer's own pace, and the fenced window the
  tool journaled, and its parts: `fenced_part_ms`), where each pause longer than the writer's pace
  plus 30 ms lay against its server's window and what the rest of the fleet did meanwhile, and lost
  writes (acknowledged, not on the shard's server);
- the sources' p99.9 read latency while each was being copied (all sources' samples pooled;
  the worst single source beside it), quiet before the run, against the throttle's limit;
- the tool's peak memory: the `dbmigrate run` process's own high-water mark, and the peak
  summed RSS of it and its children (mariadb-backup, mbstream; not the mariadbd it starts).

Then the ratios of the largest N to the smallest: wall time per MB (target: <= 1, the run grows
no faster than the data), per-server gap p50 and max and the sources' p99.9 (targets: do not
grow with N), each judged within a noise factor of 1.2.

    python bench/fleet.py [--counts 4,8,16] [--rows 2000] [--concurrency 4] [--limit-ms 50]
                          [--cap-mb-s 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fleet_figures as fig  # noqa: E402

from dbmigrate.rehearsal.processes import descendants  # noqa: E402

PER_HOST = 4  # instances per target host
OLD_SERVER = {"innodb_log_file_size": "16M"}  # with the sandbox's performance_schema=OFF


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class ToolMemory(threading.Thread):
    """Samples the tool's process tree twice a second: its own VmHWM (exact, the kernel
    keeps it) and the summed RSS of it and its descendants other than mariadbd."""

    def __init__(self, pid: int):
        super().__init__(daemon=True, name="tool-memory")
        self.pid = pid
        self.hwm_kb = 0
        self.tree_peak_kb = 0
        self.cpu_s = 0.0  # its own user + system time, and its finished children's (mariadb-backup, ...)
        self.stop_flag = threading.Event()

    @staticmethod
    def _status(pid: int) -> dict[str, str]:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return {}
        return dict(line.split(":", 1) for line in lines if ":" in line)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            own = self._status(self.pid)
            if not own:
                return
            self.hwm_kb = max(self.hwm_kb, int(own.get("VmHWM", "0 kB").split()[0]))
            try:
                f = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
                self.cpu_s = sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
            except (OSError, IndexError, ValueError):
                pass
            tree = 0
            for pid in {self.pid, *descendants(self.pid)}:
                st = self._status(pid)
                if st and st.get("Name", "").strip() != "mariadbd":
                    tree += int(st.get("VmRSS", "0 kB").split()[0])
            self.tree_peak_kb = max(self.tree_peak_kb, tree)
            self.stop_flag.wait(0.5)


class App:
    """One old server's application process (bench/fleet_app.py)."""

    def __init__(self, cfg: dict):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fleet_app.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        self.proc.stdin.write(json.dumps(cfg) + "\n")
        self.proc.stdin.flush()
        self.result: dict | None = None

    def ready(self) -> None:
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"an application did not start writing: {line or 'it exited'}")

    def finish(self) -> dict:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.result = json.loads(self.proc.stdout.readline())
        self.proc.wait(30)
        return self.result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Fleet:
    def __init__(self, n: int, args: argparse.Namespace, home: Path):
        from dbmigrate.rehearsal.sandbox.manager import Sandboxes

        self.n, self.args, self.home = n, args, home
        self.name = f"fleet{n}-{secrets.token_hex(2)}"
        self.boxes = Sandboxes()
        self.apps: dict[str, App] = {}
        self.tool: subprocess.Popen | None = None
        self.up = False

    def write_interval_s(self) -> float:
        """Each writer's pause between writes: the applications' load on this one machine is the
        same for every N (per server it shrinks as N grows), so that the tool's share of the
        CPU, not the applications', is what changes with N."""
        return self.n / self.args.writes_per_s

    def old(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(1, self.n + 1)]

    # -- set-up ---------------------------------------------------------------
    def setup(self) -> None:
        import yaml

        from dbmigrate.config import HostSpec, load_inventory
        from dbmigrate.procedures.consolidate.plan import measure_shards, plan
        from dbmigrate.rehearsal.playbook_defaults import REHEARSAL_FENCE
        from dbmigrate.rehearsal.sandbox.ports import free_port_range
        from dbmigrate.rehearsal.verify.shard_writer import create_shard
        from dbmigrate.routing.dsn_file import DsnFileRouter

        t = time.monotonic()
        self.up = True
        self.boxes.up(self.name, 0, buffer_pool_mb=32, extra=OLD_SERVER)
        for server in self.old()[1:]:
            self.boxes.add_instance(self.name, server, cluster=self.name, buffer_pool_mb=32, extra=OLD_SERVER)
        state = self.boxes.find(self.name)
        self.state = state
        base = load_inventory(state.inventory_file)
        app = base.app_credentials(self.name)
        self.shards = {s: f"shard_{k:02d}" for k, s in enumerate(self.old(), 1)}
        for server, shard in self.shards.items():
            with base.open(server) as s:
                create_shard(s, shard, self.args.rows, app.user)
        doc = yaml.safe_load(state.inventory_file.read_text())
        cluster = doc["clusters"][self.name]
        for server, shard in self.shards.items():
            cluster["servers"][server]["shards"] = [shard]
        cluster["router"] = {"kind": "dsn-file", "path": "shards.json"}
        doc["planning"] = {"reserved_memory_gb": 0.25, "instance_overhead_mb": 64, "min_buffer_pool_mb": 32}
        inv_path = state.path / "legacy.yaml"
        inv_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.inv = inv = load_inventory(inv_path)
        self.routes = state.path / "shards.json"
        for server, shard in self.shards.items():
            spec = inv.cluster(self.name).servers[server]
            DsnFileRouter(shard, self.routes).switch_writer(f"{spec.host}:{spec.port}")
        log(f"N={self.n}: {self.n} old servers with a shard of {self.args.rows} rows each "
            f"({time.monotonic() - t:.0f}s)")

        hosts = {f"h{k + 1}": HostSpec(cores=2, memory_gb=1, disk_gb=20, max_instances=PER_HOST, sandbox=self.name,
                                       base_port=free_port_range(PER_HOST))
                 for k in range((self.n + PER_HOST - 1) // PER_HOST)}
        self.plan = plan(measure_shards(inv, sample_s=0.1), hosts, inv.planning, "instance-per-group",
                         instances_per_host=PER_HOST)
        merged = [i.name for i in self.plan.instances if len(i.sources) != 1]
        if merged or len(self.plan.instances) != self.n:
            raise RuntimeError(f"the plan does not give each old server an instance of its own: {merged}")
        plan_file = state.path / "plan.json"
        plan_file.write_text(json.dumps(self.plan.to_dict()))
        self.book = state.path / "consolidate.yaml"
        self.book.write_text(yaml.safe_dump({
            "procedure": "consolidate", "inventory": inv_path.name, "cluster": self.name,
            "params": {"plan": plan_file.name, "catchup_timeout_s": 10, "fence_drain_timeout_s": 0.3, "gate_timeout_s": 120,
                       **REHEARSAL_FENCE,
                       "seed": {"method": "physical", "throttle_mb_s": self.args.cap_mb_s,
                                "max_source_p999_ms": self.args.limit_ms, "progress_every_s": 5},
                       "fleet": {"concurrency": self.args.concurrency, "on_failure": "continue"}}}, sort_keys=False))

        admin = inv.credentials_for(inv.cluster(self.name).servers[self.old()[0]])
        for server, shard in self.shards.items():
            spec = inv.cluster(self.name).servers[server]
            self.apps[server] = App({"routes": str(self.routes), "shard": shard, "app": [app.user, app.password],
                                     "admin": [admin.user, admin.password], "source": server, "host": spec.host,
                                     "port": spec.port, "rows": self.args.rows, "reads_per_s": self.args.reads_per_s / self.n,
                                     "write_interval_s": self.write_interval_s()})
        for a in self.apps.values():
            a.ready()

    # -- the run ----------------------------------------------------------------
    def run_tool(self) -> dict:
        env = dict(os.environ, DBMIGRATE_HOME=str(self.home), DBMIGRATE_JOURNAL=str(self.home / "journal.sqlite"))
        out = open(self.state.path / "run.log", "w")
        t = time.monotonic()
        self.tool = subprocess.Popen([sys.executable, "-m", "dbmigrate", "run", str(self.book), "--yes"],
                                     stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.state.path)
        mem = ToolMemory(self.tool.pid)
        mem.start()
        try:
            rc = self.tool.wait(self.args.timeout_s)
        finally:
            mem.stop_flag.set()
            mem.join(5)
            out.close()
        wall = time.monotonic() - t
        return {"rc": rc, "wall_s": wall, "hwm_kb": mem.hwm_kb, "tree_peak_kb": mem.tree_peak_kb, "cpu_s": mem.cpu_s}

    def raw_copy(self) -> dict:
        """tar of each old server's files (no binlogs), through the relay seeding uses, the
        same number at a time; page cache dropped first (mariadbd and mariadb-backup use O_DIRECT)."""
        from dbmigrate.hosts import stream
        from dbmigrate.hosts.resolve import host_for
        from dbmigrate.procedures.consolidate.throttle import Meter, Valve, relay

        def one(server: str) -> tuple[int, float]:
            host = host_for(self.inv, server)
            datadir = self.inv.cluster(self.name).servers[server].datadir.rstrip("/")
            target = self.state.path / "raw" / server
            target.mkdir(parents=True)
            host.run(["sh", "-c", 'sync; find "$1" -type f -exec dd if={} iflag=nocache count=0 status=none \\;',
                      "sh", datadir], timeout=300)
            meter, t = Meter(), time.monotonic()
            stream(host, ["sh", "-c", 'tar -C "$1" --exclude="./mysql-bin.*" --exclude="./relay-bin.*" '
                                      '--warning=no-file-changed -cf - .; [ $? -le 1 ]', "sh", datadir],
                   host, ["tar", "-C", str(target), "-xf", "-"], timeout=600, relay=relay(Valve(None), meter))
            secs = time.monotonic() - t
            shutil.rmtree(target, ignore_errors=True)
            return meter.bytes, secs

        t = time.monotonic()
        with ThreadPoolExecutor(self.args.concurrency) as pool:
            copies = list(pool.map(one, self.old()))
        return {"bytes": sum(b for b, _ in copies), "wall_s": time.monotonic() - t,
                "per_copy_mb_s": [b / s / 1e6 for b, s in copies]}

    def measure(self) -> dict:
        from dbmigrate.db.connection import Server
        from dbmigrate.engine.journal import Journal
        from dbmigrate.procedures.consolidate.resources import ConsolidateState
        from dbmigrate.procedures.consolidate.throttle import percentile
        from dbmigrate.rehearsal.verify.shard_writer import ids_on

        quiet_from = time.time()
        time.sleep(self.args.quiet_s)  # the sources' latency with the applications alone
        quiet_until = time.time()
        log(f"N={self.n}: dbmigrate run: {self.n} old servers, {self.args.concurrency} at a time")
        tool = self.run_tool()
        time.sleep(1)  # every writer writes to its instance for a moment
        results = {s: a.finish() for s, a in self.apps.items()}
        with Journal(self.home / "journal.sqlite") as j:
            run_id = next(r["id"] for r in j.list_runs() if r["cluster"] == self.name)
            detail = j.run_detail(run_id)
        st = ConsolidateState.load(detail["state"])
        status = detail.get("status")
        seeds = fig.stage_windows(detail["metrics"], "seed")
        cuts = fig.stage_windows(detail["metrics"], "cutover")
        steps: dict[str, float] = {}  # seconds per phase
        for s in detail["steps"]:
            if s["action"] == "run" and s["duration_ms"] is not None:
                steps[s["phase"]] = steps.get(s["phase"], 0.0) + s["duration_ms"] / 1000

        gaps, lost = {}, 0
        creds = self.inv.defaults.credentials.resolve(self.inv.base)
        for server, shard in self.shards.items():
            acks = results[server]["acks"]
            if server in cuts:
                a, b = cuts[server]
                gaps[server] = fig.gap_in([t for _, _, t in acks], a, b)
            addr = json.loads(self.routes.read_text())["clusters"][shard]["writer"]
            host, _, port = addr.rpartition(":")
            with Server(addr, host, int(port), creds) as srv:
                lost += len({i for i, _, _ in acks} - ids_on(srv, shard))
        p50, mx = fig.p50_max([gaps.get(s) for s in self.old()])
        pace_ms = self.write_interval_s() * 1000
        # The cutover's own account of its fenced window (fence to writes open on the instance).
        f50, fmax = fig.p50_max([m["value"] for m in detail["metrics"] if m["name"] == "fenced_window_ms"])
        fenced = fig.fenced_windows(detail["metrics"])
        beside = fig.beside_each_window(fenced, cuts)
        fenced_ms = {m["labels"]["source"]: m["value"] for m in detail["metrics"] if m["name"] == "fenced_window_ms"}
        # Where each window went: to the instance's catch-up, and after it (reverse connection, routes, open).
        parts = {s: fig.window_parts(rec.get("text", "")) for s, rec in st.servers.items()
                 if rec.get("stage") == "cutover" and rec.get("status") == "done"}
        after = [p["window_ms"] - p["caught_up_ms"] for p in parts.values()
                 if p["window_ms"] is not None and p["caught_up_ms"] is not None]
        beyond = [None if gaps.get(s) is None else max(0.0, gaps[s] - pace_ms) for s in self.old()]
        # Where each pause longer than the writer's pace plus 30 ms lay, and what the fleet did then.
        long_gaps = {}
        for server, g in gaps.items():
            if g is None or g <= pace_ms + 30:
                continue
            span = fig.gap_around([t for _, _, t in results[server]["acks"]], *cuts[server])
            long_gaps[server] = fig.where_gap(span, fenced.get(server),
                                              [w for o, w in fenced.items() if o != server],
                                              [w for o, w in cuts.items() if o != server])
        b50, bmax = fig.p50_max(beyond)

        during = []
        worst_source = None
        for server in self.old():
            reads = [tuple(r) for r in results[server]["reads"]]
            mine = fig.within(reads, [seeds[server]]) if server in seeds else []
            during += mine
            p = percentile(mine, 99.9)
            worst_source = max(worst_source or 0.0, p) if p is not None else worst_source
        quiet = [ms for s in self.old() for t, ms in results[s]["reads"] if quiet_from <= t <= quiet_until]
        copies = [v for k, v in st.seeds.items() if v.get("method") == "physical"]
        moved = sum(v["bytes"] for v in copies)
        raw = self.raw_copy()
        seed_wall = steps.get("seed")
        mb = moved / 1e6
        return {
            "n": self.n, "status": status, "rc": tool["rc"], "concurrency": self.args.concurrency,
            "copies_at_once": fig.most_at_once(seeds.values()), "cutovers_at_once": fig.most_at_once(cuts.values()),
            "wall_s": round(tool["wall_s"], 1),
            "steps_s": {k: (round(v, 1) if isinstance(v, (int, float)) else v) for k, v in steps.items()},
            "moved_mb": round(mb, 1), "wall_s_per_mb": round(tool["wall_s"] / mb, 4) if mb else None,
            "seeding": {"physical_copies": len(copies),
                        "per_copy_mb_s": round(sum(v["rate_mb_s"] for v in copies) / len(copies), 1) if copies else None,
                        "fleet_mb_s": round(mb / seed_wall, 1) if seed_wall else None,
                        "pauses": sum(v.get("pauses", 0) for v in copies),
                        "paused_s": round(sum(v.get("paused_s", 0) for v in copies), 1),
                        "watcher_worst_p999_ms": max((v.get("worst_source_p999_ms") or 0 for v in copies), default=None)},
            "raw": {"mb": round(raw["bytes"] / 1e6, 1),
                    "per_copy_mb_s": round(sum(raw["per_copy_mb_s"]) / len(raw["per_copy_mb_s"]), 1),
                    "fleet_mb_s": round(raw["bytes"] / 1e6 / raw["wall_s"], 1)},
            "gap_ms": {"p50": _r(p50), "max": _r(mx), "writer_interval": round(pace_ms, 1),
                       "beyond_pace_p50": _r(b50), "beyond_pace_max": _r(bmax),
                       "per_server": {s: (round(g) if g is not None else None) for s, g in gaps.items()},
                       "long": long_gaps,
                       "not_cut_over": sorted(set(self.old()) - set(cuts))},
            "fenced_ms": {"p50": _r(f50), "max": _r(fmax),
                          # Does a window last longer when other servers' cutovers run beside it?
                          "by_others_outside_their_window": fig.split_by(fenced_ms, beside, "outside_window"),
                          "by_others_fenced": fig.split_by(fenced_ms, beside, "fenced"),
                          "fence_p50": _r(percentile([p["fence_ms"] for p in parts.values() if p["fence_ms"] is not None], 50)),
                          "caught_up_p50": _r(percentile([p["caught_up_ms"] for p in parts.values()
                                                          if p["caught_up_ms"] is not None], 50)),
                          "after_caught_up_p50": _r(percentile(after, 50)),
                          "after_caught_up_max": _r(max(after, default=None)),
                          "parts": fig.window_part_figures(detail["metrics"])},
            "gap_by_others_outside_their_window": fig.split_by(
                {s: g for s, g in gaps.items() if g is not None}, beside, "outside_window"),
            "lost": lost,
            "write_errors": sum(sum(r["write_errors"].values()) for r in results.values()),
            "source_p999_ms": {"seeding": _r(percentile(during, 99.9)), "worst_source": _r(worst_source),
                               "quiet": _r(percentile(quiet, 99.9)), "limit": self.args.limit_ms,
                               "samples": len(during)},
            "tool_memory_mb": {"process_peak": round(tool["hwm_kb"] / 1024), "tree_peak": round(tool["tree_peak_kb"] / 1024)},
            "tool_cpu_s": round(tool["cpu_s"], 1),
        }

    def close(self) -> None:
        if self.tool is not None and self.tool.poll() is None:  # the bench failed while the tool ran
            self.tool.send_signal(signal.SIGTERM)
            try:
                self.tool.wait(60)
            except subprocess.TimeoutExpired:
                self.tool.kill()
                self.tool.wait(10)
        for a in self.apps.values():
            a.kill()
        if self.up:
            try:
                self.boxes.down(self.name)  # the planned instances are in this sandbox too
            except Exception as e:  # a sandbox that never came up has nothing to stop
                log(f"N={self.n}: sandbox down: {e}")


def _r(v):
    return round(v, 1) if v is not None else None


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", type=lambda s: [int(x) for x in s.split(",")], default=[4, 8, 16],
                    help="old servers per run, comma-separated")
    ap.add_argument("--rows", type=int, default=2000, help="rows in each old server's shard (about 230 bytes each)")
    ap.add_argument("--concurrency", type=int, default=4, help="the playbook's fleet.concurrency")
    ap.add_argument("--limit-ms", type=float, default=50, help="the throttle's limit: seed.max_source_p999_ms")
    ap.add_argument("--cap-mb-s", type=float, default=0, help="the throttle's byte cap per copy: seed.throttle_mb_s")
    ap.add_argument("--reads-per-s", type=float, default=400,
                    help="the applications' point reads per second on the old servers, in all (split evenly)")
    ap.add_argument("--writes-per-s", type=float, default=400,
                    help="the applications' writes per second, in all (split evenly over the old servers)")
    ap.add_argument("--quiet-s", type=float, default=5, help="the sources' latency measured this long before the run")
    ap.add_argument("--timeout-s", type=float, default=900, help="give up on one run after this long")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.counts or min(args.counts) < 1 or max(args.counts) > 64:
        ap.error("--counts: give 1 to 64 old servers per run, e.g. 4,8,16")

    home = Path(tempfile.mkdtemp(prefix="dbm-bench-fleet-"))
    os.environ["DBMIGRATE_HOME"] = str(home)
    os.environ["DBMIGRATE_JOURNAL"] = str(home / "journal.sqlite")
    rows = []
    load_before = os.getloadavg()
    try:
        for n in args.counts:
            fleet = Fleet(n, args, home)
            try:
                fleet.setup()
                rows.append(fleet.measure())
            finally:
                fleet.close()
            r = rows[-1]
            log(f"N={n}: {r['status']} in {r['wall_s']} s, {r['moved_mb']} MB, gap p50 {r['gap_ms']['p50']} ms "
                f"max {r['gap_ms']['max']} ms, p99.9 {r['source_p999_ms']['seeding']} ms, lost {r['lost']}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {"commit": commit(), "cores": os.cpu_count(), "load_avg_before": [round(x, 2) for x in load_before],
           "load_avg_after": [round(x, 2) for x in os.getloadavg()], "rows_per_shard": args.rows,
           "concurrency": args.concurrency, "limit_ms": args.limit_ms, "cap_mb_s": args.cap_mb_s, "runs": rows,
           "scaling": fig.scaling_verdicts(rows) if len(rows) > 1 else None}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)
    return 0 if all(r["status"] == "done" and r["lost"] == 0 for r in rows) else 1


def print_table(out: dict) -> None:
    print(f"commit {out['commit']}, {out['cores']} cores, load average {out['load_avg_before']} before, "
          f"{out['load_avg_after']} after; {out['rows_per_shard']} rows per shard; fleet.concurrency "
          f"{out['concurrency']}; throttle limit p99.9 {out['limit_ms']:g} ms, cap {out['cap_mb_s'] or 'none'}")
    print("| N | status | wall s (provision/seed/cutover) | MB moved | s per MB | seeding MB/s per copy / fleet "
          "(paused s) | raw MB/s per copy / fleet | gap ms p50 / max (beyond the writer's pace) "
          "| fenced window ms p50 / max | lost "
          "| source p99.9 ms while copied (worst source) / quiet | tool MB process / tree, CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["runs"]:
        s, sd, rw, g, p = r["steps_s"], r["seeding"], r["raw"], r["gap_ms"], r["source_p999_ms"]
        print(f"| {r['n']} | {r['status']} | {r['wall_s']} ({s.get('provision', '-')}/{s.get('seed')}/{s.get('cutover')}) "
              f"| {r['moved_mb']} | {r['wall_s_per_mb']} | {sd['per_copy_mb_s']} / {sd['fleet_mb_s']} ({sd['paused_s']}) "
              f"| {rw['per_copy_mb_s']} / {rw['fleet_mb_s']} | {g['p50']} / {g['max']} ({g['beyond_pace_p50']} / "
              f"{g['beyond_pace_max']}, pace {g['writer_interval']}) | {r['fenced_ms']['p50']} / {r['fenced_ms']['max']} "
              f"| {r['lost']} "
              f"| {p['seeding']} ({p['worst_source']}) / {p['quiet']} | {r['tool_memory_mb']['process_peak']} / "
              f"{r['tool_memory_mb']['tree_peak']}, {r['tool_cpu_s']} |")
    for r in out["runs"]:
        for server, g in sorted(r["gap_ms"].get("long", {}).items()):
            print(f"N={r['n']} {server}: a pause of {g['ms']} ms {g['where']} ({g['from_fence_ms']} ms from its fence, "
                  f"window {g['window_ms']} ms; {g['others_fenced']} other server(s) fenced and "
                  f"{g['others_cutting_outside_window']} cutting over outside their window meanwhile)")
        parts = r["fenced_ms"].get("parts") or {}
        if parts:
            print(f"N={r['n']} fenced window by part, ms p50 / max: "
                  + ", ".join(f"{k} {v['p50']} / {v['max']}" for k, v in parts.items()))
    sc = out["scaling"]
    if sc:
        lo, hi = sc["between"]
        for k, label, target in (("wall_per_mb", "wall time per MB", "<= 1: grows no faster than the data"),
                                 ("gap_p50", "cutover gap p50", "does not grow"),
                                 ("gap_max", "cutover gap max", "does not grow"),
                                 ("source_p999", "sources' p99.9 while copied", "does not grow")):
            v = sc["ratios"][k]
            print(f"{label} at {hi} / at {lo}: {v}  (target {target}; met within {sc['noise_factor']}x: "
                  f"{'yes' if sc['met'][k] else 'NO'})")


if __name__ == "__main__":
    sys.exit(main())
