"""What-if: for each count of instances per host, how many hosts of one model are needed,
and what each host carries (CPU, memory, disk, buffer pool per instance).

Each row is a real plan (the same placement as `consolidate plan`) on N copies of the
model host, N being the fewest that fit: it starts from the bound that totals and
instance counts give and adds hosts until the placement fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.consolidate import placement
from dbmigrate.procedures.consolidate.demand import RESOURCES, Demand, PlanDoesNotFit, ShardDemand, shard_demand, total, usable
from dbmigrate.procedures.consolidate.plan import plan

MAX_EXTRA_HOSTS = 64  # beyond the lower bound, a count that still does not fit is reported as such


@dataclass
class WhatIfRow:
    per_host: int
    hosts: int | None  # None: no number of model hosts fits (see note)
    instances: int = 0
    bound_by: str = ""  # what set the lower bound on hosts (instances, disk, memory, cpu), "+packing" if above it
    max_used: Demand = Demand()  # the busiest host, per resource
    capacity: Demand = Demand()
    buffer_pool_mb: tuple[int, int] = (0, 0)  # smallest and largest instance's pool
    empty_hosts: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        pct = {r: round(100 * self.max_used.get(r) / self.capacity.get(r), 1) if self.capacity.get(r) else None
               for r in RESOURCES}
        return {"instances_per_host": self.per_host, "hosts": self.hosts, "instances": self.instances,
                "bound_by": self.bound_by, "max_per_host": {r: round(self.max_used.get(r), 3) for r in RESOURCES},
                "max_per_host_pct": pct, "buffer_pool_mb": list(self.buffer_pool_mb),
                "empty_hosts": self.empty_hosts, "note": self.note}


def parse_range(text: str) -> list[int]:
    """'3-8' -> [3..8]; '4,6' -> [4, 6]; '5' -> [5]."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if sep else int(lo)
            if a < 1 or b < a or b > 64:
                raise ValueError
            out.update(range(a, b + 1))
    except ValueError:
        raise UsageError(f"--what-if {text!r}: give instance counts per host like 3-8 or 4,6 (1 to 64)") from None
    return sorted(out)


def _group_count(shards: list[ShardDemand], model: HostSpec, settings: PlanningSpec, strategy: str) -> int | None:
    """Instances that instance-per-group makes (fixed whatever the host count); None for merge."""
    if strategy != "instance-per-group":
        return None
    demands = {s.name: shard_demand(s, settings) for s in shards}
    cap = usable(model, settings).minus(Demand(memory=settings.instance_overhead_mb / 1024))
    return len(placement.group_by_source(shards, demands, cap))


def lower_bound(need: Demand, room: Demand, per_host: int, instances: int | None,
                overhead_gb: float) -> tuple[int, str]:
    """The fewest hosts that totals allow, and which figure set it."""
    bounds = {"instances": math.ceil(instances / per_host) if instances else 1}
    for r in RESOURCES:
        # memory: each host also carries the overhead of its instances
        offer = room.get(r) - (overhead_gb * per_host if r == "memory" else 0)
        if need.get(r) > 0:
            bounds[r] = math.ceil(need.get(r) / offer - 1e-9) if offer > 0 else 10 ** 9
    by = max(bounds, key=lambda k: (bounds[k], k == "instances"))
    return max(1, bounds[by]), by


def what_if(shards: list[ShardDemand], model: HostSpec, settings: PlanningSpec, strategy: str,
            counts: list[int]) -> list[WhatIfRow]:
    demands = {s.name: shard_demand(s, settings) for s in shards}
    need = total(demands.values())
    room = usable(model, settings)
    groups = _group_count(shards, model, settings, strategy)
    rows = []
    for k in counts:
        start, by = lower_bound(need, room, k, groups, settings.instance_overhead_mb / 1024)
        if start >= 10 ** 9:
            rows.append(WhatIfRow(k, None, bound_by=by, capacity=Demand(model.disk_gb, model.memory_gb, model.cores),
                                  note=f"{k} instances' overhead leaves no memory on this host"))
            continue
        row, last = None, ""
        for n in range(start, start + MAX_EXTRA_HOSTS + 1):
            hosts = {f"h{i:03d}": model.model_copy(update={"max_instances": k, "sandbox": None})
                     for i in range(1, n + 1)}
            try:
                p = plan(shards, hosts, settings, strategy, instances_per_host=k, demands=demands)
            except PlanDoesNotFit as e:
                last = e.message
                continue
            used = [h.used for h in p.hosts]
            pools = [i.buffer_pool_mb for i in p.instances]
            row = WhatIfRow(k, n, len(p.instances), by if n == start else f"{by}+packing",
                            Demand(*(max(u.get(r) for u in used) for r in RESOURCES)),
                            Demand(model.disk_gb, model.memory_gb, model.cores), (min(pools), max(pools)),
                            sum(1 for h in p.hosts if not h.instances))
            break
        rows.append(row or WhatIfRow(k, None, bound_by=by, capacity=Demand(model.disk_gb, model.memory_gb, model.cores),
                                     note=f"does not fit on {start + MAX_EXTRA_HOSTS} hosts: {last}"))
    return rows
