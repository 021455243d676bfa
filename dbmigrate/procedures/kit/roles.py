"""Who is the primary: the one decision every procedure makes before it touches a cluster."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import AuthFailed, DbmigrateError


def find_primary(names: Iterable[str], inspector: Callable[[str], Inspector],
                 address: Callable[[str], tuple[str, int]] | None = None) -> str:
    """The one writable server that replicates from nobody; refuse anything else, naming
    what is wrong: a login refused, or a writable server that is no part of the cluster's
    replication (given `address`, the host and port its replicas would use)."""
    writable, unreachable, refused = [], [], []
    sources: set[tuple[str, int]] = set()
    for name in names:
        try:
            insp = inspector(name)
            st = insp.replica_status()
            if st is not None and st.source_host:
                sources.add((st.source_host, int(st.source_port or 0)))
            if not insp.read_only() and (st is None or not st.source_host):
                writable.append(name)
        except AuthFailed as e:
            refused.append(e)
        except DbmigrateError as e:
            unreachable.append(f"{name} ({e.message})")
    if len(writable) == 1:
        return writable[0]
    if not writable and refused:
        # The login, not the topology: the hint names the credentials to fix.
        raise DbmigrateError(f"no writable primary found: the tool could not log in: "
                             + "; ".join(e.message for e in refused), hint=refused[0].hint)
    if not writable:
        raise DbmigrateError("no writable primary found in the cluster" +
                             (f"; unreachable: {', '.join(unreachable)}" if unreachable else ""),
                             hint="dbmigrate topology show --inventory FILE --cluster NAME")
    sourced = [w for w in writable if address is not None and address(w) in sources]
    if len(sourced) == 1:
        strays = [w for w in writable if w != sourced[0]]
        raise DbmigrateError(f"{', '.join(strays)} {'is' if len(strays) == 1 else 'are'} writable but not a replica "
                             f"of this cluster: {'it replicates' if len(strays) == 1 else 'they replicate'} from "
                             f"nobody and no server replicates from {'it' if len(strays) == 1 else 'them'} "
                             f"(the primary is {sourced[0]}, which its replicas follow)",
                             hint=f"make {', '.join(strays)} a read-only replica of {sourced[0]}, or remove it from "
                                  f"the cluster in the inventory")
    raise DbmigrateError(f"more than one writable primary: {', '.join(writable)}",
                         hint="set read_only=ON on the one that must not take writes before any switchover")


def find_primary_of(servers: dict[str, Any]) -> str:
    """find_primary over open Server objects by name."""
    return find_primary(servers, lambda name: Inspector(servers[name]),
                        lambda name: (servers[name].host, int(servers[name].port)))
