"""What a live consolidation board needs to know before the run reports anything: each old
server's shards and target instances, each target host's instances with their planned memory
and disk, and the copy settings in force (throttle, the source's p99.9 limit). Read from the
playbook and its plan file only: nothing connects to a server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dbmigrate.playbook import load_playbook


@dataclass(frozen=True)
class TargetInstance:
    name: str
    host: str
    address: str
    memory_gb: float  # planned: buffer pool plus the instance's overhead
    disk_gb: float  # planned: its shards' data and growth
    buffer_pool_mb: int


@dataclass(frozen=True)
class TargetHost:
    name: str
    instances: list[str]
    memory_used_gb: float
    memory_usable_gb: float
    disk_used_gb: float
    disk_usable_gb: float


@dataclass
class FleetLayout:
    servers: dict[str, list[str]]  # old server -> its shards, in plan order
    targets: dict[str, list[TargetInstance]]  # old server -> the instances that take its shards
    hosts: list[TargetHost]
    instances: dict[str, TargetInstance] = field(default_factory=dict)
    throttle_mb_s: float = 0.0  # the playbook's cap per copy; 0: none
    max_source_p999_ms: float | None = None
    progress_every_s: float = 10.0
    concurrency: int = 1


def fleet_layout(playbook_path: Path) -> FleetLayout | None:
    """The board's layout for a consolidate playbook; None for any other procedure."""
    from dbmigrate.engine.playbook_view import typed_params
    from dbmigrate.procedures.consolidate.context import ConsolidateParams
    from dbmigrate.procedures.consolidate.resources import load_plan, plan_path

    playbook = load_playbook(playbook_path)
    if playbook.procedure != "consolidate":
        return None
    params = typed_params(playbook, ConsolidateParams)
    plan = load_plan(plan_path(playbook, params))
    instances = {i.name: TargetInstance(i.name, i.host, f"{i.address}:{i.port}", round(i.demand.memory, 2),
                                        round(i.demand.disk, 2), i.buffer_pool_mb) for i in plan.instances}
    servers: dict[str, list[str]] = {}
    for shard in plan.shards:
        servers.setdefault(shard.source, []).append(shard.name)
    targets = {src: [instances[i.name] for i in plan.instances if src in i.sources] for src in servers}
    hosts = [TargetHost(h.name, list(h.instances), round(h.used.memory, 2), round(h.usable.memory, 2),
                        round(h.used.disk, 2), round(h.usable.disk, 2)) for h in plan.hosts]
    return FleetLayout(servers=dict(sorted(servers.items())), targets=targets, hosts=hosts, instances=instances,
                       throttle_mb_s=params.seed.throttle_mb_s, max_source_p999_ms=params.seed.max_source_p999_ms,
                       progress_every_s=params.seed.progress_every_s, concurrency=params.fleet.concurrency)
