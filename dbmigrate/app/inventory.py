"""Inventory check as a use case: connect to every server and say what it is."""

from __future__ import annotations

from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.db.flavor import detect
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
