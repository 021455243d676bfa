"""Who is the primary: the one decision every procedure makes before it touches a cluster."""

from __future__ import annotations

from typing import Callable, Iterable

from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError


def find_primary(names: Iterable[str], inspector: Callable[[str], Inspector]) -> str:
    """The one writable server that replicates from nobody; refuse anything else."""
    writable, unreachable = [], []
    for name in names:
        try:
            insp = inspector(name)
            st = insp.replica_status()
            if not insp.read_only() and (st is None or not st.source_host):
                writable.append(name)
        except DbmigrateError as e:
            unreachable.append(f"{name} ({e.message})")
    if len(writable) == 1:
        return writable[0]
    if not writable:
        raise DbmigrateError("no writable primary found in the cluster" +
                             (f"; unreachable: {', '.join(unreachable)}" if unreachable else ""),
                             hint="dbmigrate topology show --inventory FILE --cluster NAME")
    raise DbmigrateError(f"more than one writable primary: {', '.join(writable)}",
                         hint="set read_only=ON on the one that must not take writes before any switchover")


def find_primary_of(servers: dict) -> str:
    """find_primary over open Server objects by name."""
    return find_primary(servers, lambda name: Inspector(servers[name]))
