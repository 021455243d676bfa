"""Inventory check as a use case: connect to every server and say what it is."""

from __future__ import annotations

from pathlib import Path

from dbmigrate.config import Inventory, load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.flavor import detect
from dbmigrate.db.inspector import Inspector
from dbmigrate.procedures.kit.preflight_checks import global_privileges
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.topology.probe import ServerFacts, probe


def check_inventory(path: Path, cluster: str | None = None) -> list[tuple[str, ServerFacts]]:
    inv = load_inventory(path)
    out = []
    for cname, c in inv.clusters.items():
        if cluster and cname != cluster:
            continue
        for sname in c.servers:
            try:
                with inv.open(sname) as server:
                    facts = probe(server)
                    facts.__dict__["missing_privileges"] = missing_privileges(inv, cname, server)
            except DbmigrateError as e:
                spec = c.servers[sname]
                facts = ServerFacts(sname, f"{spec.host}:{spec.port}", error=e.message + (f" ({e.hint})" if e.hint else ""))
            out.append((cname, facts))
    by_addr = {f.address: f for _, f in out}
    for _, f in out:
        if f.source and f.source in by_addr:
            src = by_addr[f.source]
            f.__dict__["behind"] = _behind(src, f)
    return out


def _behind(src: ServerFacts, rep: ServerFacts) -> dict[str, int]:
    fl = detect(rep.version or src.version)
    return fl.behind(src.gtid_binlog_pos, rep.gtid_executed)


def validate_inventory(path: Path) -> tuple[int, int]:
    """The file alone, no connection: (clusters, servers) once it is valid."""
    inv = load_inventory(path)
    return len(inv.clusters), sum(len(c.servers) for c in inv.clusters.values())


def missing_privileges(inv: Inventory, cluster: str, server: Server) -> dict[str, list[str]]:
    """The least privileges (docs/operations/privileges.md) the tool's admin account (logged in
    here) and the cluster's replication account lack on this server, per account."""
    insp = Inspector(server)
    out: dict[str, list[str]] = {}
    try:
        out["admin"] = server.flavor.missing_privileges("admin", global_privileges(insp.own_grants()))
    except DbmigrateError as e:
        out["admin"] = [f"cannot read its grants: {e.message}"]
    try:
        repl = inv.replication_credentials(cluster).user
    except DbmigrateError:
        return out  # no replication account declared: nothing to check
    try:
        hosts = insp.user_hosts(repl)
        if not hosts:
            out["replication"] = [f"account '{repl}' does not exist here"]
        else:
            granted = set().union(*(global_privileges(insp.grants(repl, h)) for h in hosts))
            out["replication"] = server.flavor.missing_privileges("replication", granted)
    except DbmigrateError as e:
        out["replication"] = [f"cannot read its grants: {e.message}"]
    return out
