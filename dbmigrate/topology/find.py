"""Discover an inventory cluster from the source it names: orchestrator's API, or probing the servers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dbmigrate.exceptions import AuthFailed, ConnectionFailed, DbmigrateError
from dbmigrate.topology.discovery import Cluster, discover, inventory_names
from dbmigrate.topology.orchestrator import OrchestratorClient, cluster_from_instances

if TYPE_CHECKING:
    from dbmigrate.config import Inventory


def discover_inventory(inventory: Inventory, cluster: str, *, use_orchestrator: bool = True) -> Cluster:
    """Discover an inventory cluster: through orchestrator when the cluster names one, else by probing."""
    spec = inventory.cluster(cluster)
    if use_orchestrator and spec.orchestrator_url:
        with OrchestratorClient(spec.orchestrator_url) as orch:
            first = next(iter(spec.servers.values()))
            oname = spec.orchestrator_cluster or orch.cluster_name_of(first.host, first.port)
            return cluster_from_instances(orch.cluster(oname), name=cluster,
                                          names=inventory_names(inventory, cluster))
    names = inventory_names(inventory, cluster)
    order = [n for n in ([spec.primary_hint()] if spec.primary_hint() else []) + list(spec.servers) if n]
    last_error: DbmigrateError | None = None
    refused: list[AuthFailed] = []
    for sname in dict.fromkeys(order):
        server = inventory.open(sname)
        try:
            server.connect()
        except DbmigrateError as e:
            last_error = e
            if isinstance(e, AuthFailed):
                refused.append(e)
            server.close()
            continue
        others = [a for a, n in names.items() if n != sname]
        shard_servers = [f"{s.host}:{s.port}" for s in spec.servers.values() if s.shards]
        return discover(server, names=names, also=others, cluster_name=cluster, shard_servers=shard_servers)
    if refused:  # they answered: the login, not the network, is what to fix
        raise AuthFailed(f"{len(refused)} of {len(dict.fromkeys(order))} server(s) of cluster '{cluster}' refused the tool's login: "
                         f"{refused[0].message}", hint=refused[0].hint or "check the inventory's credentials")
    raise ConnectionFailed(f"no server of cluster '{cluster}' answered: {last_error.message if last_error else '?'}",
                           hint="check that the servers run and that the inventory's credentials are right")
