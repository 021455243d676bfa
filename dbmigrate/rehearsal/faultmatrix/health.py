"""The cluster's health after a scenario, read from the servers and the router:
exactly one writable server, every other one replicating from it with both threads
running, the router sending writes to it, and equal table checksums everywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dbmigrate.db.inspector import Inspector
from dbmigrate.exceptions import DbmigrateError
from dbmigrate.routing import router_for

CHECKSUM_SCHEMAS = ("sbtest", "app")


@dataclass
class Health:
    writer: str | None
    problems: list[str] = field(default_factory=list)
    shape: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "writer": self.writer, "problems": self.problems, "shape": self.shape}


def shape(inv, cluster: str) -> dict[str, dict[str, Any]]:
    """Per server: read_only, the server it replicates from (by name) and whether both threads run."""
    addr = {f"{s.host}:{s.port}": n for n, s in inv.cluster(cluster).servers.items()}
    out: dict[str, dict[str, Any]] = {}
    for n in inv.cluster(cluster).servers:
        try:
            with inv.open(n) as srv:
                i = Inspector(srv)
                st = i.replica_status()
                out[n] = {"read_only": i.read_only(),
                          "source": addr.get(f"{st.source_host}:{st.source_port}") if st and st.source_host else None,
                          "running": bool(st and st.running),
                          "error": (st.last_error if st else "")[:200]}
        except DbmigrateError as e:
            out[n] = {"down": e.message[:200]}
    return out


def writers(s: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n, v in s.items() if "down" not in v and not v["read_only"]]


def router_writer(inv, cluster: str) -> str | None:
    """The server HAProxy sends writes to (by name), None when it sends them to none or several."""
    state = router_for(inv, cluster).current()
    return {f"{s.host}:{s.port}": n for n, s in inv.cluster(cluster).servers.items()}.get(state.writer or "")


def check(inv, cluster: str, catch_up_s: float = 30.0, checksums: bool = True) -> Health:
    s = shape(inv, cluster)
    problems = [f"{n} is down ({v['down']})" for n, v in s.items() if "down" in v]
    w = writers(s)
    if len(w) != 1:
        problems.append(f"{len(w)} writable servers ({', '.join(w) or 'none'})")
        return Health(None, problems, s)
    writer = w[0]
    for n, v in s.items():
        if n == writer or "down" in v:
            continue
        if v["source"] != writer or not v["running"]:
            problems.append(f"{n} replicates from {v['source'] or 'nobody'} (threads "
                            f"{'running' if v['running'] else 'stopped'}{': ' + v['error'] if v['error'] else ''}), "
                            f"not from {writer}")
    try:
        routed = router_writer(inv, cluster)
        if routed != writer:
            problems.append(f"the router sends writes to {routed or 'no single server'}, not to {writer}")
    except DbmigrateError as e:
        problems.append(f"router: {e.message}")
    if problems or not checksums:
        return Health(writer, problems, s)
    problems += _checksum_problems(inv, cluster, writer, catch_up_s)
    return Health(writer, problems, s)


def _checksum_problems(inv, cluster: str, writer: str, catch_up_s: float) -> list[str]:
    """Every replica applies the writer's position (bounded), then CHECKSUM TABLE must match the writer's."""
    problems = []
    with inv.open(writer) as w:
        wi = Inspector(w)
        pos = wi.gtid_binlog_pos()
        expected = {schema: wi.table_checksums(schema) for schema in CHECKSUM_SCHEMAS}
    for n in inv.cluster(cluster).servers:
        if n == writer:
            continue
        with inv.open(n) as srv:
            i = Inspector(srv)
            if not i.wait_for_gtid(pos, catch_up_s):
                problems.append(f"{n} did not apply {writer}'s position {pos} within {catch_up_s:g}s")
                continue
            for schema, sums in expected.items():
                got = i.table_checksums(schema)
                differ = sorted(t for t in set(sums) | set(got) if sums.get(t) != got.get(t))
                if differ:
                    problems.append(f"{n}: checksums differ from {writer} in {schema}.{', '.join(differ)}")
    return problems
