"""Traffic routers: where applications send writes and reads, and how to move them.

`router_for(inventory, cluster)` builds the router named in the cluster's
`router:` section (haproxy, dsn-file, relay or none).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dbmigrate.routing.base import NoRouting, RouterError, RouteState, Router, ServerRef, as_ref
from dbmigrate.routing.dsn_file import DsnFileRouter
from dbmigrate.routing.haproxy import HAProxyRouter
from dbmigrate.routing.relay import RelayRouter

if TYPE_CHECKING:  # pragma: no cover
    from dbmigrate.config import Inventory

__all__ = ["Router", "RouteState", "RouterError", "ServerRef", "as_ref", "router_for",
           "HAProxyRouter", "DsnFileRouter", "NoRouting", "RelayRouter"]


def _path(base: Path, value: str) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else base / p)


def router_for(inventory: "Inventory", cluster: str) -> Router:
    """The router of `cluster`; relative paths are relative to the inventory file."""
    spec = inventory.cluster(cluster).router
    if spec is None or spec.kind == "none":
        return NoRouting(cluster)
    if spec.kind == "dsn-file":
        return DsnFileRouter(cluster, _path(inventory.base, spec.path))
    if spec.kind == "haproxy":
        sock = spec.admin_socket
        if ":" not in sock or "/" in sock:  # a unix socket path, not host:port
            sock = _path(inventory.base, sock)
        return HAProxyRouter(cluster, sock, spec.writer_backend, spec.reader_backend,
                             _path(inventory.base, spec.state_file) if spec.state_file else None,
                             writer_address=f"{spec.address}:{spec.writer_port}" if spec.writer_port else None)
    if spec.kind == "relay":
        return RelayRouter(cluster, _path(inventory.base, spec.control_socket), spec.address)
    raise RouterError(f"unknown router kind {spec.kind!r} for cluster {cluster}")  # pragma: no cover - model forbids it
