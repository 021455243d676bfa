"""Checksum as a use case: pt-table-checksum on a cluster's primary, differences per replica."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dbmigrate.config import load_inventory
from dbmigrate.procedures.kit.roles import find_primary_of
from dbmigrate.tools.pt_connect import ChecksumReport, table_checksum

__all__ = ["ChecksumOutcome", "ChecksumReport", "checksum_cluster"]


@dataclass
class ChecksumOutcome:
    primary: str
    replicas: list[str]
    report: ChecksumReport


def checksum_cluster(inventory: Path, cluster: str, databases: list[str]) -> ChecksumOutcome:
    """Open every server of `cluster`, find its primary and compare each replica's data with it."""
    inv = load_inventory(inventory)
    servers = {n: inv.open(n) for n in inv.cluster(cluster).servers}
    try:
        primary = find_primary_of(servers)
        report = table_checksum(servers[primary], [s for n, s in servers.items() if n != primary], databases)
        replicas = [n for n in servers if n != primary]
    finally:
        for s in servers.values():
            s.close()
    return ChecksumOutcome(primary, replicas, report)
