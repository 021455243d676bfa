"""Which Host object reaches a server, from the inventory's access declarations.

Order: the server's own `access:`, then `host_access:` for its host_name or
host, then the consolidation `hosts:` entry named by its host_name, then
`defaults.access`. With none of these, a server on a loopback address (or a
unix socket) runs on this machine and is `local`; any other host is left
without access, and every file operation on it says to declare one, because
guessing ssh settings for a production host is worse than asking.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dbmigrate.hosts.base import Host
from dbmigrate.hosts.docker import DockerHost
from dbmigrate.hosts.local import LocalHost
from dbmigrate.hosts.none import NoAccessHost
from dbmigrate.hosts.ssh import SshHost, SshSettings

if TYPE_CHECKING:
    from dbmigrate.config import Access, Inventory

_cache: dict[tuple[str, SshSettings], Host] = {}


class Planned(Protocol):
    """A planned consolidation instance, as far as its host goes."""

    name: str
    host: str
    address: str


def is_this_machine(host: str) -> bool:
    """A loopback address, or this machine's own name (the tool runs on the database host)."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return host in (socket.gethostname(), socket.getfqdn())
    except OSError:
        return False


def declared_access(inventory: Inventory, server_name: str) -> Access | None:
    """The access block that applies to a server, or None when nothing is declared."""
    _, spec = inventory.find_server(server_name)
    if spec.access is not None:
        return spec.access
    for key in (spec.host_name, spec.host):
        if key and key in inventory.host_access:
            return inventory.host_access[key]
    if spec.host_name and spec.host_name in inventory.hosts and inventory.hosts[spec.host_name].access:
        return inventory.hosts[spec.host_name].access
    return inventory.defaults.access


def slow_log_source(inventory: Inventory, server_name: str) -> str:
    """Where a slow-log window of this server is read: its file (through the host) or, where the
    inventory declares `access: {kind: none, slow_log: table}`, the server's log table over SQL."""
    access = declared_access(inventory, server_name)
    return "table" if access is not None and getattr(access, "slow_log", None) == "table" else "file"


def _path(base: Path, p: str | None) -> str | None:
    if not p:
        return None
    q = Path(os.path.expanduser(p))
    return str(q if q.is_absolute() else base / q)


def host_for(inventory: Inventory, server_name: str) -> Host:
    """The host of `server_name` (given by name or host:port). SSH hosts are reused, with their connection."""
    _, spec = inventory.find_server(server_name)
    name = inventory.server_name(spec)
    access = declared_access(inventory, server_name)
    if access is None and spec.socket:
        return LocalHost(f"{name} on {spec.host_name or spec.host}")
    return host_for_access(inventory, name, spec.host_name or spec.host, spec.host, access)


def host_for_planned(inventory: Inventory, instance: Planned) -> Host:
    """The host of a planned consolidation instance: its `hosts:` entry's access, else `defaults.access`."""
    spec = inventory.hosts.get(instance.host)
    access = (spec.access if spec is not None and spec.access else None) or inventory.defaults.access
    return host_for_access(inventory, instance.name, instance.host, instance.address, access)


def host_for_access(inventory: Inventory, name: str, address: str, ip: str, access: Access | None) -> Host:
    """A Host for `name` (a server on `address`, reached at `ip`) from an access block (None: undeclared)."""
    label = f"{name} on {address}"
    if access is None:
        if is_this_machine(ip):
            return LocalHost(label)
        return NoAccessHost(label, declared=False)
    if access.kind == "local":
        return LocalHost(label)
    if access.kind == "none":
        return NoAccessHost(label)
    if access.kind == "docker":
        return DockerHost(f"{name} in container {access.container}", access.container, access.engine)
    settings = SshSettings(
        address=access.address or address, user=access.user, port=access.port,
        identity_file=_path(inventory.base, access.identity_file), jump_host=access.jump_host,
        known_hosts_file=_path(inventory.base, access.known_hosts_file),
        strict_host_key_checking=access.strict_host_key_checking, connect_timeout=access.connect_timeout,
        control_persist=access.control_persist, options=tuple(access.options.items()))
    key = (label, settings)
    if key not in _cache:
        _cache[key] = SshHost(f"{name} on {settings.address}", settings)
    return _cache[key]
