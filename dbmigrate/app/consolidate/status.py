"""Use case `consolidate status`: per shard of a plan, where it is served now, from the
plan, the shard routes and a probe of every old server and instance (in parallel, each
once, bounded by the inventory's connect timeout). A shard's route is its relay when the
cluster names one in `shard_routers` (where that relay sends writes now: its backend, read
on its control socket), else the DSN file. A relay that does not answer is a problem of
its shard, never the end of the status."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.config import Inventory, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.procedures.consolidate.model import connection_name
from dbmigrate.procedures.consolidate.resources import load_plan
from dbmigrate.procedures.consolidate.status import Probe, ShardStatus, shard_status
from dbmigrate.routing.base import RouterError, same_address
from dbmigrate.routing.dsn_file import DsnFileRouter
from dbmigrate.routing.relay import RelayRouter

PARALLEL = 16


@dataclass
class RelayRead:
    """Where one shard's relay sends writes (`backend`), or why that is not known (`error`)."""

    address: str
    backend: str | None = None
    error: str | None = None


@dataclass
class StatusResult:
    shards: list[ShardStatus]
    routes: Path | None
    relays: dict[str, str] = field(default_factory=dict)  # shard -> the address of its relay

    @property
    def problems(self) -> list[str]:
        return [f"{s.shard}: {p}" for s in self.shards for p in s.problems]

    def to_dict(self) -> dict[str, Any]:
        return {"routes": str(self.routes) if self.routes else None, "relays": dict(self.relays),
                "shards": [s.to_dict() for s in self.shards], "problems": self.problems}


def _probe(server: Server) -> Probe:
    p = Probe(server.name, server.address)
    try:
        with server:
            insp = Inspector(server)
            p.read_only = insp.read_only()
            p.schemas = set(insp.schemas())
            for name in insp.connection_names():
                st = insp.named_replica_status(name)
                if st is not None:
                    p.connections[name] = st
    except DbmigrateError as e:
        p.error = e.message
    return p


def _read_relay(shard: str, spec: Any, timeout: float) -> RelayRead:
    out = RelayRead(spec.address)
    try:
        out.backend = RelayRouter(shard, spec.control_socket, spec.address, timeout=timeout).current().writer
    except RouterError as e:
        out.error = e.message
    return out


def _relay_route(read: RelayRead, old: Probe, inst: Probe) -> str | None:
    """The relay's backend, spelled as the old server's or the instance's address when it is one
    of them (a host name against its IP address)."""
    if read.backend is None:
        return None
    for p in (old, inst):
        if same_address(read.backend, p.address):
            return p.address
    return read.backend


def _routes(inv: Inventory, cluster: str | None, routes: Path | None) -> Path | None:
    if routes:
        return routes
    for cname, c in inv.clusters.items():
        if (cluster in (None, cname)) and c.router is not None and c.router.kind == "dsn-file":
            p = Path(c.router.path).expanduser()
            return p if p.is_absolute() else inv.base / p
    return None


def consolidation_status(plan_file: Path, inventory: Path, routes: Path | None = None,
                         cluster: str | None = None) -> StatusResult:
    plan = load_plan(plan_file)
    inv = load_inventory(inventory)
    for src in sorted({s.source for s in plan.shards}):
        inv.find_server(src)  # an old server the inventory does not know is bad input, said at once
    if routes is not None and not routes.exists():
        raise UsageError(f"routes file {routes} does not exist")
    route_file = _routes(inv, cluster, routes)
    admin = inv.defaults.credentials
    if admin is None:
        raise UsageError(f"{inv.path}: defaults.credentials is needed to reach the new instances")
    creds = admin.resolve(inv.base)
    servers = {src: inv.open(src) for src in sorted({s.source for s in plan.shards})}
    for i in plan.instances:
        servers[i.name] = Server(i.name, i.address, i.port, creds, connect_timeout=inv.defaults.connect_timeout,
                                 read_timeout=inv.defaults.read_timeout, retries=0)
    relay_specs = {s.name: spec for s in plan.shards
                   if (spec := inv.cluster(inv.find_server(s.source)[0]).shard_routers.get(s.name)) is not None}
    timeout = float(inv.defaults.connect_timeout)
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(servers) + len(relay_specs))) as pool:
        probes = dict(zip(servers, pool.map(_probe, servers.values())))
        reads = dict(zip(relay_specs, pool.map(lambda kv: _read_relay(kv[0], kv[1], timeout), relay_specs.items())))
    out = []
    for shard in plan.shards:
        inst = plan.instance_of_shard(shard.name)
        old, new = probes[shard.source], probes[inst.name]
        read = reads.get(shard.name)
        if read is not None:
            route = _relay_route(read, old, new)
            unread = None if read.error is None else f"its relay at {read.address} does not answer: {read.error}"
        else:
            route = DsnFileRouter(shard.name, route_file).current().writer if route_file else None
            unread = None
        out.append(shard_status(shard.name, old, new, route, connection_name(shard.source), route_unread=unread))
    return StatusResult(out, route_file, {sh: r.address for sh, r in reads.items()})
