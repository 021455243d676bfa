"""What a run opens before its first step: inventory, servers, primary, router, lock session.

Every procedure prepares its resources through here and hands them to the run as one
`Prepared`: its typed resources, the dedicated lock session (the run takes the cluster
lock on it) and, on one cluster, the servers that carry the lease; the run closes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from dbmigrate.db.connection import Server
from dbmigrate.engine.playbook_view import PlaybookView
from dbmigrate.engine.step import RunContext
from dbmigrate.exceptions import UsageError
from dbmigrate.procedures.contract import LeaseServers, Prepared
from dbmigrate.procedures.kit.roles import find_primary_of
from dbmigrate.procedures.kit.switchover import SwitchoverServers

if TYPE_CHECKING:
    from dbmigrate.config import Inventory

T = TypeVar("T")


def inventory_of(playbook: PlaybookView) -> "Inventory":
    inventory = playbook.load_inventory()
    if inventory is None:
        raise UsageError("the playbook names no inventory", hint="add `inventory: path/to/inventory.yaml`")
    return inventory


def router_of(inv: "Inventory", cluster: str) -> Any:
    """The cluster's router, or None when the inventory declares none."""
    spec = inv.cluster(cluster)
    if spec.router is None or spec.router.kind == "none":
        return None
    from dbmigrate.routing import router_for

    return router_for(inv, cluster)


@dataclass
class ClusterResources:
    """One cluster's open servers, its primary and router."""

    inventory: "Inventory"
    cluster: str
    servers: dict[str, Server]
    primary: str
    router: Any = None
    lock_session: Optional[Server] = None

    def topology(self, replicas: list[str]) -> SwitchoverServers:
        inv = self.inventory
        return SwitchoverServers(servers=self.servers, repl=inv.replication_credentials(self.cluster), replicas=replicas,
                        repl_addresses={n: inv.replication_address(n) for n in self.servers},
                        tool_sessions=[self.lock_session] if self.lock_session is not None else [])

    def close(self) -> None:
        """Closes the servers; the lock session is closed by the run, after the lock is released."""
        for server in self.servers.values():
            server.close()

    def close_all(self) -> None:
        """For a preparer that gives up before handing the resources over."""
        self.close()
        if self.lock_session is not None:
            self.lock_session.close()


class OnCluster:
    """For a procedure's typed resources that hold one ClusterResources as `cluster`:
    the inventory, router and servers are the cluster's, and closing closes it."""

    cluster: ClusterResources

    @property
    def inventory(self) -> "Inventory":
        return self.cluster.inventory

    @property
    def router(self) -> Any:
        return self.cluster.router

    @property
    def servers(self) -> dict[str, Server]:
        return self.cluster.servers

    def close(self) -> None:
        self.cluster.close()


def open_cluster(playbook: PlaybookView, primary: str | None = None) -> ClusterResources:
    """Open every server of the playbook's cluster. `primary` comes from the run's journaled
    state on resume (the topology is mid-change and discovery could not tell); otherwise
    the one writable server that replicates from nobody. The lock session is on it."""
    inv = inventory_of(playbook)
    spec = inv.cluster(playbook.cluster)
    servers = {name: inv.open(name) for name in spec.servers}
    try:
        primary = primary or find_primary_of(servers)
        return ClusterResources(inventory=inv, cluster=playbook.cluster, servers=servers, primary=primary,
                                router=router_of(inv, playbook.cluster), lock_session=servers[primary].dedicated())
    except BaseException:
        for server in servers.values():
            server.close()
        raise


def handed_over(resources: Any, lock_session: Server | None,
                cluster: ClusterResources | None = None) -> Prepared:
    """What a preparer returns to the run: the typed resources, the lock session and,
    for a procedure on one cluster, the servers that carry the cluster lease."""
    lease = LeaseServers(cluster.servers, cluster.primary) if cluster is not None else None
    return Prepared(resources=resources, lock_session=lock_session, lease_servers=lease)


def typed(ctx: RunContext[Any, Any], cls: type[T]) -> T | None:
    """The run's typed resources, or None when there are none (`plan` builds without servers)."""
    value = ctx.resources
    return value if isinstance(value, cls) else None


def required(ctx: RunContext[Any, Any], cls: type[T]) -> T:
    value = typed(ctx, cls)
    if value is None:
        raise UsageError(f"this step needs the run's {cls.__name__}; they were not prepared",
                         hint="run the playbook with `dbmigrate run` (plan connects to nothing)")
    return value
