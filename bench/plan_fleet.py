#!/usr/bin/env python3
"""Planning benchmark: a fleet the size of a classic logical-shard consolidation,
planned from a sizes file (no server is contacted).

The fleet: 120 old servers, 80 of them holding 22 logical shards each (2.2 TB in
all) and 40 holding 10 each (1.1 TB in all), sizes, working sets (20-30% of the
size) and query rates varying per shard around those totals (a fixed seed, so every
run plans the same fleet). The targets: 30 hosts of 16 cores, 64 GB and 240 GB of
SSD, at most 6 instances each.

It writes the sizes file (CSV, 2,160 rows) and the hosts file to a temporary
directory and times the whole `consolidate plan` use case (reading and validating
the file, placing), then again with the what-if table for 3 to 8 instances per
host. Target: the plan under 2 s, 30 hosts used, 4 to 6 instances on each, no
host empty.

    python bench/plan_fleet.py [--json] [--rounds 3] [--strategy instance-per-group|merge]
                               [--instances-per-host K] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import yaml

GROUPS = (("a", 80, 22, 2.2 * 1024 ** 4, 20.0), ("b", 40, 10, 1.1 * 1024 ** 4, 45.0))  # name, servers, shards each, bytes, qps
HOSTS = 30
HOST = {"cores": 16, "memory_gb": 64, "disk_gb": 240, "max_instances": 6, "base_port": 3306,
        "datadir_root": "/var/lib/mysql"}


def write_fleet(directory: Path, seed: int = 7) -> tuple[Path, Path]:
    """(sizes.csv, hosts.yaml) for the fleet above, in `directory`."""
    rng = random.Random(seed)
    lines = ["server,shard,bytes,working_set,qps"]
    for group, servers, shards, group_bytes, qps in GROUPS:
        mean = group_bytes / (servers * shards)
        for s in range(1, servers + 1):
            server = f"shard-{group}{s:02d}"
            for k in range(1, shards + 1):
                size = int(mean * rng.uniform(0.6, 1.4))
                lines.append(f"{server},{group}{s:02d}_shard{k:02d},{size},{int(size * rng.uniform(0.2, 0.3))},"
                             f"{qps * rng.uniform(0.5, 1.5):.1f}")
    sizes = directory / "fleet-sizes.csv"
    sizes.write_text("\n".join(lines) + "\n")
    hosts = directory / "fleet-hosts.yaml"
    hosts.write_text(yaml.safe_dump({"hosts": {f"db{i:02d}": {**HOST, "address": f"db{i:02d}.db.example"}
                                               for i in range(1, HOSTS + 1)}}))
    return sizes, hosts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--strategy", default="instance-per-group")
    ap.add_argument("--instances-per-host", type=int, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="write the fleet files here and keep them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from dbmigrate.app.consolidate.plan import PlanRequest, make_plan

    with tempfile.TemporaryDirectory(prefix="dbm-fleet-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        sizes, hosts = write_fleet(where)
        times, plan_times, result = [], [], None
        for _ in range(max(1, args.rounds)):
            t0 = time.perf_counter()
            make_plan(PlanRequest(sizes=sizes, hosts=hosts, strategy=args.strategy,
                                  instances_per_host=args.instances_per_host))
            plan_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = make_plan(PlanRequest(sizes=sizes, hosts=hosts, strategy=args.strategy,
                                           instances_per_host=args.instances_per_host, what_if="3-8"))
            times.append(time.perf_counter() - t0)
    plan = result.plan
    counts = [len(h.instances) for h in plan.hosts]
    ports = sorted({i.port for i in plan.instances})
    out = {
        "shards": len(plan.shards), "old_servers": len({s.source for s in plan.shards}),
        "strategy": plan.strategy, "instances": len(plan.instances),
        "hosts_used": sum(1 for c in counts if c), "hosts": len(counts),
        "instances_per_host": {"min": min(counts), "max": max(counts)},
        "empty_hosts": sum(1 for c in counts if not c),
        "max_disk_pct": round(100 * max(h.used.disk / h.capacity.disk for h in plan.hosts), 1),
        "max_memory_pct": round(100 * max(h.used.memory / h.capacity.memory for h in plan.hosts), 1),
        "ports": f"{ports[0]}-{ports[-1]}",
        "plan_seconds": {"median": round(statistics.median(plan_times), 3), "max": round(max(plan_times), 3)},
        "with_what_if_seconds": {"median": round(statistics.median(times), 3), "max": round(max(times), 3)},
        "target_seconds": 2.0, "ratio_to_target": round(statistics.median(plan_times) / 2.0, 3),
        "what_if": [{"per_host": r.per_host, "hosts": r.hosts, "instances": r.instances, "bound_by": r.bound_by}
                    for r in result.what_if],
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['shards']} shards on {out['old_servers']} old servers -> {out['instances']} instances "
          f"({out['strategy']}) on {out['hosts_used']} of {out['hosts']} hosts, "
          f"{out['instances_per_host']['min']}-{out['instances_per_host']['max']} per host, "
          f"{out['empty_hosts']} empty; ports {out['ports']}")
    print(f"busiest host: disk {out['max_disk_pct']}%, memory {out['max_memory_pct']}% of capacity")
    print(f"plan from the sizes file: median {out['plan_seconds']['median']:.3f}s, max "
          f"{out['plan_seconds']['max']:.3f}s over {len(times)} rounds; target 2 s (ratio {out['ratio_to_target']:.2f})")
    print(f"plan + what-if 3-8: median {out['with_what_if_seconds']['median']:.3f}s, "
          f"max {out['with_what_if_seconds']['max']:.3f}s")
    for r in out["what_if"]:
        print(f"  what if {r['per_host']} per host: {r['hosts']} hosts, {r['instances']} instances "
              f"(bound by {r['bound_by']})")


if __name__ == "__main__":
    main()
