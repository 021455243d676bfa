"""Topology as use cases: discover a cluster (from the inventory or by crawling from a seed
address), draw it, and wire fresh servers into one."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from dbmigrate.config import load_inventory
from dbmigrate.db import credentials as creds_mod
from dbmigrate.db.connection import Server
from dbmigrate.exceptions import UsageError
from dbmigrate.hostname import host_problem
from dbmigrate.topology.discovery import Cluster, discover, normalize_address, split_address
from dbmigrate.topology.find import discover_inventory
from dbmigrate.topology.render import cluster_tree

__all__ = ["Cluster", "cluster_tree", "discover_cluster", "wire_cluster"]


def discover_cluster(inventory: Optional[Path], cluster: Optional[str], seed: Optional[str],
                     use_orchestrator: bool = True) -> Cluster:
    """An inventory cluster, or a crawl from a seed address (credentials from the inventory's
    entry or defaults, else ~/.my.cnf). The cluster holds open servers: use it as a context manager."""
    if seed:
        host, port = split_address(seed)
        if host_problem(host):
            raise UsageError(f"--seed {seed}: the host {host_problem(host)}", hint="give an address such as 10.0.0.5:3306")
        if inventory:
            inv = load_inventory(inventory)
            try:
                _, spec = inv.find_server(f"{host}:{port}")
                credentials = inv.credentials_for(spec)
            except UsageError:  # a server the inventory does not list: its default credentials
                if inv.defaults.credentials is None:
                    raise UsageError(f"{seed} is not in {inventory} and it has no defaults.credentials",
                                     hint="add defaults.credentials to the inventory") from None
                credentials = inv.defaults.credentials.resolve(inv.base)
            timeouts: dict[str, Any] = dict(connect_timeout=inv.defaults.connect_timeout,
                                            read_timeout=inv.defaults.read_timeout)
            names = {normalize_address(s.host, s.port): n for c in inv.clusters.values() for n, s in c.servers.items()}
        else:
            credentials = creds_mod.from_option_file(None)
            timeouts, names = {}, {}
        seed_server = Server(names.get(normalize_address(host, port), seed), host, port, credentials, **timeouts)
        return discover(seed_server, names=names, cluster_name=cluster)
    if not (inventory and cluster):
        raise UsageError("give --inventory FILE --cluster NAME, or --seed HOST:PORT",
                         hint="--seed crawls from any server; --inventory alone supplies credentials to it")
    return discover_inventory(load_inventory(inventory), cluster, use_orchestrator=use_orchestrator)


def wire_cluster(inventory: Path, cluster: str, root_user: str, root_password_env: str) -> list[str]:
    """Accounts from the inventory's credentials and GTID replication from the server marked
    `role: primary`, on fresh servers (e.g. docker compose); returns what changed."""
    from dbmigrate.topology.wire import wire

    inv = load_inventory(inventory)
    root = creds_mod.from_environment("", root_password_env, user=root_user)
    return wire(inv, cluster, root)
