"""Capacity plan for consolidating logical shards onto multi-instance hosts.

`plan(shards, hosts, settings, strategy)` is pure: demands in, placement out,
deterministic (ties broken by name), and it refuses a plan that does not fit,
naming the resource and the shortfall. Where the demands come from: `measure.py`
(live, the old servers in parallel) or `sizes.py` (a file of measured sizes).
How shards become instances and instances land on hosts: `placement.py`. What the
plan holds (names, ports, server ids, settings): `model.py`.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Literal

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.consolidate import placement
from dbmigrate.procedures.consolidate.demand import (
    GB,
    MB,
    RESOURCES,
    Demand,
    PlanDoesNotFit,
    ShardDemand,
    capacity,
    dominant,
    fmt,
    shard_demand,
    total,
    usable,
)
from dbmigrate.procedures.consolidate.measure import measure_server, measure_shards, split_by_size, split_query_rate
from dbmigrate.procedures.consolidate.model import (
    ConsolidationPlan,
    HostUsage,
    PlannedInstance,
    connection_name,
    instance_config,
    instance_name,
    instance_port,
    plan_from_dict,
)

Strategy = Literal["instance-per-group", "merge"]
STRATEGIES: tuple[str, ...] = ("instance-per-group", "merge")

__all__ = ["GB", "MB", "RESOURCES", "STRATEGIES", "ConsolidationPlan", "Demand", "HostUsage", "PlanDoesNotFit",
           "PlannedInstance", "ShardDemand", "connection_name", "instance_config", "measure_server",
           "measure_shards", "plan", "plan_from_dict", "shard_demand", "split_by_size", "split_query_rate",
           "usable"]


def _check_totals(need: Demand, hosts: dict[str, HostSpec], settings: PlanningSpec) -> None:
    offered = total(usable(h, settings) for h in hosts.values())
    short = [(r, need.get(r) - offered.get(r)) for r in RESOURCES if need.get(r) > offered.get(r) + 1e-9]
    if short:
        parts = [f"{r}: need {fmt(r, need.get(r))}, the hosts offer {fmt(r, offered.get(r))} usable "
                 f"(short by {fmt(r, s)})" for r, s in short]
        raise PlanDoesNotFit("the shards do not fit on the target hosts: " + "; ".join(parts),
                             hint=f"add hosts or capacity, or lower planning.headroom_pct "
                                  f"({settings.headroom_pct:g}%) / growth_pct ({settings.growth_pct:g}%)")


def validate_inputs(shards: list[ShardDemand], hosts: dict[str, HostSpec], strategy: str,
                    instances_per_host: int | None) -> None:
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy '{strategy}'", hint=f"use one of: {', '.join(STRATEGIES)}")
    if not hosts:
        raise UsageError("no target hosts described", hint="add a `hosts:` section (cores, memory_gb, disk_gb, max_instances)")
    if not shards:
        raise UsageError("no shards to place", hint="list each old server's schemas under `shards:` in the inventory")
    if instances_per_host is not None and not 1 <= instances_per_host <= 64:
        raise UsageError(f"--instances-per-host {instances_per_host}: give 1 to 64")
    counts = Counter(s.name for s in shards)
    dup = sorted(name for name, n in counts.items() if n > 1)
    if dup:
        raise UsageError(f"shard names must be unique across old servers: {', '.join(dup)}")


def plan(shards: Iterable[ShardDemand], hosts: dict[str, HostSpec], settings: PlanningSpec | None = None,
         strategy: str = "instance-per-group", instances_per_host: int | None = None,
         demands: dict[str, Demand] | None = None) -> ConsolidationPlan:
    """Place shards in instances and instances on hosts, or raise PlanDoesNotFit.

    `instances_per_host` caps every host at that many instances (instead of each host's
    max_instances); with `merge` it is also the target: hosts x K instances of about
    equal size. `demands` (per shard, from these settings) saves recomputing them."""
    settings = settings or PlanningSpec()
    shards = sorted(shards, key=lambda s: s.name)
    validate_inputs(shards, hosts, strategy, instances_per_host)
    demands = demands or {s.name: shard_demand(s, settings) for s in shards}
    overhead = Demand(memory=settings.instance_overhead_mb / 1024)
    _check_totals(total(demands.values()), hosts, settings)
    limits = {h: instances_per_host or spec.max_instances for h, spec in sorted(hosts.items())}

    # An instance can be no bigger than one host can hold: per resource, the biggest host's usable share.
    ref = Demand(*(max(usable(h, settings).get(r) for h in hosts.values()) for r in RESOURCES))
    cap = ref.minus(overhead)
    for s in shards:
        if not demands[s.name].fits(cap):
            worst = max(RESOURCES, key=lambda r: demands[s.name].get(r) - cap.get(r))
            raise PlanDoesNotFit(
                f"shard {s.name} alone needs {fmt(worst, demands[s.name].get(worst))} of {worst}; no host offers "
                f"more than {fmt(worst, cap.get(worst))} to one instance "
                f"(short by {fmt(worst, demands[s.name].get(worst) - cap.get(worst))})",
                hint="a shard cannot be split by this tool: use a bigger host or split the schema first")

    if strategy == "merge" and instances_per_host:
        groups = placement.merge_to_count(shards, demands, cap, instances_per_host * len(hosts))
    elif strategy == "merge":
        groups = placement.first_fit_decreasing([(s.name, demands[s.name]) for s in shards], cap)
    else:
        groups = placement.group_by_source(shards, demands, cap)
    named = [(g, total([overhead, *(demands[n] for n in g)])) for g in groups]

    host_names = sorted(hosts)
    room = {h: usable(hosts[h], settings) for h in host_names}
    warnings: list[str] = []
    placed = placement.balanced(named, host_names, room, limits, ref)
    if placed is None:
        placed = placement.first_fit(named, host_names, room, limits, ref)
        if placed is None:
            raise PlanDoesNotFit(_no_host_message(named, hosts, room, limits),
                                 hint="add a host, raise max_instances, or use --strategy merge to share instances")
        warnings.append("an even spread did not fit: instances were packed first-fit, so hosts are unevenly loaded")
    empty = [h for h in host_names if not placed[h]]
    if empty:
        warnings.append(f"{len(empty)} of {len(host_names)} hosts get no instance ({', '.join(empty)}): "
                        f"{len(named)} instance(s) for {len(host_names)} hosts; drop those hosts, or use "
                        "--strategy merge --instances-per-host K to spread the shards over every host")
    return _assemble(strategy, settings, shards, hosts, placed, room, warnings, instances_per_host)


def _assemble(strategy: str, settings: PlanningSpec, shards: list[ShardDemand], hosts: dict[str, HostSpec],
              placed: dict[str, list[placement.Named]], room: dict[str, Demand], warnings: list[str],
              instances_per_host: int | None) -> ConsolidationPlan:
    by_name = {s.name: s for s in shards}
    instances: list[PlannedInstance] = []
    usage: list[HostUsage] = []
    for h in sorted(hosts):
        spec = hosts[h]
        host_instances: list[PlannedInstance] = []
        for slot, (g, d) in enumerate(sorted(placed[h], key=lambda gd: gd[0]), 1):
            name = instance_name(h, slot)
            host_instances.append(PlannedInstance(
                name=name, host=h, address=spec.address, port=instance_port(spec, slot),
                datadir=f"{spec.datadir_root.rstrip('/')}/{name}", shards=list(g),
                sources=sorted({by_name[n].source for n in g}), demand=d,
                working_set_gb=sum(by_name[n].working_set_bytes for n in g) / GB,
                shard_sources={n: by_name[n].source for n in g}, sandbox=spec.sandbox,
                server_id=settings.server_id_base + len(instances) + len(host_instances) + 1,
                socket=f"{spec.run_dir.rstrip('/')}/{name}.sock", slot=slot))
        share_buffer_pool(host_instances, room[h], settings)
        for inst in host_instances:
            inst.config = instance_config(inst)
        instances.extend(host_instances)
        used = total(d for _, d in placed[h])
        usage.append(HostUsage(h, capacity(spec), room[h], used, [i.name for i in host_instances],
                               instances_per_host or spec.max_instances))
    record = {**settings.model_dump(), **({"instances_per_host": instances_per_host} if instances_per_host else {})}
    return ConsolidationPlan(strategy, record, shards, instances, usage, warnings)


def _no_host_message(named: list[placement.Named], hosts: dict[str, HostSpec], room: dict[str, Demand],
                     limits: dict[str, int]) -> str:
    """Which instance did not fit, and why each host turned it down (as first-fit leaves them)."""
    used = {h: Demand() for h in hosts}
    count = {h: 0 for h in hosts}
    ref = Demand(*(max(r.get(x) for r in room.values()) for x in RESOURCES))
    for g, d in sorted(named, key=lambda gd: (-dominant(gd[1], ref), gd[0])):
        h = next((h for h in sorted(hosts) if count[h] < limits[h] and (used[h] + d).fits(room[h])), None)
        if h is not None:
            used[h], count[h] = used[h] + d, count[h] + 1
            continue
        reasons = []
        for h in sorted(hosts):
            if count[h] >= limits[h]:
                reasons.append(f"{h} already runs max_instances={limits[h]}")
                continue
            free = room[h].minus(used[h])
            r = max(RESOURCES, key=lambda r: d.get(r) - free.get(r))
            reasons.append(f"{h} lacks {fmt(r, d.get(r) - free.get(r))} of {r} "
                           f"(needs {fmt(r, d.get(r))}, {fmt(r, max(0.0, free.get(r)))} left)")
        return (f"no host can take the instance for {', '.join(g)} (disk {d.disk:.2f} GB, memory {d.memory:.2f} GB, "
                f"cpu {d.cpu:.2f} cores): " + "; ".join(reasons))
    return "the instances do not fit on the hosts"


def share_buffer_pool(instances: list[PlannedInstance], host_usable: Demand, settings: PlanningSpec) -> None:
    """Each instance's buffer pool: the host's usable memory (after per-instance overhead)
    split in proportion to working sets, so the hottest instance gets the most."""
    if not instances:
        return
    budget_mb = host_usable.memory * 1024 - settings.instance_overhead_mb * len(instances)
    total_ws = sum(i.working_set_gb for i in instances)
    for i in instances:
        share = i.working_set_gb / total_ws if total_ws > 0 else 1 / len(instances)
        # InnoDB rounds the pool to whole chunks; whole 8 MB steps keep the figures honest.
        i.buffer_pool_mb = max(settings.min_buffer_pool_mb, int(budget_mb * share) // 8 * 8)
