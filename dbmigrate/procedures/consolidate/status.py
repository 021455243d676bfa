"""Where each shard of a plan is served now: its old server or its new instance.

`shard_status` is pure (probes in, verdict out), so that every combination of
routes, read_only flags and replication states is decided by one rule set:
- served by: the server the shard's route names as writer (old server, new
  instance, or something else), or, without a route, the only writable side;
- stage: not provisioned -> provisioned -> replicating (lag) -> moved (route on the
  instance, instance writable, old server fenced) -> back on the old server after a
  rollback (the old server writable again, replicating back from the instance);
- problems: both sides writable, the route naming a read-only or silent server,
  a route that cannot be read (a relay that does not answer), replication stopped
  with an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dbmigrate.db.flavor import ReplicaStatus
from dbmigrate.procedures.consolidate.model import connection_name


@dataclass
class Probe:
    """What one server said (or that it did not answer)."""

    name: str
    address: str
    error: str | None = None
    read_only: bool | None = None
    schemas: set[str] = field(default_factory=set)
    connections: dict[str, ReplicaStatus] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        return self.error is None


@dataclass
class ShardStatus:
    shard: str
    old: str
    instance: str
    served_by: str  # "old server", "new instance", "elsewhere: ADDR", "unknown"
    stage: str
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "old": self.old, "instance": self.instance, "served_by": self.served_by,
                "stage": self.stage, "problems": list(self.problems)}


def _writable(p: Probe) -> bool:
    return p.answered and p.read_only is False


def _replication(conn: ReplicaStatus | None) -> tuple[str, list[str]]:
    if conn is None:
        return "", []
    if conn.running:
        lag = f", {conn.seconds_behind}s behind" if conn.seconds_behind is not None else ""
        return f"replicating{lag}", []
    if conn.last_error:
        return "replication stopped", [f"replication stopped: {conn.last_error}"]
    return "replication stopped", []


def shard_status(shard: str, old: Probe, inst: Probe, route: str | None, connection: str,
                 route_unread: str | None = None) -> ShardStatus:
    """`route_unread`: why the shard's route could not be read (its relay does not answer): who
    serves it is then not known, whatever the servers say, and that is a problem."""
    problems: list[str] = []
    if route_unread is not None:
        served = "unknown (route not read)"
        problems.append(route_unread)
    elif route is None:
        sides = [p for p in (old, inst) if _writable(p)]
        served = "unknown (no route)" if len(sides) != 1 else ("old server" if sides[0] is old else "new instance")
    elif route == old.address:
        served = "old server"
    elif route == inst.address:
        served = "new instance"
    else:
        served = f"elsewhere: {route}"
        problems.append(f"the route names {route}, neither {old.name} nor {inst.name}")
    if not old.answered:
        problems.append(f"{old.name} does not answer: {old.error}")
    if _writable(old) and _writable(inst) and shard in inst.schemas:
        problems.append(f"both {old.name} and {inst.name} are writable")
    target = old if served == "old server" else inst if served == "new instance" else None
    if target is not None and target.answered and target.read_only:
        problems.append(f"routed to {target.name}, which is read-only (fenced)")

    if not inst.answered:
        stage = "not provisioned"
    elif shard not in inst.schemas:
        stage = "provisioned, not seeded"
    else:
        forward, why = _replication(inst.connections.get(connection))
        back, why_back = _replication(old.connections.get(connection_name(inst.name)))
        if served == "new instance" and _writable(inst):
            stage = "moved" + (f" (old server {back} from it)" if back else "")
            problems += why_back
        elif served == "old server" and _writable(old) and back:
            stage = f"back on the old server (it was moved; {back} from the instance)"
            problems += why_back
        elif forward:
            stage = f"seeded, {forward}"
            problems += why
        elif served == "old server" and _writable(old) and inst.answered and inst.read_only:
            # What a rollback leaves: routes and writes back on the old server, the instance fenced,
            # no connection either way. Its copy no longer follows the shard.
            stage = "on the old server; the instance's copy is not replicating (as after a rollback)"
        else:
            stage = "seeded, not replicating"
    return ShardStatus(shard, old.name, inst.name, served, stage, problems)
