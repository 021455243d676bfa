"""Use case `consolidate status`: per shard of a plan, where it is served now, from the
plan, the shard routes (DSN file) and a probe of every old server and instance (in
parallel, each once, bounded by the inventory's connect timeout)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbmigrate.config import Inventory, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError, UsageError
from dbmigrate.procedures.consolidate.model import connection_name
from dbmigrate.procedures.consolidate.resources import load_plan
from dbmigrate.procedures.consolidate.status import Probe, ShardStatus, shard_status
from dbmigrate.routing.dsn_file import DsnFileRouter

PARALLEL = 16


@dataclass
class StatusResult:
    shards: list[ShardStatus]
    routes: Path | None

    @property
    def problems(self) -> list[str]:
        return [f"{s.shard}: {p}" for s in self.shards for p in s.problems]

    def to_dict(self) -> dict[str, Any]:
        return {"routes": str(self.routes) if self.routes else None, "shards": [s.to_dict() for s in self.shards],
                "problems": self.problems}


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
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(servers))) as pool:
        probes = dict(zip(servers, pool.map(_probe, servers.values())))
    out = []
    for shard in plan.shards:
        inst = plan.instance_of_shard(shard.name)
        route = DsnFileRouter(shard.name, route_file).current().writer if route_file else None
        out.append(shard_status(shard.name, probes[shard.source], probes[inst.name], route,
                                connection_name(shard.source)))
    return StatusResult(out, route_file)
